"""The CUDA gate (PyTorch backend issue, item 7), as one standalone command.

Runs ``tests/torch/test_cuda.py`` (build, forward + backward against CPU float32, save and
reload, in float32 / float16 / bfloat16, for the MLP, the §7 generator, a conv stack, a
split/chunk/concat/add graph, adaptive_norm and a custom operator) with
``pytest -m cuda -p no:cacheprovider -q``. Unlike the pytest module on its own, which skips
every test with "CUDA is not available on this machine", this script fails where there is no
GPU: it prints why and exits 2. It exits 1 if any test fails or is skipped, 0 only when every
test passed.

On the GPU machine, from the repository root (the venv must have a CUDA build of torch)::

    .venv/bin/python tests/cuda_gate.py            # or: python tests/cuda_gate.py
    .venv/bin/python tests/cuda_gate.py -x -rA     # extra arguments go to pytest

and record the printed versions, device and summary line in IMPLEMENTATION.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "tests" / "torch" / "test_cuda.py"


class _Outcomes:
    """A tiny pytest plugin: counts what happened, so skips can fail the gate too."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.counts[report.outcome] = self.counts.get(report.outcome, 0) + 1


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import torch

    print(f"torch {torch.__version__}; built with CUDA {torch.version.cuda}; "
          f"cuDNN {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}")
    if not torch.cuda.is_available():
        why = ("this torch build has no CUDA support" if torch.version.cuda is None
               else "torch has CUDA support but sees no usable GPU (driver, CUDA_VISIBLE_DEVICES?)")
        print(f"CUDA gate FAILED: CUDA is not available on this machine: {why}", file=sys.stderr)
        return 2
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    print(f"device cuda:{index} of {torch.cuda.device_count()}: {torch.cuda.get_device_name(index)} "
          f"(compute capability {major}.{minor}); bfloat16 supported: {torch.cuda.is_bf16_supported()}")

    import pytest

    outcomes = _Outcomes()
    code = pytest.main([str(MODULE), "-m", "cuda", "-p", "no:cacheprovider", "-q", *argv], plugins=[outcomes])
    print(f"CUDA gate outcomes: {outcomes.counts}")
    if code != 0:
        print(f"CUDA gate FAILED: pytest exited with {int(code)}", file=sys.stderr)
        return 1
    if outcomes.counts.get("skipped") or not outcomes.counts.get("passed"):
        print("CUDA gate FAILED: tests were skipped or none ran", file=sys.stderr)
        return 1
    print("CUDA gate passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
