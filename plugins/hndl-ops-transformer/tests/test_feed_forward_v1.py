"""feed_forward@1 (alias feed_forward_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/transformer_v1.json was written by HNDL before feed_forward gained activation
(so its node "mlp" records feed_forward@1), and transformer_v1_state.json holds the state dict
built from it. They must keep restoring byte for byte, rebuild this module, load that state,
and compute what feed_forward@2 computes with its default activation. Also: the version-1
schema itself, numerics, float64 gradcheck and gradgradcheck, and its error codes."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import hndl
from hndl import HNDLError, Registry, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import network, restore
from hndl_ops_transformer import OPERATORS
from hndl_ops_transformer.feed_forward import FeedForward
from hndl_ops_transformer.feed_forward_v1 import FeedForwardV1

SAVED = Path(__file__).parent / "saved_plans"


def _saved():
    """The saved plan text and the state dict saved with it."""
    text = (SAVED / "transformer_v1.json").read_text(encoding="utf-8")
    record = json.loads((SAVED / "transformer_v1_state.json").read_text(encoding="utf-8"))
    state = {name: torch.tensor(entry["values"]).reshape(entry["shape"]) for name, entry in record["state_dict"].items()}
    return text, state


def _fails(source, shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=shape)
    return error.value


def test_declaration_is_version_one_unchanged():
    spec = spec_of(FeedForwardV1)
    assert spec.alias == "feed_forward_v1" and spec.qualified == "feed_forward@1"
    assert spec.category == "feed-forward" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert {name: arg.default for name, arg in spec.args.items()} == {"expansion": 4, "bias": True}
    assert spec.positional_args == ("expansion",)
    assert str(spec.shape) == "x[B, T, D] -> out[B, T, D]"


def test_the_saved_plan_restores_byte_for_byte_with_the_builtin_registry():
    text, _ = _saved()
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == "mlp")
    assert node.op == "feed_forward@1" and node.alias == "feed_forward_v1"
    assert dict(node.args) == {"expansion": 3, "bias": False}


def test_the_saved_state_loads_into_a_version_one_module_that_computes_like_version_two():
    torch.manual_seed(0)
    text, state = _saved()
    old = restore(text, state, device="cpu").nodes.n_mlp
    assert type(old) is FeedForwardV1 and old.activation == "gelu"
    new = FeedForward(expansion=3, activation="gelu", bias=False, D=8)
    new.load_state_dict(old.state_dict())  # the same parameter layout
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    expected = F.gelu(x @ old.fc1.weight.t(), approximate="none") @ old.fc2.weight.t()
    torch.testing.assert_close(old(x), expected)


def test_the_version_one_alias_resolves_to_the_saved_node():
    text, _ = _saved()
    saved = next(node for node in ResolvedPlan.from_json(text).nodes if node.id == "mlp")
    node = hndl.resolve("feed_forward_v1(3, bias=False, name='mlp')", input_shape=("B", 5, 8),
                        output_shape=("B", 5, 8)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_todays_spec_resolves_to_the_current_version_with_the_default_activation():
    node = hndl.resolve("feed_forward(3, bias=False)", input_shape=("B", 5, 8), output_shape=("B", 5, 8)).nodes[0]
    assert node.op == "feed_forward@3" and dict(node.args) == {"expansion": 3, "hidden": None, "gated": False,
                                                               "activation": "gelu", "bias": False}


def test_without_the_version_one_declaration_restoring_is_a_state_version_error():
    registry = Registry()
    for cls in OPERATORS:
        if cls is not FeedForwardV1:
            registry.add(cls)
    text, _ = _saved()
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(text, registry=registry)
    assert error.value.code == "E_STATE_VERSION" and "feed_forward@1" in error.value.message


def test_float64_gradcheck_and_gradgradcheck():
    torch.manual_seed(1)
    model = network("feed_forward_v1(2)", input_shape=("B", 3, 3), output_shape=("B", 3, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def expand(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(expand, inputs)
    assert torch.autograd.gradgradcheck(expand, inputs)


@pytest.mark.parametrize("source", ["feed_forward_v1(activation='relu')", "feed_forward_v1(0)",
                                    "feed_forward_v1(bias=1)", "feed_forward_v1(2, False)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("feed_forward_v1()", ("B", 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("feed_forward_v1()", input_shape=("B", 4, 8), output_shape=("B", 4, 8), input_dtype="int64")
    assert error.value.code == "E_DTYPE"
