"""feed_forward@2 (alias feed_forward_v2): the version-2 declaration kept for saved plans.

tests/saved_plans/transformer_v2.json was written by HNDL before feed_forward gained hidden,
gated and quick_gelu (so its node "mlp" records feed_forward@2), and transformer_v2_state.json
holds the state dict built from it. They must keep restoring byte for byte, rebuild this module,
load that state, and compute what feed_forward@3 computes with the same arguments. Also: the
version-2 schema itself, numerics, float64 gradcheck and gradgradcheck, and its error codes."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import network, restore
from hndl_ops_transformer.feed_forward import FeedForward
from hndl_ops_transformer.feed_forward_v2 import FeedForwardV2

SAVED = Path(__file__).parent / "saved_plans"


def _saved():
    """The saved plan text and the state dict saved with it."""
    text = (SAVED / "transformer_v2.json").read_text(encoding="utf-8")
    record = json.loads((SAVED / "transformer_v2_state.json").read_text(encoding="utf-8"))
    state = {name: torch.tensor(entry["values"]).reshape(entry["shape"]) for name, entry in record["state_dict"].items()}
    return text, state


def _fails(source, shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=shape, **kwargs)
    return error.value


def test_declaration_is_version_two_unchanged():
    spec = spec_of(FeedForwardV2)
    assert spec.alias == "feed_forward_v2" and spec.qualified == "feed_forward@2"
    assert spec.category == "feed-forward" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert {name: arg.default for name, arg in spec.args.items()} == {"expansion": 4, "activation": "gelu",
                                                                        "bias": True}
    assert spec.args["activation"].choices == ("gelu", "gelu_tanh", "relu", "silu")
    assert spec.positional_args == ("expansion",)
    assert str(spec.shape) == "x[B, T, D] -> out[B, T, D]"


def test_the_saved_node_restores_with_its_version_two_arguments():
    text, _ = _saved()
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == "mlp")
    assert node.op == "feed_forward@2" and node.alias == "feed_forward_v2"
    assert dict(node.args) == {"expansion": 3, "activation": "silu", "bias": True}


def test_the_saved_state_loads_into_a_version_two_module_that_computes_like_version_three():
    torch.manual_seed(0)
    text, state = _saved()
    old = restore(text, state, device="cpu").nodes.n_mlp
    assert type(old) is FeedForwardV2 and old.activation == "silu" and not old.gated
    new = FeedForward(expansion=3, activation="silu", D=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    expected = F.silu(x @ old.fc1.weight.t() + old.fc1.bias) @ old.fc2.weight.t() + old.fc2.bias
    torch.testing.assert_close(old(x), expected)
    torch.testing.assert_close(old(x), spec_of(FeedForwardV2).reference(old)(x))


def test_the_version_two_alias_resolves_to_the_saved_node():
    text, _ = _saved()
    saved = next(node for node in ResolvedPlan.from_json(text).nodes if node.id == "mlp")
    node = hndl.resolve("feed_forward_v2(3, activation='silu', name='mlp')", input_shape=("B", 5, 8),
                        output_shape=("B", 5, 8)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_float64_gradcheck_and_gradgradcheck():
    torch.manual_seed(1)
    model = network("feed_forward_v2(2, activation='gelu_tanh')", input_shape=("B", 3, 3), output_shape=("B", 3, 3),
                    device="cpu")
    layer = model.nodes.n_n0.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def expand(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(expand, inputs)
    assert torch.autograd.gradgradcheck(expand, inputs)


@pytest.mark.parametrize("source", ["feed_forward_v2(activation='quick_gelu')", "feed_forward_v2(hidden=16)",
                                    "feed_forward_v2(gated=True)", "feed_forward_v2(0)", "feed_forward_v2(bias=1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("feed_forward_v2()", ("B", 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("feed_forward_v2()", ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
