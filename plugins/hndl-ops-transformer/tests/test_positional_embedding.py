"""positional_embedding@1: declaration, T and D inferred from the contract, the [T, D] table,
numerics against the reference (forward, input and table gradients), float64 gradcheck and
gradgradcheck, the fixed sequence length at runtime, and every error code it raises."""

import pytest
import torch
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.positional_embedding import PositionalEmbedding


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(PositionalEmbedding)
    assert spec.alias == "positional_embedding" and spec.qualified == "positional_embedding@1"
    assert spec.category == "embedding"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ()
    assert spec.args["length"].inferable and spec.args["length"].dim == "T"
    assert spec.args["embedding_dim"].inferable and spec.args["embedding_dim"].dim == "D"
    assert all(arg.help for arg in spec.args.values())


def test_length_and_width_are_inferred_from_the_input():
    node = hndl.resolve("positional_embedding()", input_shape=("B", 7, 12), output_shape=("B", 7, 12)).nodes[0]
    assert node.args == {"length": 7, "embedding_dim": 12}
    assert node.provenance == {"length": "inferred", "embedding_dim": "inferred"}
    _, layer = _module("positional_embedding()", ("B", 7, 12))
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == [("weight", (7, 12))]


def test_width_is_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("linear()\npositional_embedding()", input_shape=("B", 5, 3), output_shape=("B", 5, 24))
    assert plan.nodes[0].args["out_features"] == 24
    assert plan.nodes[1].args == {"length": 5, "embedding_dim": 24}


def test_explicit_values_assert_the_contract():
    node = hndl.resolve("positional_embedding(length=7, embedding_dim=12)", input_shape=("B", 7, 12),
                        output_shape=("B", 7, 12)).nodes[0]
    assert node.provenance == {"length": "explicit", "embedding_dim": "explicit"}


def test_the_table_is_initialized_small_and_random():
    torch.manual_seed(0)
    _, layer = _module("positional_embedding()", ("B", 64, 64))
    assert 0.015 < layer.weight.std().item() < 0.025
    assert abs(layer.weight.mean().item()) < 0.005


def test_forward_and_backward_match_the_reference():
    torch.manual_seed(1)
    model, layer = _module("positional_embedding()", ("B", 4, 3))
    reference = spec_of(PositionalEmbedding).reference(layer)
    x = torch.randn(5, 4, 3, requires_grad=True)
    upstream = torch.randn(5, 4, 3)
    out = model(x)
    torch.testing.assert_close(out, reference(x))
    torch.testing.assert_close(out, x + layer.weight.detach())
    grad_x, grad_weight = torch.autograd.grad(out, [x, layer.weight], upstream)
    torch.testing.assert_close(grad_x, upstream)
    torch.testing.assert_close(grad_weight, upstream.sum(0))


def test_each_position_gets_its_own_row():
    model, layer = _module("positional_embedding()", ("B", 3, 2))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    out = model(torch.zeros(2, 3, 2))
    assert torch.equal(out, torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]] * 2))


def test_the_input_is_not_modified():
    model, _ = _module("positional_embedding()", ("B", 3, 2))
    x = torch.randn(2, 3, 2)
    copy = x.clone()
    model(x)
    assert torch.equal(x, copy)


def test_float64_gradcheck_and_gradgradcheck():
    _, layer = _module("positional_embedding()", ("B", 3, 2))
    layer = layer.double()
    weight = layer.weight.detach().clone().requires_grad_()

    def run(x, table):
        return functional_call(layer, {"weight": table}, (x,))

    inputs = (torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True), weight)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs)


def test_a_different_sequence_length_at_runtime_is_a_runtime_error():
    model, _ = _module("positional_embedding()", ("B", 8, 4))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 7, 4))
    assert error.value.code == "E_RUNTIME"


def test_explicit_length_contradicting_the_contract_is_a_constraint_error():
    assert _fails("positional_embedding(length=16)", ("B", 8, 4), ("B", 8, 4)).code == "E_CONSTRAINT"
    assert _fails("positional_embedding(embedding_dim=5)", ("B", 8, 4), ("B", 8, 4)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("source", ["positional_embedding(length=0)", "positional_embedding(embedding_dim=-2)",
                                    "positional_embedding(8)", "positional_embedding(max_len=8)",
                                    "positional_embedding(length=8.0)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8, 4), ("B", 8, 4)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("positional_embedding()", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("positional_embedding()", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
