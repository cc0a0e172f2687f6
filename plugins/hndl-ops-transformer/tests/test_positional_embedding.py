"""positional_embedding@2: declaration, T and D inferred from the contract, the [T, D] table and
the [max_length, D] table whose first T rows are added (checked against GPT-2's wpe lookup),
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
    assert spec.alias == "positional_embedding" and spec.qualified == "positional_embedding@2"
    assert spec.category == "embedding"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ()
    assert spec.args["length"].inferable and spec.args["length"].dim == "T"
    assert spec.args["embedding_dim"].inferable and spec.args["embedding_dim"].dim == "D"
    assert spec.args["max_length"].default is None and spec.args["max_length"].min == 1
    assert not spec.args["max_length"].inferable and spec.args["max_length"].dim is None
    assert all(arg.help for arg in spec.args.values())


def test_length_and_width_are_inferred_from_the_input():
    node = hndl.resolve("positional_embedding()", input_shape=("B", 7, 12), output_shape=("B", 7, 12)).nodes[0]
    assert node.args == {"length": 7, "embedding_dim": 12, "max_length": None}
    assert node.provenance == {"length": "inferred", "embedding_dim": "inferred", "max_length": "default"}
    _, layer = _module("positional_embedding()", ("B", 7, 12))
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == [("weight", (7, 12))]


def test_width_is_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("linear()\npositional_embedding()", input_shape=("B", 5, 3), output_shape=("B", 5, 24))
    assert plan.nodes[0].args["out_features"] == 24
    assert plan.nodes[1].args == {"length": 5, "embedding_dim": 24, "max_length": None}


def test_explicit_values_assert_the_contract():
    node = hndl.resolve("positional_embedding(length=7, embedding_dim=12)", input_shape=("B", 7, 12),
                        output_shape=("B", 7, 12)).nodes[0]
    assert node.provenance == {"length": "explicit", "embedding_dim": "explicit", "max_length": "default"}


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


# -- max_length: a table longer than the sequence ------------------------------------------------------
def test_max_length_gives_a_longer_table_and_is_recorded():
    node = hndl.resolve("positional_embedding(max_length=16)", input_shape=("B", 5, 4),
                        output_shape=("B", 5, 4)).nodes[0]
    assert node.args == {"length": 5, "embedding_dim": 4, "max_length": 16}
    assert node.provenance["max_length"] == "explicit"
    _, layer = _module("positional_embedding(max_length=16)", ("B", 5, 4))
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == [("weight", (16, 4))]
    assert "max_length=16" in repr(layer)


def test_a_table_exactly_as_long_as_the_sequence_is_allowed():
    _, layer = _module("positional_embedding(max_length=5)", ("B", 5, 4))
    assert tuple(layer.weight.shape) == (5, 4)


def test_the_first_t_rows_are_added_like_gpt2s_position_lookup():
    torch.manual_seed(5)
    model, layer = _module("positional_embedding(max_length=12)", ("B", 5, 4))
    wpe = torch.nn.Embedding(12, 4)  # transformers' GPT2Model.wpe: Embedding(max_position_embeddings, D)
    layer.load_state_dict(wpe.state_dict())  # a checkpoint's full table loads as is
    x = torch.randn(3, 5, 4, requires_grad=True)
    upstream = torch.randn(3, 5, 4)
    out = model(x)
    expected = x + wpe(torch.arange(5)).unsqueeze(0)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(PositionalEmbedding).reference(layer)(x))
    grad_x, grad_weight = torch.autograd.grad(out, [x, layer.weight], upstream)
    torch.testing.assert_close(grad_x, upstream)
    torch.testing.assert_close(grad_weight[:5], upstream.sum(0))
    assert torch.count_nonzero(grad_weight[5:]) == 0  # rows past T receive no gradient


def test_without_max_length_the_whole_table_is_added():
    model, layer = _module("positional_embedding()", ("B", 3, 2))
    x = torch.randn(2, 3, 2)
    torch.testing.assert_close(model(x), x + layer.weight, rtol=0, atol=0)


def test_float64_gradcheck_and_gradgradcheck_with_max_length():
    _, layer = _module("positional_embedding(max_length=5)", ("B", 3, 2))
    layer = layer.double()
    weight = layer.weight.detach().clone().requires_grad_()

    def run(x, table):
        return functional_call(layer, {"weight": table}, (x,))

    inputs = (torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True), weight)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs)


def test_a_sequence_longer_than_max_length_is_a_constraint_error():
    error = _fails("positional_embedding(max_length=4)", ("B", 6, 8), ("B", 6, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "max_length=4" in error.message and "T=6" in error.message


def test_max_length_is_checked_against_a_length_from_the_output_contract():
    error = _fails("reshape()\npositional_embedding(max_length=4)", ("B", 48), ("B", 6, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


def test_direct_construction_checks_max_length():
    with pytest.raises(HNDLError) as error:
        PositionalEmbedding(length=6, embedding_dim=2, max_length=4)
    assert error.value.code == "E_CONSTRAINT" and error.value.location.field == "max_length"
    assert tuple(PositionalEmbedding(length=6, embedding_dim=2).weight.shape) == (6, 2)


def test_a_different_sequence_length_at_runtime_is_a_runtime_error_with_max_length_too():
    model, _ = _module("positional_embedding(max_length=16)", ("B", 8, 4))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 7, 4))
    assert error.value.code == "E_RUNTIME"


# -- errors -------------------------------------------------------------------------------------------
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
                                    "positional_embedding(length=8.0)", "positional_embedding(max_length=0)",
                                    "positional_embedding(max_length=16.0)", "positional_embedding(max_length=True)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8, 4), ("B", 8, 4)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("positional_embedding()", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("positional_embedding()", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
