"""Meta device and deferred initialization (issue 28, item 3), each beside a handwritten twin.

* A network moved to ``meta`` runs and returns meta tensors of the right shape (the runtime's
  checks understand meta), and ``torch.func.stack_module_state`` ensembles over the tutorial's
  meta-device base model (``functional_call`` under ``vmap``) give each member's outputs.
* ``network(..., device="meta")`` / ``build(plan, device="meta")`` / ``restore(plan, device="meta")``
  allocate nothing; ``to_empty(device=...)`` then ``hndl.torch.initialize(model)`` gives every
  parameter and buffer (batch-norm statistics, rotary ``inv_freq``, Swin's
  ``relative_position_index``, the plan's ``init=`` overrides) exactly the values of a direct build
  with the same seed, and the caller-RNG mode the values of a direct build from the same RNG state.
The FSDP2 recipe (meta, ``fully_shard``, ``to_empty``, ``initialize``) is in test_distributed.py.
"""

from __future__ import annotations

import copy
import resource

import pytest
import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

import hndl
from hndl import HNDLError
from hndl.torch import build, initialize, network, preflight, restore

MLP = "linear(32)\nrelu()\nlinear()"
MLP_CONTRACT = {"input_shape": ("B", 16), "output_shape": ("B", 4)}
# batch-norm running statistics, a persistent constant table (relative_position_index), a shifted
# window mask, init= overrides (drawn after every constructor) and a frozen layer
VISION = """
conv(8, kernel_size=3, padding=1, init={"weight": kaiming_normal(nonlinearity="relu")})
batch_norm()
relu()
window_attention(2, 4, 2)
flatten()
linear(trainable=False, init={"weight": orthogonal(gain=0.5), "bias": 0.25})
"""
VISION_CONTRACT = {"input_shape": ("B", 3, 8, 8), "output_shape": ("B", 10)}
# the rotary inv_freq table (non-persistent: not in the state dict)
TRANSFORMER = ("linear(32)\nattention(4, kv_heads=2, causal=True, bias=False, qkv='separate', rope_theta=10000.0)\n"
               "layer_norm()\nlinear()")
TRANSFORMER_CONTRACT = {"input_shape": ("B", 6, 16), "output_shape": ("B", 6, 16)}
CASES = {"mlp": (MLP, MLP_CONTRACT), "vision": (VISION, VISION_CONTRACT),
         "transformer": (TRANSFORMER, TRANSFORMER_CONTRACT)}


def _twin(model: nn.Module) -> nn.Sequential:
    """The MLP written by hand, with the network's values."""
    twin = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    twin.load_state_dict({"0.weight": model["n0"].weight, "0.bias": model["n0"].bias,
                          "2.weight": model["n2"].weight, "2.bias": model["n2"].bias})
    return twin


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, non-persistent buffers included, by name."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def _assert_same_state(ours: nn.Module, expected: nn.Module) -> None:
    ours_state, expected_state = _state(ours), _state(expected)
    assert list(ours_state) == list(expected_state)
    for name, tensor in expected_state.items():
        assert ours_state[name].device == tensor.device, name
        assert torch.equal(ours_state[name], tensor), name
        assert ours_state[name].requires_grad == tensor.requires_grad, name
    assert list(ours.state_dict()) == list(expected.state_dict())


def _inputs(contract: dict, batch: int = 3) -> torch.Tensor:
    shape = (batch, *contract["input_shape"][1:])
    return torch.randn(shape, generator=torch.Generator().manual_seed(1))


# -- calling a network on meta ---------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_network_moved_to_meta_returns_meta_tensors_of_the_right_shape(case):
    source, contract = CASES[case]
    model = network(source, **contract, device="cpu", initialization_seed=0)
    x = _inputs(contract)
    expected = model(x)
    model.to("meta")
    for _ in range(3):  # the checked program, then the remembered signature's fast path
        out = model(x.to("meta"))
        assert out.device.type == "meta" and out.shape == expected.shape and out.dtype == expected.dtype
    assert all(tensor.is_meta for tensor in _state(model).values())


def test_meta_matches_the_handwritten_twin_and_still_checks_shapes():
    model = network(MLP, **MLP_CONTRACT, device="cpu")
    twin = _twin(model).to("meta")
    model.to("meta")
    x = torch.empty(5, 16, device="meta")
    assert model(x).shape == twin(x).shape == (5, 4)
    with pytest.raises(HNDLError) as caught:
        model(torch.empty(5, 15, device="meta"))
    assert caught.value.code == "E_RUNTIME" and "expected shape [B=5, 16], got [5, 15]" in caught.value.message


def test_stack_module_state_ensembles_over_a_meta_base_model_like_the_tutorial():
    """The torch.func model-ensembling tutorial, with networks and with handwritten twins."""
    members = [network(MLP, **MLP_CONTRACT, device="cpu", initialization_seed=seed) for seed in range(3)]
    twins = [_twin(member) for member in members]
    x = _inputs(MLP_CONTRACT, batch=5)
    for models in (twins, members):
        params, buffers = stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")

        def run(params, buffers, x, base=base):
            return functional_call(base, (params, buffers), (x,))

        for _ in range(2):  # first call, then a remembered signature
            together = vmap(run, in_dims=(0, 0, None))(params, buffers, x)
            assert together.shape == (3, 5, 4)
            for index, member in enumerate(members):
                torch.testing.assert_close(together[index], member(x))
        minibatches = x.expand(3, 5, 16)  # a different minibatch per member
        torch.testing.assert_close(vmap(run)(params, buffers, minibatches), together)


# -- building on meta ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_building_on_meta_allocates_nothing(case):
    source, contract = CASES[case]
    plan = hndl.resolve(source, **contract)
    for model in (network(source, **contract, device="meta", initialization_seed=0), build(plan, device="meta"),
                  restore(plan.to_json(), device="meta")):
        assert all(tensor.is_meta for tensor in _state(model).values())
        assert model.build_receipt["device"] == "meta"
        assert model.build_receipt["state_bytes"] == build(plan, device="cpu").build_receipt["state_bytes"]


def test_an_8_gib_network_builds_on_meta_without_using_memory():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    model = network("linear(32768)\nlinear()", input_shape=("B", 32768), output_shape=("B", 32768), device="meta")
    assert model.build_receipt["state_bytes"] > 8 * 2**30  # float32 parameters
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 2**20  # under 1 GiB more at the peak
    assert all(tensor.is_meta for tensor in model.parameters())
    assert model(torch.empty(2, 32768, device="meta")).shape == (2, 32768)


def test_a_meta_build_draws_nothing_from_the_caller_rng():
    torch.manual_seed(11)
    before = torch.get_rng_state()
    network(VISION, **VISION_CONTRACT, device="meta")
    assert torch.equal(torch.get_rng_state(), before)


def test_meta_device_argument_errors():
    plan = hndl.resolve(MLP, **MLP_CONTRACT)
    with pytest.raises(HNDLError) as caught:
        preflight(plan, device="meta")  # preflight computes values
    assert caught.value.code == "E_SCHEMA" and "dry_run" in caught.value.remedies[0]
    with pytest.raises(HNDLError) as caught:
        build(plan, device="mps")
    assert caught.value.code == "E_SCHEMA" and '"meta"' in caught.value.remedies[0]


# -- to_empty, then initialize ---------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_to_empty_then_initialize_gives_the_values_of_a_direct_build_with_the_same_seed(case):
    source, contract = CASES[case]
    direct = network(source, **contract, device="cpu", initialization_seed=5)
    model = network(source, **contract, device="meta", initialization_seed=5)
    model.to_empty(device="cpu")
    assert initialize(model) is model  # the build's seed, from the receipt
    _assert_same_state(model, direct)
    x = _inputs(contract)
    torch.testing.assert_close(model(x), direct(x), rtol=0, atol=0)
    assert model.build_receipt["device"] == "cpu" and model.build_receipt["initialization_seed"] == 5


def test_initialize_brings_back_what_to_empty_leaves_undefined():
    """Buffers computed in __init__ are garbage after to_empty alone; initialize restores them."""
    direct = network(VISION, **VISION_CONTRACT, device="cpu", initialization_seed=2)
    model = network(VISION, **VISION_CONTRACT, device="meta", initialization_seed=2).to_empty(device="cpu")
    for tensor in _state(model).values():
        with torch.no_grad():
            tensor.fill_(7) if tensor.dtype != torch.bool else tensor.fill_(True)
    initialize(model)
    _assert_same_state(model, direct)
    index = dict(model.named_buffers())["nodes.n_n3.relative_position_index"]
    assert torch.equal(index, dict(direct.named_buffers())["nodes.n_n3.relative_position_index"])


def test_initialize_with_another_seed_equals_a_direct_build_with_that_seed():
    model = network(TRANSFORMER, **TRANSFORMER_CONTRACT, device="meta", initialization_seed=1).to_empty(device="cpu")
    initialize(model, initialization_seed=9)
    _assert_same_state(model, network(TRANSFORMER, **TRANSFORMER_CONTRACT, device="cpu", initialization_seed=9))
    assert model.build_receipt["initialization_seed"] == 9 and model.build_receipt["seed_mode"] == "isolated"
    initialize(model)  # the receipt now names 9: re-initializing a materialized model is the same again
    _assert_same_state(model, network(TRANSFORMER, **TRANSFORMER_CONTRACT, device="cpu", initialization_seed=9))


def test_the_caller_rng_mode_draws_what_a_direct_build_draws_from_the_same_state():
    torch.manual_seed(123)
    direct = network(VISION, **VISION_CONTRACT, device="cpu")
    after_direct = torch.get_rng_state()
    model = network(VISION, **VISION_CONTRACT, device="meta").to_empty(device="cpu")
    assert model.build_receipt["seed_mode"] == "caller"
    torch.manual_seed(123)
    initialize(model)  # seed None, from the receipt: the caller's RNG
    _assert_same_state(model, direct)
    assert torch.equal(torch.get_rng_state(), after_direct)  # and it advanced it the same way


def test_the_build_api_defers_too_and_a_float64_move_keeps_the_values():
    plan = hndl.resolve(VISION, **VISION_CONTRACT)
    direct = build(plan, device="cpu", initialization_seed=4).double()
    model = build(plan, device="meta", initialization_seed=4).double().to_empty(device="cpu")
    initialize(model)
    _assert_same_state(model, direct)
    x = _inputs(VISION_CONTRACT).double()
    torch.testing.assert_close(model(x=x)["output"], direct(x=x)["output"], rtol=0, atol=0)


def test_initialize_errors():
    with pytest.raises(HNDLError) as caught:
        initialize(nn.Linear(2, 2))
    assert caught.value.code == "E_ARGUMENT" and caught.value.remedies
    model = network(MLP, **MLP_CONTRACT, device="meta", initialization_seed=0)
    with pytest.raises(HNDLError) as caught:
        initialize(model)
    assert caught.value.code == "E_RUNTIME" and "to_empty" in caught.value.remedies[0]
    model.to_empty(device="cpu")
    for seed in (-1, 2**64, 1.5, "7"):
        with pytest.raises(HNDLError) as caught:
            initialize(model, initialization_seed=seed)
        assert caught.value.code == "E_ARGUMENT" and caught.value.location.field == "initialization_seed"
    torch.nn.utils.parametrize.register_parametrization(model["n0"], "weight", nn.Identity())
    with pytest.raises(HNDLError) as caught:
        initialize(model)
    assert caught.value.code == "E_RUNTIME" and caught.value.location.node == "n0"
    assert "parametriz" in caught.value.remedies[0]


def test_initialize_keeps_the_module_bound():
    model = network(TRANSFORMER, **TRANSFORMER_CONTRACT, device="meta", initialization_seed=0).to_empty(device="cpu")
    with pytest.raises(HNDLError) as caught:
        initialize(model, limits={"max_node_modules": 2})  # the attention node registers four projections
    assert caught.value.code == "E_RESOURCE" and caught.value.location.node == "n1"
