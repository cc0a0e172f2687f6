"""`make demo` runs examples/mlp.py: it must print the §7 table and train one step."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mlp_example_prints_the_spec_table_and_runs_forward_and_backward():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mlp.py")],
        capture_output=True, text=True, timeout=300, check=True,
    )
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    table = [
        "Network: [B, 128] -> [B, 10]  dtype=float32",
        "index  name  operation  input shape  output shape",
        "0      n0    linear     [B, 128]     [B, 64]",
        "1      n1    relu       [B, 64]      [B, 64]",
        "2      n2    linear     [B, 64]      [B, 10]",
    ]
    start = lines.index(table[0])
    assert lines[start:start + 5] == table
    assert any(line.startswith("forward: scores [32, 10]") for line in lines)
    assert any(line.startswith("backward: gradient norm") for line in lines)
