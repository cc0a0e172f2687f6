"""positional_embedding@1 (alias positional_embedding_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/transformer_v1.json was written by HNDL before positional_embedding gained
max_length (so its node "positions" records positional_embedding@1), and
transformer_v1_state.json holds the state dict built from it. They must keep restoring byte for
byte, rebuild this module, load that state, and compute what positional_embedding@2 computes
without max_length. Also: the version-1 schema itself, numerics, float64 gradcheck and
gradgradcheck, and its error codes."""

import json
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

import hndl
from hndl import HNDLError, Registry, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import network, restore
from hndl_ops_transformer import OPERATORS
from hndl_ops_transformer.positional_embedding import PositionalEmbedding
from hndl_ops_transformer.positional_embedding_v1 import PositionalEmbeddingV1

SAVED = Path(__file__).parent / "saved_plans"


def _saved():
    """The saved plan text and the state dict saved with it."""
    text = (SAVED / "transformer_v1.json").read_text(encoding="utf-8")
    record = json.loads((SAVED / "transformer_v1_state.json").read_text(encoding="utf-8"))
    state = {name: torch.tensor(entry["values"]).reshape(entry["shape"]) for name, entry in record["state_dict"].items()}
    return text, state


def _fails(source, shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=shape, **kwargs)
    return error.value


def test_declaration_is_version_one_unchanged():
    spec = spec_of(PositionalEmbeddingV1)
    assert spec.alias == "positional_embedding_v1" and spec.qualified == "positional_embedding@1"
    assert spec.category == "embedding" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert list(spec.args) == ["length", "embedding_dim"] and spec.positional_args == ()
    assert spec.args["length"].inferable and spec.args["length"].dim == "T"
    assert spec.args["embedding_dim"].inferable and spec.args["embedding_dim"].dim == "D"
    assert spec.relation is None


def test_the_saved_plan_restores_byte_for_byte_with_the_builtin_registry():
    text, _ = _saved()
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == "positions")
    assert node.op == "positional_embedding@1" and node.alias == "positional_embedding_v1"
    assert dict(node.args) == {"length": 5, "embedding_dim": 8}


def test_the_saved_state_loads_into_a_version_one_module_that_computes_like_version_two():
    torch.manual_seed(0)
    text, state = _saved()
    old = restore(text, state, device="cpu").nodes.n_positions
    assert type(old) is PositionalEmbeddingV1 and tuple(old.weight.shape) == (5, 8)
    assert torch.equal(old.weight, state["nodes.n_positions.weight"])
    new = PositionalEmbedding(length=5, embedding_dim=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    torch.testing.assert_close(old(x), x + old.weight, rtol=0, atol=0)


def test_the_version_one_alias_resolves_to_the_saved_node():
    text, _ = _saved()
    saved = next(node for node in ResolvedPlan.from_json(text).nodes if node.id == "positions")
    node = hndl.resolve("positional_embedding_v1(name='positions')", input_shape=("B", 5, 8),
                        output_shape=("B", 5, 8)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_todays_spec_resolves_to_version_two_without_max_length():
    node = hndl.resolve("positional_embedding()", input_shape=("B", 5, 8), output_shape=("B", 5, 8)).nodes[0]
    assert node.op == "positional_embedding@2"
    assert dict(node.args) == {"length": 5, "embedding_dim": 8, "max_length": None}


def test_without_the_version_one_declaration_restoring_is_a_state_version_error():
    registry = Registry()
    for cls in OPERATORS:
        if cls is not PositionalEmbeddingV1:
            registry.add(cls)
    text, _ = _saved()
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(text, registry=registry)
    assert error.value.code == "E_STATE_VERSION" and "positional_embedding@1" in error.value.message


def test_float64_gradcheck_and_gradgradcheck():
    model = network("positional_embedding_v1()", input_shape=("B", 3, 2), output_shape=("B", 3, 2), device="cpu")
    layer = model.nodes.n_n0.double()
    weight = layer.weight.detach().clone().requires_grad_()

    def run(x, table):
        return functional_call(layer, {"weight": table}, (x,))

    inputs = (torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True), weight)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs)


@pytest.mark.parametrize("source", ["positional_embedding_v1(max_length=16)", "positional_embedding_v1(length=0)",
                                    "positional_embedding_v1(8)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8, 4)).code == "E_ARGUMENT"


def test_explicit_length_contradicting_the_contract_is_a_constraint_error():
    assert _fails("positional_embedding_v1(length=16)", ("B", 8, 4)).code == "E_CONSTRAINT"
    assert _fails("positional_embedding_v1()", ("B", 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("positional_embedding_v1()", ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
