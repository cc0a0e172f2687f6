"""The examples in examples/ run as a user would run them, and print what they promise.

`make demo` runs examples/demo.py: widths inferred both ways, an explained failure, a falling
training loss, a saved and restored plan. examples/mlp.py prints the §7 table and trains one step.
"""

import os
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


# -- every other example in examples/ -------------------------------------------------------------------------
def _run_example(name: str, tmp_path: Path) -> list[str]:
    """Run examples/<name>.py as a user would, offline, and return its stdout lines."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / f"{name}.py")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, f"examples/{name}.py exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return [line.rstrip() for line in result.stdout.splitlines()]


def _contains_block(lines: list[str], block: list[str]) -> bool:
    starts = [index for index, line in enumerate(lines) if line == block[0]]
    return any(lines[start:start + len(block)] == block for start in starts)


def _loss_fell(lines: list[str], prefix: str) -> bool:
    (line,) = [line for line in lines if line.startswith(prefix)]
    first, last = (float(value) for value in line[len(prefix):].split(" -> "))
    return last < first


EXPECTED = {
    "generator": [
        "Network: [B, 128] -> [B, 3, 32, 32]  dtype=float32",
        "index  name  operation  input shape       output shape",
        "0      n0    linear     [B, 128]          [B, 8192]",
        "1      n1    relu       [B, 8192]         [B, 8192]",
        "2      n2    reshape    [B, 8192]         [B, 512, 4, 4]",
        "3      n3    deconv     [B, 512, 4, 4]    [B, 256, 8, 8]",
        "4      n4    relu       [B, 256, 8, 8]    [B, 256, 8, 8]",
        "5      n5    deconv     [B, 256, 8, 8]    [B, 128, 16, 16]",
        "6      n6    relu       [B, 128, 16, 16]  [B, 128, 16, 16]",
        "7      n7    deconv     [B, 128, 16, 16]  [B, 64, 32, 32]",
        "8      n8    relu       [B, 64, 32, 32]   [B, 64, 32, 32]",
        "9      n9    conv       [B, 64, 32, 32]   [B, 3, 32, 32]",
        "10     n10   tanh       [B, 3, 32, 32]    [B, 3, 32, 32]",
    ],
    "discriminator": [
        "Network: x=[B, 1, 28, 28], y=[B, 10] -> logits=[B, 1], features=[B, 12544] dtype=float32",
    ],
    "style_graph": [
        "Network: z=[B, 128] -> features=[B, 64, 4, 4] dtype=float32",
    ],
    "gpt": [
        "Network: [B, 16] -> [B, 16, 64]  dtype=float32  input_dtype=int64",
        "index  name        operation             input shape  output shape",
        "0      tokens      embedding             [B, 16]      [B, 16, 32]",
        "1      positions   positional_embedding  [B, 16, 32]  [B, 16, 32]",
        "2      block1      transformer_block     [B, 16, 32]  [B, 16, 32]",
        "3      block2      transformer_block     [B, 16, 32]  [B, 16, 32]",
        "4      final_norm  layer_norm            [B, 16, 32]  [B, 16, 32]",
        "5      head        linear                [B, 16, 32]  [B, 16, 64]",
    ],
    "custom_operator": [
        "Network: [B, 128] -> [B, 10]  dtype=float32",
        "index  name  operation  input shape  output shape",
        "0      n0    linear     [B, 128]     [B, 64]",
        "1      n1    silu       [B, 64]      [B, 64]",
        "2      n2    linear     [B, 64]      [B, 10]",
    ],
    "pretrained_backbone": [
        "Network: [B, 3, 16, 16] -> [B, 5]  dtype=float32",
        "index  name      operation   input shape     output shape",
        "0      backbone  pretrained  [B, 3, 16, 16]  [B, 32]",
        "1      head      linear      [B, 32]         [B, 5]",
    ],
    "diffusion_unet": [
        "Network: sample=[B, 3, 16, 16], timestep=[B, 1] -> output=[B, 3, 16, 16] dtype=float32 input_dtype=timestep:int64",
    ],
}


def test_every_example_is_tested():
    tested = {"mlp", "demo", *EXPECTED}
    assert {path.stem for path in (ROOT / "examples").glob("*.py")} == tested


def test_generator_example_resolves_the_spec_table_and_reports_the_30x30_contradiction(tmp_path):
    lines = _run_example("generator", tmp_path)
    assert _contains_block(lines, EXPECTED["generator"])
    assert "forward: [4, 128] -> [4, 3, 32, 32]" in lines[lines.index("") + 1]
    for row in ("output [B, 3, 32, 32]: seed [B, 512, 4, 4], n0.out_features = 8192 (inferred)",
                "output [B, 3, 64, 64]: seed [B, 512, 8, 8], n0.out_features = 32768 (inferred)",
                "output [B, 3, 32, 64]: seed [B, 512, 4, 8], n0.out_features = 16384 (inferred)"):
        assert f"  {row}" in lines
    error = lines[lines.index("A 30x30 output cannot be reached by three doublings:") + 1]
    assert error.startswith("E_CONSTRAINT (node ") and "3.75" in error
    assert any(line.startswith("  remedy: ") for line in lines)
    literal = lines[lines.index("An explicit first width stands, and contradicts the contract:") + 1]
    assert literal.startswith("E_") and "128" in literal


def test_discriminator_example_uses_named_ports_in_both_frontends(tmp_path):
    lines = _run_example("discriminator", tmp_path)
    assert lines[0] == EXPECTED["discriminator"][0]
    assert any(line.startswith("label_projection  linear      x=[B, 10] <- input:y") for line in lines)
    assert "callable digest matches: True" in lines
    assert "output logits: [8, 1]" in lines and "output features: [8, 12544]" in lines
    assert any(line.startswith("loss ") for line in lines)


def test_style_graph_example_infers_both_widths_and_starts_as_instance_norm(tmp_path):
    lines = _run_example("style_graph", tmp_path)
    assert lines[0] == EXPECTED["style_graph"][0]
    assert "project.out_features = 1024 (inferred)" in lines
    assert "style.out_features = 128 (inferred)" in lines
    assert "norm.eps = 1e-05 (default)" in lines
    assert "forward: z [4, 128] -> features [4, 64, 4, 4]" in lines
    assert "zero-initialized style equals plain instance norm: True" in lines
    assert "style weight receives a gradient at zero init: True" in lines


def test_gpt_example_resolves_from_the_token_contract_and_trains(tmp_path):
    lines = _run_example("gpt", tmp_path)
    assert _contains_block(lines, EXPECTED["gpt"])
    assert "positions: length=16, embedding_dim=32" in lines
    assert "head.out_features = 64 (inferred)" in lines
    assert "logits: [8, 16, 64]" in lines
    assert _loss_fell(lines, "training loss: ")


def test_custom_operator_example_registers_silu_and_guards_restoration(tmp_path):
    lines = _run_example("custom_operator", tmp_path)
    assert _contains_block(lines, EXPECTED["custom_operator"])
    assert "registered: alias 'silu' -> example.silu@1 (class SiLU)" in lines
    assert "plan operators: linear@1, example.silu@1, linear@1" in lines
    assert "n2.out_features = 10 (inferred)" in lines
    assert "forward: [5, 10]; silu equals x * sigmoid(x): True" in lines
    assert "restored without the registration: E_STATE_VERSION" in lines
    assert "restored with it: same semantic digest = True" in lines


def test_pretrained_backbone_example_runs_offline_from_a_local_checkpoint(tmp_path):
    lines = _run_example("pretrained_backbone", tmp_path)
    assert "checkpoint files: config.json, model.safetensors" in lines
    assert _contains_block(lines, EXPECTED["pretrained_backbone"])
    assert any(line.startswith("backbone revision: sha256:") and line.endswith("(inferred)") for line in lines)
    assert "head input width read from the checkpoint: 32" in lines
    assert "backbone in eval mode while training: True" in lines
    assert "backbone weights unchanged: True" in lines
    assert _loss_fell(lines, "head training loss: ")


def test_diffusion_unet_example_builds_the_unet_and_trains(tmp_path):
    lines = _run_example("diffusion_unet", tmp_path)
    assert lines[0] == EXPECTED["diffusion_unet"][0]
    assert "nodes: 121; resnet blocks: 8; attention blocks: 4" in lines
    assert "parameters: 702499; buffers: nodes.n_time_proj.frequencies (not saved: True)" in lines
    assert _loss_fell(lines, "noise-prediction loss (mean of 5 steps): ")
    assert any(line.startswith("samples: [4, 3, 16, 16], values in [") for line in lines)


def test_the_demo_shows_inference_both_ways_an_explained_failure_training_and_restoring(tmp_path):
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo: install\n\t$(PY) examples/demo.py\n" in makefile
    lines = _run_example("demo", tmp_path)
    assert _contains_block(lines, [
        "Network: [B, 2] -> [B, 3]  dtype=float32",
        "index  name     operation  input shape  output shape",
        "0      hidden1  linear     [B, 2]       [B, 64]",
        "1      n1       relu       [B, 64]      [B, 64]",
        "2      hidden2  linear     [B, 64]      [B, 64]",
        "3      n3       relu       [B, 64]      [B, 64]",
        "4      classes  linear     [B, 64]      [B, 3]",
        "  hidden1.in_features = 2 (inferred: forward, from the input contract [B, 2])",
        "  hidden2.in_features = 64 (inferred: forward, from hidden1's 64)",
        "  classes.out_features = 3 (inferred: backward, from the output contract [B, 3])",
    ])
    failure = lines.index("  caught HNDLError E_CONSTRAINT; print(error) shows:")
    assert lines[failure + 1].startswith("  E_CONSTRAINT (node classes; line 6, column 1): ")
    assert any(line.startswith("    because: ") for line in lines[failure + 1:])
    assert any(line.startswith("    remedy: ") for line in lines[failure + 1:])
    losses = [float(line.split("loss ")[1]) for line in lines if line.startswith("  step ")]
    assert len(losses) == 7 and losses[-1] < losses[0] / 10, losses
    accuracy = next(line for line in lines if line.startswith("  accuracy on 600 held-out points: "))
    assert float(accuracy.rsplit(" ", 1)[1].rstrip("%")) > 90
    assert any(line.startswith("  semantic digest: sha256:") for line in lines)
    assert lines[-1] == "  restored model gives the same outputs: True"
