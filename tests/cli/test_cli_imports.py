"""The `hndl` command and ``import hndl.torch`` load no compiler, tracer or model library (issue 30, item 7).

``torch.compiler.disable`` imports ``torch._dynamo``, and with it sympy, triton,
torch.distributed.tensor and torch.fx's symbolic shapes: about 1.2 s of CPU, more than
``import torch`` costs beyond Python's start. When ``hndl.torch.programs`` called it at import,
every `hndl` command took twice the CPU of ``python -c "import torch"``. These tests guard the
imports themselves (no timing in the normal suite; tests/benchmark/test_cli_speed.py measures
the CPU time side by side): a fresh interpreter imports torch, then runs each step below and
reports which of the heavy modules the step loaded first. A module ``import torch`` loads by itself
(in some other torch release) is not counted against HNDL.

The commands run with the first-party packs named by --packs, so a third-party pack installed
beside them (which may import what it likes) cannot change the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hndl.packs import installed_first_party

#: Modules that compiling, exporting or tracing a pretrained model needs, and resolving a spec does not.
HEAVY = (
    "torch._dynamo", "torch._inductor", "torch._functorch.aot_autograd", "torch.fx.experimental.symbolic_shapes",
    "torch.distributed.tensor", "torch.onnx", "sympy", "mpmath", "triton",
    "transformers", "timm", "torchvision", "diffusers", "safetensors", "huggingface_hub",
)

#: Run in a fresh interpreter: argv[1] is a JSON list of steps, each [label, kind, payload].
PROBE = """\
import contextlib, io, json, sys
import torch

heavy = json.loads(sys.argv[2])
before = {name for name in heavy if name in sys.modules}
loaded = {}
for label, kind, payload in json.loads(sys.argv[1]):
    if kind == "import":
        __import__(payload)
        status = 0
    elif kind == "exec":
        exec(payload, {})
        status = 0
    else:
        from hndl.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            status = main(payload)
    new = sorted(name for name in heavy if name in sys.modules and name not in before)
    before.update(new)
    loaded[label] = [status, new]
print(json.dumps(loaded))
"""

MLP = "linear(64)\nrelu()\nlinear()\n"


def _probe(steps: list) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(steps), json.dumps(HEAVY)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_hndl_and_its_torch_backend_loads_no_compiler():
    loaded = _probe([
        ["import hndl", "import", "hndl"],
        ["import hndl.torch", "import", "hndl.torch"],
        ["import hndl.cli", "import", "hndl.cli"],
    ])
    assert loaded == {
        "import hndl": [0, []], "import hndl.torch": [0, []], "import hndl.cli": [0, []],
    }, "hndl imports heavy modules at import time (import them where compiling or tracing needs them)"


def test_building_and_calling_a_network_loads_no_compiler():
    """The hook probe each build installs marks itself constant for dynamo by the attribute
    ``torch._dynamo.assume_constant_result`` sets, without importing dynamo to call it."""
    loaded = _probe([
        ["build", "exec", "from hndl.torch import network\n"
                          "model = network('linear(4)\\nrelu()', input_shape=('B', 3), output_shape=('B', 4), "
                          "device='cpu')"],
        ["call", "exec", "import torch\nfrom hndl.torch import network\n"
                         "network('linear(4)', input_shape=('B', 3), output_shape=('B', 4), device='cpu')"
                         "(torch.randn(2, 3)).sum().backward()"],
    ])
    assert loaded == {"build": [0, []], "call": [0, []]}


def test_every_hndl_command_runs_without_loading_a_compiler_or_model_library(tmp_path):
    packs = ",".join(installed_first_party())
    assert "basic" in packs
    spec = tmp_path / "mlp.hndl"
    spec.write_text(MLP, encoding="utf-8")
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    contract = [str(spec), "--input-shape", "B,32", "--output-shape", "B,10", "--packs", packs]
    other = [str(spec), "--input-shape", "B,16", "--output-shape", "B,10", "--packs", packs]
    commands = {
        "resolve": ["resolve", *contract, "--save", str(first)],
        "resolve again": ["resolve", *other, "--save", str(second)],
        "explain": ["explain", *contract],
        "graph (Mermaid)": ["graph", *contract, "-o", "-"],
        "graph (DOT)": ["graph", *contract, "-o", str(tmp_path / "mlp.dot")],
        "diff": ["diff", str(first), str(second), "--packs", packs],
        "catalog": ["catalog", "linear", "--packs", packs],
        "a failing resolve": ["resolve", str(spec), "--input-shape", "B,32", "--output-shape", "B,10,1",
                              "--packs", packs],
    }
    loaded = _probe([[label, "cli", argv] for label, argv in commands.items()])
    statuses = {label: status for label, (status, _) in loaded.items()}
    assert statuses == {**dict.fromkeys(commands, 0), "diff": 1, "a failing resolve": 2}
    heavy = {label: modules for label, (_, modules) in loaded.items() if modules}
    assert heavy == {}, f"hndl commands imported heavy modules: {heavy}"


def test_the_failure_path_carries_what_torch_compiler_disable_sets():
    """``outside_graph`` is built without importing dynamo (the first test), yet dynamo skips it as
    a ``torch.compiler.disable``-d call (tests/torch/test_compile.py checks the fullgraph reason)."""
    from hndl.torch.programs import OUTSIDE_GRAPH_REASON, _call_outside_graph, outside_graph

    assert outside_graph._torchdynamo_disable is True
    assert outside_graph._torchdynamo_disable_msg == OUTSIDE_GRAPH_REASON
    assert outside_graph._torchdynamo_orig_callable is _call_outside_graph
    assert OUTSIDE_GRAPH_REASON.startswith("HNDL: a contract or registered-state check failed while tracing")


def test_called_eagerly_the_failure_path_raises_the_error_it_wraps():
    """Called eagerly (no compilation anywhere), the wrapper still raises the HNDLError it wraps."""
    from hndl import HNDLError
    from hndl.torch.programs import outside_graph

    class Graph:
        def _reject(self, given):
            raise HNDLError("E_BINDING", f"{given} positional inputs", remedies=("Pass them by keyword.",))

    with pytest.raises(HNDLError) as error:
        outside_graph(Graph(), "_reject", 2)
    assert error.value.code == "E_BINDING" and error.value.message == "2 positional inputs"
