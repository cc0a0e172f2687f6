"""The CUDA gate (PyTorch backend issue, item 7): build, run, save and reload on a GPU.

For each network below (the MLP; the §7 worked generator; a conv stack; a split / chunk / concat /
add graph; adaptive_norm; and a custom operator registered on a fresh ``Registry.builtins()``) and
each compute dtype float32, float16 and bfloat16:

* the plan is built on ``device="cuda"``; every parameter lands on the GPU in the compute dtype
  and the build receipt says so;
* forward and backward are compared against the same source resolved in float32 and built on
  the CPU, with the GPU model's state_dict copied in (the low-precision values are exact in
  float32, so both start from identical weights) and the same inputs (rounded to the compute
  dtype first, then widened for the CPU);
* saving the plan JSON and the state_dict, then restoring (``ResolvedPlan.from_json`` + ``build``
  on cuda + ``load_state_dict``) gives bit-identical outputs;
* ``device="cuda:99"`` fails with E_RUNTIME before anything is built;
* ``torch.compile`` (eager backend, then inductor in each dtype) matches eager execution on the
  GPU, retraces after moves to the CPU and back, and still rejects a CPU input with E_RUNTIME.

Tolerances. Forward outputs, element by element (``torch.testing.assert_close``): float32 atol
1e-4 rtol 1e-4; float16 and bfloat16 atol 5e-2 rtol 5e-2. Gradients (every input and every
parameter, from a fixed random cotangent on the outputs), as the relative L2 error
``||g - g_ref|| / ||g_ref||``: float32 1e-4, float16 0.1, bfloat16 0.2. The gradient bounds are
looser because low precision moves a few pre-activations that sit next to zero across it, which
flips their ReLU / leaky-ReLU slope; each flip passes or drops one whole term of the backward
pass, so the error grows like the square root of the flipped fraction, not like the dtype's
rounding. Measured by emulating these checks on the CPU in half precision (8 initialization
seeds): the MLP, branch, adaptive_norm and custom networks stay under 0.1% (float16) and 0.8%
(bfloat16), but the generator reaches 3.5% / 6.6% and the conv stack 3.4% / 9.1%; a wiring,
dtype or port-order mistake shows up as an error of order 1. TF32 is switched off for the
duration (it is on by default for cuDNN convolutions and would not meet the float32 bounds), and
cuDNN is put in deterministic mode so the reload check can demand identical outputs. Weights
come from ``initialization_seed=0``, so a given GPU and torch build always sees the same numbers.

Every test here is marked ``cuda`` and skips, with the reason "CUDA is not available on this
machine", where torch sees no GPU. ``python tests/cuda_gate.py`` runs this module and fails
instead of skipping.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry, ResolvedPlan
from hndl.torch import build

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
]

DEVICE = "cuda"
BATCH = 4
TOLERANCES = {  # forward outputs, element by element
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 5e-2, "rtol": 5e-2},
    "bfloat16": {"atol": 5e-2, "rtol": 5e-2},
}
GRADIENT_TOLERANCES = {"float32": 1e-4, "float16": 0.1, "bfloat16": 0.2}  # relative L2 error
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""


def custom_registry() -> Registry:
    """A fresh Registry.builtins() plus a small operator with parameters and a buffer."""
    registry = Registry.builtins()

    @registry.operator(
        "gated_affine",
        identity="test.gated_affine",
        version=1,
        summary="Per-feature gated affine map, x * sigmoid(gate) * scale + shift.",
        shape="x[B, C] -> out[B, C]",
        category="test",
    )
    class GatedAffine(nn.Module):
        """A per-feature gate and shift; the fixed scale is a buffer, so it moves and casts too."""

        def __init__(self, C: int) -> None:
            super().__init__()
            self.gate = nn.Parameter(torch.linspace(-1.0, 1.0, C))
            self.shift = nn.Parameter(torch.linspace(0.5, -0.5, C))
            self.register_buffer("scale", torch.full((C,), 1.5))

        def forward(self, x):
            return x * torch.sigmoid(self.gate) * self.scale + self.shift

    return registry


# name: (source, contract, registry factory)
NETWORKS = {
    "mlp": (
        "linear(64)\nrelu()\nlinear(64)\nrelu()\nlinear(10)\n",
        {"input_shape": ("B", 32), "output_shape": ("B", 10)},
        Registry.builtins,
    ),
    "generator": (GENERATOR, {"input_shape": ("B", 128), "output_shape": ("B", 3, 32, 32)}, Registry.builtins),
    "conv_stack": (
        'conv(16, kernel_size=3, stride=1, padding=1)\nleaky_relu(0.2)\n'
        'conv(32, policy="down2")\nleaky_relu(0.2)\nconv(32, policy="down2")\nflatten()\nlinear(10)\n',
        {"input_shape": ("B", 3, 16, 16), "output_shape": ("B", 10)},
        Registry.builtins,
    ),
    "branches": (
        'a, b = split(32, name="partition")\n'
        'c1, c2 = chunk(b, 2, name="halves")\n'
        'linear(a, 16, name="content")\n'
        'features = tanh(name="features")\n'
        'summed = add(features, c1, name="summed")\n'
        'concat(summed, c2, features, name="joined")\n',
        {"input_shape": ("B", 64), "output_shape": ("B", 48)},
        Registry.builtins,
    ),
    "adaptive_norm": (
        "z1, z2 = split(64)\nlinear(z1)\nfeatures = reshape(32, 4, 4)\nadaptive_norm(features, z2)\n",
        {"input_shape": ("B", 128), "output_shape": ("B", 32, 4, 4)},
        Registry.builtins,
    ),
    "custom": (
        "linear(24)\ngated_affine()\nrelu()\nlinear(8)\ngated_affine()\n",
        {"input_shape": ("B", 16), "output_shape": ("B", 8)},
        custom_registry,
    ),
}


@pytest.fixture(autouse=True)
def exact_float32_and_deterministic_cudnn():
    """No TF32 (new fp32_precision API where torch has it), deterministic cuDNN; restored afterwards."""
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv if hasattr(torch.backends.cudnn, "conv") else None
    new_api = hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision")
    saved = (
        (matmul.fp32_precision, conv.fp32_precision) if new_api
        else (matmul.allow_tf32, torch.backends.cudnn.allow_tf32),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    if new_api:
        matmul.fp32_precision = conv.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        precision, torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved
        if new_api:
            matmul.fp32_precision, conv.fp32_precision = precision
        else:
            matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = precision


# -- helpers (device-agnostic, so the same checks can be exercised on CPU while developing) -------
def resolve(name: str, dtype: str, registry: Registry) -> ResolvedPlan:
    source, contract, _ = NETWORKS[name]
    return hndl.resolve(source, registry=registry, dtype=dtype, **contract)


def make_inputs(plan: ResolvedPlan, device, *, seed: int = 0) -> dict[str, torch.Tensor]:
    """One seeded float32 tensor per declared input, rounded to its declared dtype, on ``device``."""
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    for port in plan.inputs:
        shape = [BATCH if entry == plan.batch else entry for entry in port["shape"]]
        value = torch.randn(shape, generator=generator)
        inputs[port["name"]] = value.to(device=device, dtype=TORCH_DTYPES[port["dtype"]])
    return inputs


def relative_error(tensor: torch.Tensor, reference: torch.Tensor) -> float:
    """||tensor - reference|| / ||reference|| (the plain norm of the difference if the reference is 0)."""
    difference = (tensor.double() - reference.double()).norm().item()
    scale = reference.double().norm().item()
    return difference / scale if scale > 0 else difference


def forward_backward(model, inputs: dict[str, torch.Tensor], cotangents: dict[str, torch.Tensor]):
    """Outputs, input gradients and parameter gradients, all as float32 CPU tensors."""
    leaves = {name: value.detach().clone().requires_grad_(True) for name, value in inputs.items()}
    model.zero_grad(set_to_none=True)
    outputs = model(**leaves)
    loss = sum((outputs[name].float() * cotangents[name].to(outputs[name].device)).sum() for name in outputs)
    loss.backward()
    missing = [name for name, param in model.named_parameters() if param.grad is None]
    missing += [name for name, leaf in leaves.items() if leaf.grad is None]
    assert not missing, f"no gradient reached {missing}"
    as_cpu = lambda t: t.detach().float().cpu()  # noqa: E731
    return (
        {name: as_cpu(value) for name, value in outputs.items()},
        {name: as_cpu(leaf.grad) for name, leaf in leaves.items()},
        {name: as_cpu(param.grad) for name, param in model.named_parameters()},
    )


def check_against_cpu_float32(name: str, dtype: str, device) -> None:
    registry = NETWORKS[name][2]()
    plan = resolve(name, dtype, registry)
    model = build(plan, device=device, registry=registry, initialization_seed=0)
    target = torch.device(device)
    compute = TORCH_DTYPES[dtype]
    assert model.build_receipt["dtype"] == dtype
    assert torch.device(model.build_receipt["device"]).type == target.type
    for key, value in model.state_dict().items():
        assert value.device.type == target.type, key
        if value.is_floating_point():
            assert value.dtype == compute, key

    reference = build(resolve(name, "float32", registry), device="cpu", registry=registry)
    reference.load_state_dict({key: value.detach().float().cpu() for key, value in model.state_dict().items()})

    inputs = make_inputs(plan, device)
    reference_inputs = {key: value.float().cpu() for key, value in inputs.items()}
    generator = torch.Generator().manual_seed(1)
    cotangents = {
        port["name"]: torch.randn([BATCH if e == plan.batch else e for e in port["shape"]], generator=generator)
        for port in plan.outputs
    }
    ours = forward_backward(model, inputs, cotangents)
    theirs = forward_backward(reference, reference_inputs, cotangents)
    tolerance = TOLERANCES[dtype]
    outputs, input_grads, param_grads = ours
    expected_outputs, expected_input_grads, expected_param_grads = theirs
    assert list(outputs) == list(expected_outputs)
    for key in outputs:
        torch.testing.assert_close(outputs[key], expected_outputs[key], **tolerance, msg=lambda m: f"output {key!r}: {m}")
    bound = GRADIENT_TOLERANCES[dtype]
    for kind, got, expected in (("input", input_grads, expected_input_grads), ("parameter", param_grads, expected_param_grads)):
        assert list(got) == list(expected)
        for key in got:
            assert got[key].shape == expected[key].shape, f"{kind} gradient {key!r}"
            error = relative_error(got[key], expected[key])
            assert error <= bound, f"{kind} gradient {key!r}: relative L2 error {error:.3g} > {bound} ({dtype})"


def check_save_and_reload(name: str, dtype: str, device, directory) -> None:
    registry = NETWORKS[name][2]()
    plan = resolve(name, dtype, registry)
    model = build(plan, device=device, registry=registry, initialization_seed=0).eval()
    plan_file, state_file = directory / f"{name}.{dtype}.json", directory / f"{name}.{dtype}.pt"
    plan_file.write_text(plan.to_json(), encoding="utf-8")
    torch.save(model.state_dict(), state_file)

    restored_plan = ResolvedPlan.from_json(plan_file.read_text(encoding="utf-8"), registry=registry)
    assert restored_plan.to_json() == plan.to_json()
    restored = build(restored_plan, device=device, registry=registry).eval()
    restored.load_state_dict(torch.load(state_file, map_location=device, weights_only=True))
    for key, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    inputs = make_inputs(plan, device, seed=2)
    with torch.no_grad():
        first, second = model(**inputs), restored(**inputs)
    assert list(first) == list(second)
    for key in first:
        assert first[key].dtype == TORCH_DTYPES[dtype] and first[key].device == second[key].device
        assert torch.equal(first[key], second[key]), f"output {key!r} differs after reload"


# -- tests --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("name", list(NETWORKS))
def test_forward_and_backward_on_cuda_match_cpu_float32(name, dtype):
    check_against_cpu_float32(name, dtype, DEVICE)


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("name", list(NETWORKS))
def test_saved_plan_and_state_reload_on_cuda_with_identical_outputs(name, dtype, tmp_path):
    check_save_and_reload(name, dtype, DEVICE, tmp_path)


def test_an_explicit_device_index_builds_there():
    registry = Registry.builtins()
    model = build(resolve("mlp", "float32", registry), device="cuda:0", registry=registry)
    assert next(model.parameters()).device == torch.device("cuda", 0)
    assert model(x=torch.randn(BATCH, 32, device="cuda:0"))["output"].device == torch.device("cuda", 0)


def test_a_missing_cuda_index_is_a_runtime_error():
    registry = Registry.builtins()
    plan = resolve("mlp", "float32", registry)
    with pytest.raises(HNDLError) as caught:
        build(plan, device="cuda:99", registry=registry)
    assert caught.value.code == "E_RUNTIME"
    assert "cuda:99" in str(caught.value)


# -- torch.compile on the GPU -------------------------------------------------------------------
def test_a_compiled_network_on_cuda_matches_eager_and_follows_device_moves():
    """The traced program binds the device: a move retraces, and a stray CPU input still fails."""
    torch._dynamo.reset()
    registry = Registry.builtins()
    model = build(resolve("mlp", "float32", registry), device="cuda", registry=registry)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(BATCH, 32, device="cuda")
    torch.testing.assert_close(compiled(x=x)["output"], model(x=x)["output"])
    with pytest.raises(HNDLError) as caught:
        torch.compile(model, backend="eager")(x=x.cpu())
    assert caught.value.code == "E_RUNTIME" and "device" in caught.value.message
    model.to("cpu")
    torch.testing.assert_close(compiled(x=x.cpu())["output"], model(x=x.cpu())["output"])
    model.to("cuda")
    torch.testing.assert_close(compiled(x=x)["output"], model(x=x)["output"])
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", list(TOLERANCES))
def test_an_inductor_compiled_network_on_cuda_matches_eager(dtype):
    torch._dynamo.reset()
    registry = Registry.builtins()
    model = build(resolve("mlp", dtype, registry), device="cuda", registry=registry).eval()
    x = torch.randn(BATCH, 32, device="cuda", dtype=TORCH_DTYPES[dtype])
    with torch.no_grad():
        expected = model(x=x)["output"]
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(x=x)["output"], expected, **TOLERANCES[dtype])
    torch._dynamo.reset()
