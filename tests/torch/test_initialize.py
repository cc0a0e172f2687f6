"""Initialization and trainability applied to real modules (§11)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from hndl import construction as c
from hndl.construction import normalize_initialization, normalize_trainability
from hndl.errors import HNDLError
from hndl.torch.initialize import apply_initialization, apply_trainability, check_targets

DEFAULT_TRAIN = {"default": None, "overrides": {}}
DEFAULT_INIT = {"kind": "torch_default@1", "overrides": {}}

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


def build(module, init=None, trainable=None, *, node="n0", dtype=torch.float32):
    """What the builder does for one node: check, then initialize, then set flags."""
    init_record = normalize_initialization({} if init is None else init, node=node)
    train_record = DEFAULT_TRAIN if trainable is None else normalize_trainability(trainable, node=node)
    check_targets(
        module, node=node, initialization=init_record, trainability=train_record, dtype=dtype
    )
    apply_initialization(module, init_record)
    apply_trainability(module, train_record)
    return module


def snapshot(module):
    return {
        name: (p.detach().clone(), p.requires_grad)
        for name, p in module.named_parameters(remove_duplicate=False)
    }


def assert_unchanged(module, before):
    after = snapshot(module)
    assert after.keys() == before.keys()
    for name in before:
        assert torch.equal(after[name][0], before[name][0]), name
        assert after[name][1] == before[name][1], name


class Tied(nn.Module):
    """One Parameter registered under two names."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3, 4))
        self.v = self.w
        self.b = nn.Parameter(torch.zeros(3))


class SharedStorage(nn.Module):
    """Two distinct Parameters viewing one storage."""

    def __init__(self):
        super().__init__()
        base = torch.zeros(2, 3, 4)
        self.p1 = nn.Parameter(base[0])
        self.p2 = nn.Parameter(base[1])
        self.q = nn.Parameter(torch.zeros(3, 4))


class BufferAlias(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(3, 4))
        self.register_buffer("shadow", self.p.detach())


class ReverseOrder(nn.Module):
    """Registration order z then a, the reverse of the records' sorted order."""

    def __init__(self):
        super().__init__()
        self.z = nn.Parameter(torch.empty(4, 5))
        self.a = nn.Parameter(torch.empty(4, 5))


class WithIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3, 3))
        self.index = nn.Parameter(torch.arange(3), requires_grad=False)


# --- constants ----------------------------------------------------------------------------


def test_constants_fill_parameters():
    layer = build(nn.Linear(4, 3), {"weight": 0.5, "bias": 0})
    assert torch.equal(layer.weight, torch.full((3, 4), 0.5))
    assert torch.equal(layer.bias, torch.zeros(3))
    layer = build(nn.Linear(4, 3), {"bias": 0.1})
    assert layer.bias[0].item() == torch.tensor(0.1, dtype=torch.float32).item()


def test_constant_draws_no_randomness():
    layer = nn.Linear(4, 3)
    state = torch.get_rng_state()
    build(layer, {"weight": 1, "bias": -0.0})
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.signbit(layer.bias).all()


def test_constants_in_float64_and_nested_paths():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)).double()
    build(model, {"2.bias": 7, "0.weight": -1.5}, dtype=torch.float64)
    assert torch.equal(model[2].bias, torch.full((1,), 7.0, dtype=torch.float64))
    assert torch.equal(model[0].weight, torch.full((3, 2), -1.5, dtype=torch.float64))


# --- schemes ------------------------------------------------------------------------------

SCHEME_CASES = [
    (c.xavier_uniform(gain=2.0), "xavier_uniform_", {"gain": 2.0}),
    (c.xavier_normal(), "xavier_normal_", {"gain": 1.0}),
    (
        c.kaiming_uniform(a=0.5, mode="fan_out", nonlinearity="leaky_relu"),
        "kaiming_uniform_",
        {"a": 0.5, "mode": "fan_out", "nonlinearity": "leaky_relu"},
    ),
    (c.kaiming_normal(nonlinearity="relu"), "kaiming_normal_", {"a": 0.0, "mode": "fan_in", "nonlinearity": "relu"}),
    (c.truncated_normal(std=0.5), "trunc_normal_", {"mean": 0.0, "std": 0.5, "a": -2.0, "b": 2.0}),
    (c.normal(mean=1.0, std=0.25), "normal_", {"mean": 1.0, "std": 0.25}),
    (c.uniform(a=-3.0, b=-1.0), "uniform_", {"a": -3.0, "b": -1.0}),
    (c.orthogonal(gain=1.5), "orthogonal_", {"gain": 1.5}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scheme, routine, kwargs", SCHEME_CASES, ids=[s[1] for s in SCHEME_CASES])
def test_seeded_scheme_reproduces_torch_init(scheme, routine, kwargs, device):
    torch.manual_seed(1234)
    layer = nn.Linear(5, 7, device=device)
    build(layer, {"weight": scheme})
    next_after_build = torch.rand(3, device=device)

    torch.manual_seed(1234)
    reference = nn.Linear(5, 7, device=device)  # the constructor's draws come first
    getattr(nn.init, routine)(reference.weight.data, **kwargs)
    next_after_reference = torch.rand(3, device=device)

    assert torch.equal(layer.weight, reference.weight)
    assert torch.equal(layer.bias, reference.bias)
    # The construction stream advanced exactly as the handwritten code's did.
    assert torch.equal(next_after_build, next_after_reference)


@pytest.mark.parametrize("scheme", [c.normal(std=0.1), c.uniform(a=-1.0), c.truncated_normal()])
def test_one_dimensional_schemes_apply_to_bias(scheme):
    torch.manual_seed(0)
    layer = build(nn.Linear(5, 7), {"bias": scheme})
    torch.manual_seed(0)
    reference = nn.Linear(5, 7)
    kwargs = {k: v for k, v in scheme.record().items() if k != "kind"}
    getattr(nn.init, scheme.routine)(reference.bias.data, **kwargs)
    assert torch.equal(layer.bias, reference.bias)


def test_overrides_follow_module_parameter_order():
    torch.manual_seed(7)
    module = build(ReverseOrder(), {"a": c.normal(), "z": c.uniform()})
    torch.manual_seed(7)
    z = torch.empty(4, 5).uniform_()
    a = torch.empty(4, 5).normal_()
    assert torch.equal(module.z, z)
    assert torch.equal(module.a, a)


def test_sequential_schemes_in_parameter_order():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    build(model, {"2.weight": c.xavier_uniform(), "0.weight": c.kaiming_normal(), "0.bias": 0})
    torch.manual_seed(3)
    ref = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    nn.init.kaiming_normal_(ref[0].weight.data)
    nn.init.zeros_(ref[0].bias.data)
    nn.init.xavier_uniform_(ref[2].weight.data)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reduced_precision_schemes(dtype):
    layer = nn.Linear(6, 4, dtype=dtype)
    build(layer, {"weight": c.orthogonal(), "bias": c.truncated_normal(std=0.02)}, dtype=dtype)
    w = layer.weight.float()
    assert torch.allclose(w @ w.T, torch.eye(4), atol=2e-2)
    assert layer.weight.dtype == dtype
    other = nn.Linear(6, 4, dtype=dtype)
    build(other, {"weight": c.xavier_uniform(), "bias": 2}, dtype=dtype)
    assert torch.equal(other.bias, torch.full((4,), 2.0, dtype=dtype))


def test_zero_element_parameter_is_a_no_op():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the constructor's own zero-element warning
        layer = nn.Linear(0, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(layer, {"weight": c.xavier_uniform(), "bias": c.normal()})


# --- targets ------------------------------------------------------------------------------


def test_missing_bias_target():
    layer = nn.Linear(4, 3, bias=False)
    with raises("E_INITIALIZATION") as info:
        build(layer, {"bias": 0}, node="proj")
    err = info.value
    assert err.location.node == "proj"
    assert err.location.field == "init.bias"
    assert "'bias'" in err.message and "weight" in err.message
    with raises("E_TRAINABILITY") as info:
        build(nn.Linear(4, 3, bias=False), trainable={"bias": False}, node="proj")
    assert "weight" in info.value.message


def test_buffer_targets_are_rejected():
    norm = nn.BatchNorm1d(4)
    with raises("E_INITIALIZATION") as info:
        build(norm, {"running_mean": 0})
    assert "buffer" in info.value.message
    assert "weight" in info.value.message and "bias" in info.value.message
    with raises("E_TRAINABILITY") as info:
        build(norm, trainable={"running_var": False})
    assert "buffer" in info.value.message
    # Affine disabled: no weight to name.
    with raises("E_INITIALIZATION") as info:
        build(nn.BatchNorm1d(4, affine=False), {"weight": 1})
    assert "no parameters" in info.value.message


def test_one_dimensional_parameter_with_fan_scheme():
    for scheme in (c.xavier_uniform(), c.xavier_normal(), c.kaiming_uniform(), c.kaiming_normal(), c.orthogonal()):
        layer = nn.Linear(4, 3)
        before = snapshot(layer)
        with raises("E_INITIALIZATION") as info:
            build(layer, {"weight": c.normal(), "bias": scheme}, node="head")
        assert "'bias'" in info.value.message and "[3]" in info.value.message
        assert info.value.location.node == "head"
        assert_unchanged(layer, before)  # checked before anything was written


def test_check_targets_changes_nothing_and_draws_nothing():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    before = snapshot(model)
    state = torch.get_rng_state()
    check_targets(
        model,
        node="n",
        initialization=normalize_initialization({"0.weight": c.normal(), "1.bias": 3}),
        trainability=normalize_trainability(False),
        dtype=torch.float32,
    )
    assert torch.equal(torch.get_rng_state(), state)
    assert_unchanged(model, before)


def test_dtype_and_materialization():
    with raises("E_INITIALIZATION") as info:
        build(nn.Linear(2, 2).double(), {"weight": 0}, dtype=torch.float32)
    assert "float64" in info.value.message
    with raises("E_INITIALIZATION"):
        build(nn.Linear(2, 2, device="meta"), {"weight": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lazy = nn.LazyLinear(3)
    with raises("E_INITIALIZATION") as info:
        build(lazy, {"weight": 0})
    assert "materialized" in info.value.message


def test_constant_and_bounds_must_fit_compute_dtype():
    with raises("E_INITIALIZATION"):
        build(nn.Linear(2, 2, dtype=torch.float16), {"weight": 1e5}, dtype=torch.float16)
    with raises("E_INITIALIZATION"):
        build(nn.Linear(2, 2, dtype=torch.float16), {"weight": c.uniform(a=-6e4, b=6e4)}, dtype=torch.float16)
    with raises("E_INITIALIZATION"):
        build(nn.Linear(2, 2), {"weight": c.uniform(a=-3e38, b=3e38)})
    build(nn.Linear(2, 2, dtype=torch.bfloat16), {"weight": 1e5}, dtype=torch.bfloat16)


def test_storage_shared_with_parameter_or_buffer():
    with raises("E_INITIALIZATION") as info:
        build(SharedStorage(), {"p1": 0})
    assert "p2" in info.value.message
    build(SharedStorage(), {"q": 1})  # unshared neighbour is fine
    with raises("E_INITIALIZATION") as info:
        build(BufferAlias(), {"p": c.normal()})
    assert "shadow" in info.value.message


def test_invalid_records_are_rejected_by_check_targets():
    with raises("E_INITIALIZATION"):
        check_targets(
            nn.Linear(2, 2),
            node="n",
            initialization={"kind": "torch_default@2", "overrides": {"weight": 0.0}},
            trainability=DEFAULT_TRAIN,
            dtype=torch.float32,
        )
    with raises("E_TRAINABILITY"):
        check_targets(
            nn.Linear(2, 2),
            node="n",
            initialization=DEFAULT_INIT,
            trainability={"default": 1, "overrides": {}},
            dtype=torch.float32,
        )


# --- aliases ------------------------------------------------------------------------------


def test_alias_conflicting_values():
    with raises("E_INITIALIZATION") as info:
        build(Tied(), {"w": 0, "v": 1})
    assert "'v'" in info.value.message and "'w'" in info.value.message
    with raises("E_INITIALIZATION"):
        build(Tied(), {"w": 0.0, "v": -0.0})
    with raises("E_INITIALIZATION"):
        build(Tied(), {"w": c.normal(), "v": c.normal(std=2.0)})
    with raises("E_INITIALIZATION"):
        build(Tied(), {"w": c.normal(), "v": 0})


def test_alias_same_scheme_draws_once():
    torch.manual_seed(5)
    module = build(Tied(), {"v": c.xavier_normal(), "w": c.xavier_normal()})
    after = torch.rand(2)
    torch.manual_seed(5)
    ref = torch.empty(3, 4)
    nn.init.xavier_normal_(ref)
    assert torch.equal(module.w, ref) and module.v is module.w
    assert torch.equal(after, torch.rand(2))
    build(Tied(), {"w": 2, "v": 2.0})


def test_alias_trainability():
    with raises("E_TRAINABILITY"):
        build(Tied(), trainable={"w": True, "v": False})
    module = build(Tied(), trainable={"w": False, "v": False})
    assert not module.w.requires_grad and module.b.requires_grad


# --- trainability -------------------------------------------------------------------------


def test_boolean_trainability():
    layer = build(nn.Linear(3, 2), trainable=False)
    assert not any(p.requires_grad for p in layer.parameters())
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    model[0].weight.requires_grad_(False)  # the constructor froze it
    build(model, trainable=True)
    assert all(p.requires_grad for p in model.parameters())
    assert model.training


def test_mapping_trainability_keeps_unnamed_flags():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    model[1].weight.requires_grad_(False)
    build(model, trainable={"0.bias": False})
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    assert flags == {"0.weight": True, "0.bias": False, "1.weight": False, "1.bias": True}


def test_omitted_trainability_preserves_constructor_flags():
    layer = nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    build(layer, {"weight": 0})
    assert layer.weight.requires_grad and not layer.bias.requires_grad


def test_boolean_on_parameterless_module():
    build(nn.ReLU(), trainable=False)
    build(nn.ReLU(), trainable=True)


def test_frozen_output_still_propagates_input_gradients():
    layer = build(nn.Linear(3, 2), trainable=False)
    x = torch.randn(4, 3, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is None


def test_integer_parameters():
    with raises("E_TRAINABILITY") as info:
        build(WithIndex(), trainable=True)
    assert "index" in info.value.message
    with raises("E_TRAINABILITY"):
        build(WithIndex(), trainable={"index": True})
    module = build(WithIndex(), trainable=False)
    assert not module.weight.requires_grad
    build(WithIndex(), trainable={"index": False, "weight": True})


def test_shared_storage_trainability():
    # Untouched constructor defaults that differ remain valid.
    module = SharedStorage()
    module.p2.requires_grad_(False)
    build(module)
    # Touching one of them leaves the other with a different effective flag.
    with raises("E_TRAINABILITY") as info:
        build(SharedStorage(), trainable={"p1": False})
    assert "p1" in info.value.message and "p2" in info.value.message
    module = build(SharedStorage(), trainable={"p1": False, "p2": False})
    assert not module.p1.requires_grad and not module.p2.requires_grad and module.q.requires_grad
    build(SharedStorage(), trainable=False)


# --- every accepted scheme applies and stays finite in the compute dtype (issue 15, item 5) ----------

HALF_MAX = torch.finfo(torch.float16).max


@pytest.mark.parametrize(
    "scheme",
    [
        c.xavier_uniform(gain=1e30),
        c.xavier_normal(gain=1e30),
        c.normal(std=1e6),
        c.normal(mean=6e4, std=1e3),
        c.truncated_normal(std=1e5, a=-1e10, b=1e10),
        c.orthogonal(gain=1e5),
        c.uniform(a=-6e4, b=6e4),
    ],
    ids=repr,
)
def test_a_scheme_that_cannot_stay_finite_in_float16_fails_before_any_node_is_initialized(scheme):
    layer = nn.Linear(8, 8, dtype=torch.float16)
    before = snapshot(layer)
    rng = torch.get_rng_state()
    with raises("E_INITIALIZATION") as info:
        build(layer, {"weight": scheme, "bias": 0}, dtype=torch.float16)
    assert info.value.location.field == "init.weight"
    assert "'weight' of shape [8, 8]" in info.value.message
    assert f"largest finite value {HALF_MAX!r}" in info.value.message and "float16" in info.value.message
    assert "float32 compute dtype" in info.value.remedies[0]
    assert_unchanged(layer, before)  # not even the constant bias was applied
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize(
    "scheme",
    [
        c.xavier_uniform(gain=5000.0),
        c.xavier_normal(gain=1000.0),
        c.normal(std=7000.0),
        c.normal(mean=-6e4, std=500.0),
        c.truncated_normal(std=1e5, a=-6e4, b=6e4),
        c.orthogonal(gain=-6e4),
        c.kaiming_uniform(a=0.0, nonlinearity="leaky_relu"),
        c.kaiming_normal(mode="fan_out", nonlinearity="tanh"),
    ],
    ids=repr,
)
def test_schemes_within_the_float16_range_apply_and_write_finite_values(scheme):
    torch.manual_seed(0)
    layer = build(nn.Linear(64, 64, dtype=torch.float16), {"weight": scheme}, dtype=torch.float16)
    assert torch.isfinite(layer.weight).all()


def test_the_reach_depends_on_the_parameter_shape():
    scheme = c.xavier_uniform(gain=30000.0)  # draws from +-gain * sqrt(6 / (fan_in + fan_out))
    with raises("E_INITIALIZATION"):
        build(nn.Linear(2, 2, dtype=torch.float16), {"weight": scheme}, dtype=torch.float16)
    layer = build(nn.Linear(512, 512, dtype=torch.float16), {"weight": scheme}, dtype=torch.float16)
    assert torch.isfinite(layer.weight).all()
    with raises("E_INITIALIZATION") as info:
        build(nn.Linear(2, 2), {"weight": c.xavier_uniform(gain=3e38)})
    assert "float32" in info.value.message and "float32 compute dtype" not in info.value.remedies[0]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_plan_whose_scheme_overflows_its_dtype_fails_at_build_with_e_initialization(dtype):
    import hndl
    from hndl.torch import build as build_plan

    source = 'linear(16)\nlinear(init={"weight": xavier_uniform(gain=1e30)})'
    plan = hndl.resolve(source, input_shape=("B", 8), output_shape=("B", 4), dtype=dtype)
    if dtype == "float32":
        assert build_plan(plan, device="cpu").nodes.n_n1.weight.isfinite().all()
        return
    with raises("E_INITIALIZATION") as info:
        build_plan(plan, device="cpu")
    assert info.value.location.node == "n1" and "[4, 16]" in info.value.message
