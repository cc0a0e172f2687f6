"""The three inspection modes of §13 stay distinct.

* Static resolution allocates nothing, constructs nothing and draws nothing: covered for every
  operator example by tests/resolve/test_invariant_allocation_free.py (and restated once here).
* ``dry_run`` runs every operator's real forward on meta tensors only: no real tensor, no CUDA,
  no random draw; it catches an operator whose forward disagrees with its declaration.
* ``preflight`` runs one numerical pass on disposable modules in an isolated RNG scope: the
  caller's RNG stream and every live model's state are exactly as they were.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
from hndl import HNDLError
from hndl.torch import build, dry_run, network, preflight

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
GENERATOR_CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 3, 32, 32)}


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


class OnlyMeta(TorchDispatchMode):
    """Refuse every tensor operation that touches or produces a tensor off the meta device."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "meta":
            raise AssertionError(f"{func} asked for device {device}")
        for value in tree_flatten((args, kwargs))[0]:
            if isinstance(value, torch.Tensor) and value.device.type != "meta":
                raise AssertionError(f"{func} read a tensor on {value.device}")
        result = func(*args, **kwargs)
        for value in tree_flatten(result)[0]:
            if isinstance(value, torch.Tensor) and value.device.type != "meta":
                raise AssertionError(f"{func} produced a tensor on {value.device}")
        self.ops += 1
        return result


def _registry_with(name, forward, shape="x[B, D] -> out[B, D]", init=None):
    registry = hndl.Registry.builtins()

    @registry.operator(name, identity=f"test.{name}", summary="An operator for the inspection tests.", shape=shape)
    class Op(nn.Module):
        def __init__(self, D):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(D))
            if init is not None:
                init(self)

        def forward(self, x):
            return forward(self, x)

    return registry


# -- static resolution ---------------------------------------------------------------------------------------
def test_static_resolution_runs_no_tensor_operation_at_all():
    mode = OnlyMeta()
    before = torch.get_rng_state()
    with mode:
        plan = hndl.resolve(GENERATOR, **GENERATOR_CONTRACT)
    assert mode.ops == 0 and torch.equal(torch.get_rng_state(), before)
    assert plan.nodes[-2].output_shapes["out"] == ("B", 3, 32, 32)


# -- dry run ---------------------------------------------------------------------------------------------------------
def test_dry_run_runs_the_generator_on_meta_tensors_only():
    plan = hndl.resolve(GENERATOR, **GENERATOR_CONTRACT)
    cuda_before = torch.cuda.is_initialized()
    rng_before = torch.get_rng_state()
    mode = OnlyMeta()
    with mode:
        report = dry_run(plan, batch=3)
    assert mode.ops > 0  # the real forwards ran, on meta tensors
    assert torch.cuda.is_initialized() == cuda_before  # CUDA never touched
    assert torch.equal(torch.get_rng_state(), rng_before)  # nothing drawn
    assert list(report) == [node.id for node in plan.nodes]
    for node in plan.nodes:
        for port, shape in node.output_shapes.items():
            assert report[node.id][port] == (3, *shape[1:])
    assert report["n9"]["out"] == (3, 3, 32, 32)


def test_dry_run_sees_only_meta_parameters(monkeypatch):
    seen = []
    original = nn.Module.__call__

    def spy(self, *args, **kwargs):
        seen.extend(p.device.type for p in self.parameters())
        seen.extend(t.device.type for t in args if isinstance(t, torch.Tensor))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "__call__", spy)
    plan = hndl.resolve("linear(64)\nrelu()\ndropout(0.5)\nlinear()", input_shape=("B", 32), output_shape=("B", 10))
    dry_run(plan)
    assert seen and set(seen) == {"meta"}


def test_dry_run_resolves_batch_multiples():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\nh = linear(both, 8)\na, b = chunk(h, 2, dim=0)\nadd(a, b)",
        input_shape=("B", 4), output_shape=("B", 8),
    )
    report = dry_run(plan, batch=5)
    concat, linear, chunk, add = (node.id for node in plan.nodes)
    assert report[concat]["out"] == (10, 4)
    assert report[linear]["out"] == (10, 8)
    assert report[chunk] == {"out0": (5, 8), "out1": (5, 8)}
    assert report[add]["out"] == (5, 8)


def test_dry_run_catches_an_operator_whose_forward_returns_the_wrong_shape():
    registry = _registry_with("shrink", lambda self, x: x[:, :-1] * self.weight[:-1])
    plan = hndl.resolve("linear(6)\nshrink()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                        registry=registry)
    with raises("E_RUNTIME") as error:
        dry_run(plan, registry=registry)
    assert error.value.location.node == "n1" and error.value.location.field == "out"
    assert "[2, 6]" in error.value.message and "[2, 5]" in error.value.message


def test_dry_run_catches_a_wrong_dtype_and_a_real_allocation():
    registry = _registry_with("widen", lambda self, x: (x * self.weight).double())
    plan = hndl.resolve("widen()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    with raises("E_RUNTIME") as error:
        dry_run(plan, registry=registry)
    assert "float64" in error.value.message and error.value.location.node == "n0"

    registry = _registry_with("alloc", lambda self, x: torch.zeros(x.shape))
    plan = hndl.resolve("alloc()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    with raises("E_RUNTIME") as error:
        dry_run(plan, registry=registry)
    assert "from meta inputs" in error.value.message


def test_dry_run_reports_a_forward_that_fails_as_e_runtime():
    registry = _registry_with("bad_matmul", lambda self, x: x @ torch.ones(3, 3, device=x.device))
    plan = hndl.resolve("bad_matmul()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    with raises("E_RUNTIME") as error:
        dry_run(plan, registry=registry)
    assert error.value.location.node == "n0" and "RuntimeError" in error.value.message


def test_a_node_that_cannot_be_probed_on_meta_is_none_and_the_run_continues():
    def refuse_meta(module):
        if module.weight.device.type == "meta":
            raise RuntimeError("this constructor needs real storage")

    registry = _registry_with("opaque", lambda self, x: x * self.weight, init=refuse_meta)
    plan = hndl.resolve("linear(6)\nopaque()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                        registry=registry)
    report = dry_run(plan, registry=registry, batch=4)
    assert report["n1"] is None
    assert report["n0"] == {"out": (4, 6)} and report["n2"] == {"out": (4, 2)}


def test_dry_run_bounds_state_and_validates_its_arguments():
    plan = hndl.resolve("linear(64)\nrelu()\nlinear()", input_shape=("B", 32), output_shape=("B", 10))
    with raises("E_RESOURCE"):
        dry_run(plan, limits={"max_state_bytes": 1000})
    for batch in (0, -1, 2.0, True):
        with raises("E_SCHEMA"):
            dry_run(plan, batch=batch)
    with raises("E_SCHEMA"):
        dry_run("linear(4)")


# -- numerical preflight --------------------------------------------------------------------------------------------
def test_preflight_restores_the_rng_and_does_not_advance_the_callers_stream():
    plan = hndl.resolve("linear(64)\nrelu()\ndropout(0.5)\nlinear()", input_shape=("B", 32), output_shape=("B", 10))
    torch.manual_seed(123)
    first = torch.rand(4)
    expected_next = torch.rand(4)

    torch.manual_seed(123)
    assert torch.equal(torch.rand(4), first)
    before = torch.get_rng_state()
    cuda_before = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    summary = preflight(plan, seed=9)
    assert torch.equal(torch.get_rng_state(), before)
    if cuda_before is not None:
        assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda_before))
    assert torch.equal(torch.rand(4), expected_next)
    assert summary["outputs"]["output"]["shape"] == (2, 10)
    assert summary["gradients"] == {"inputs": 1, "parameters": 4}


def test_preflight_on_cpu_never_initializes_cuda():
    plan = hndl.resolve("linear(8)", input_shape=("B", 4), output_shape=("B", 8))
    before = torch.cuda.is_initialized()
    preflight(plan)
    assert torch.cuda.is_initialized() == before


def test_preflight_is_reproducible_from_its_seed():
    plan = hndl.resolve(GENERATOR, **GENERATOR_CONTRACT)
    a = preflight(plan, seed=1, batch=1, backward=False)
    b = preflight(plan, seed=1, batch=1, backward=False)
    c = preflight(plan, seed=2, batch=1, backward=False)
    assert a == b and a != c
    assert a["gradients"] is None and a["outputs"]["output"]["shape"] == (1, 3, 32, 32)
    assert -1 <= a["outputs"]["output"]["min"] <= a["outputs"]["output"]["max"] <= 1


def _running_registry():
    registry = hndl.Registry.builtins()

    @registry.operator("tracked", identity="test.tracked", summary="Tracks a running mean for the test.",
                       shape="x[B, D] -> out[B, D]")
    class Tracked(nn.Module):
        """Updates a persistent running-mean buffer on every training-mode forward."""

        def __init__(self, D):
            super().__init__()
            self.register_buffer("running_mean", torch.zeros(D))
            self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            if self.training:
                with torch.no_grad():
                    self.running_mean.mul_(0.9).add_(0.1 * x.mean(0))
                    self.calls.add_(1)
            return x - self.running_mean

    return registry


def test_preflight_leaves_a_live_model_untouched():
    registry = _running_registry()
    plan = hndl.resolve("linear(8)\ntracked()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                        registry=registry)
    live = build(plan, device="cpu", registry=registry)
    live(x=torch.randn(3, 4))
    assert live.nodes.n_n1.calls.item() == 1
    state = {key: value.clone() for key, value in live.state_dict().items()}
    flags = {name: p.requires_grad for name, p in live.named_parameters()}
    preflight(plan, registry=registry)
    assert live.training
    assert all(torch.equal(live.state_dict()[key], value) for key, value in state.items())
    assert {name: p.requires_grad for name, p in live.named_parameters()} == flags
    assert all(p.grad is None for p in live.parameters())


def test_preflight_names_the_first_node_with_non_finite_values():
    registry = _registry_with("logged", lambda self, x: torch.log(x) * self.weight)
    plan = hndl.resolve("linear(6)\nlogged()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                        registry=registry)
    with raises("E_RUNTIME") as error:
        preflight(plan, registry=registry, batch=8)
    assert error.value.location.node == "n1" and "not finite" in error.value.message


def test_preflight_checks_gradients_too():
    registry = _registry_with("kink", lambda self, x: torch.sqrt(x * 0) * self.weight + x)
    plan = hndl.resolve("kink()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    assert preflight(plan, registry=registry, backward=False)["outputs"]["output"]["shape"] == (2, 4)
    with raises("E_RUNTIME") as error:
        preflight(plan, registry=registry)
    assert "gradient" in error.value.message


def test_preflight_feeds_zeros_to_integer_inputs():
    registry = hndl.Registry.builtins()

    @registry.operator("lookup", identity="test.lookup", summary="Embed integer ids for the test.",
                       shape="ids[B, T]:int64 -> out[B, T]")
    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(1))

        def forward(self, ids):
            assert not ids.any()
            return self.table[ids]

    plan = hndl.resolve("lookup()\nlinear()", input_shape=("B", 5), output_shape=("B", 3), input_dtype="int64",
                        registry=registry)
    summary = preflight(plan, registry=registry)
    assert summary["outputs"]["output"]["shape"] == (2, 3)
    assert summary["gradients"]["inputs"] == 0 and summary["gradients"]["parameters"] == 3
    # the forward reads its ids' values, which meta tensors do not have: not probeable there
    report = dry_run(plan, registry=registry)
    assert report["n0"] is None and report["n1"] == {"out": (2, 3)}


def test_preflight_validates_device_seed_and_batch():
    plan = hndl.resolve("linear(8)", input_shape=("B", 4), output_shape=("B", 8))
    with raises("E_SCHEMA"):
        preflight(plan, device="tpu")
    with raises("E_SCHEMA"):
        preflight(plan, seed=-1)
    with raises("E_SCHEMA"):
        preflight(plan, batch=0)
    if not torch.cuda.is_available():
        with raises("E_RUNTIME"):
            preflight(plan, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_preflight_on_cuda_restores_the_cuda_rng():
    plan = hndl.resolve("linear(64)\nrelu()\ndropout(0.5)\nlinear()", input_shape=("B", 32), output_shape=("B", 10))
    torch.cuda.init()
    cpu, cuda = torch.get_rng_state(), torch.cuda.get_rng_state_all()
    summary = preflight(plan, device="cuda")
    assert summary["device"].startswith("cuda")
    assert torch.equal(torch.get_rng_state(), cpu)
    assert all(torch.equal(a, b) for a, b in zip(torch.cuda.get_rng_state_all(), cuda))


def test_modes_stay_distinct_on_a_network_facade():
    model = network("linear(16)\nrelu()\nlinear()", input_shape=("B", 8), output_shape=("B", 4), device="cpu")
    params = [p.detach().clone() for p in model.parameters()]
    assert dry_run(model.plan)["n2"] == {"out": (2, 4)}
    assert preflight(model.plan)["outputs"]["output"]["shape"] == (2, 4)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), params))
