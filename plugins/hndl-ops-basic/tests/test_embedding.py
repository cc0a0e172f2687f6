"""embedding@1: declaration, the inferred width rules (embedding_dim from the consumer,
num_embeddings never), the ids dtype rule (int64/int32 only, E_DTYPE otherwise), numerics
against F.embedding / nn.Embedding / plain indexing forward and backward, padding_idx,
gradcheck in float64, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import build, network
from hndl_ops_basic.embedding import Embedding


def _fails(source, input_shape, output_shape, input_dtype="int64"):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, input_dtype=input_dtype)
    return error.value


def _model(source="embedding(10, 4)", input_shape=("B", 5), output_shape=("B", 5, 4), **kwargs):
    kwargs.setdefault("input_dtype", "int64")
    return network(source, input_shape=input_shape, output_shape=output_shape, device="cpu", **kwargs)


def test_declaration():
    spec = spec_of(Embedding)
    assert spec.alias == "embedding" and spec.qualified == "embedding@1"
    assert str(spec.shape) == "ids[B, T]:any -> out[B, T, D]"
    assert spec.input_ports() == ("ids",)
    assert spec.positional_args == ("num_embeddings", "embedding_dim")
    assert spec.args["num_embeddings"].required and spec.args["num_embeddings"].min == 1
    assert spec.args["embedding_dim"].inferable and spec.args["embedding_dim"].dim == "D"
    assert spec.args["padding_idx"].default is None and not spec.args["padding_idx"].positional
    assert spec.category == "embedding"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())
    assert all(example.input_dtype == "int64" for example in spec.examples)
    doc = spec.docstring
    for phrase in ("Inferred width rules", "embedding_dim", "num_embeddings` is never inferred", "E_DTYPE"):
        assert phrase in doc, phrase


def test_width_is_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("embedding(50)", input_shape=("B", 7), output_shape=("B", 7, 12), input_dtype="int64")
    node = plan.nodes[0]
    assert node.args["num_embeddings"] == 50 and node.provenance["num_embeddings"] == "explicit"
    assert node.args["embedding_dim"] == 12 and node.provenance["embedding_dim"] == "inferred"
    assert node.input_shapes["ids"] == ("B", 7)
    assert node.output_shapes["out"] == ("B", 7, 12)


def test_width_is_inferred_from_the_consumer():
    plan = hndl.resolve("e = embedding(x, 100)\nlinear(e, 8, in_features=16)",
                        input_shape=("B", 5), output_shape=("B", 5, 8), input_dtype="int64")
    assert plan.nodes[0].args["embedding_dim"] == 16
    assert plan.nodes[0].provenance["embedding_dim"] == "inferred"


def test_width_is_inferred_through_a_normalization_and_runs():
    model = _model("embedding(30)\nlayer_norm()", ("B", 6), ("B", 6, 9))
    assert model.plan.nodes[0].args["embedding_dim"] == 9
    ids = torch.randint(0, 30, (3, 6))
    out = model(ids)
    table = model.nodes.n_n0.weight
    assert table.shape == (30, 9)
    torch.testing.assert_close(out, F.layer_norm(table[ids], (9,)) * model.nodes.n_n1.weight + model.nodes.n_n1.bias)


def test_undetermined_width_stays_ambiguous():
    error = _fails("embedding(100)\nlinear(8)", ("B", 5), ("B", 5, 8))
    assert error.code == "E_AMBIGUOUS"


@pytest.mark.parametrize("source", ["embedding()", "embedding(embedding_dim=4)"])
def test_vocabulary_size_is_never_inferred(source):
    error = _fails(source, ("B", 5), ("B", 5, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "num_embeddings"


@pytest.mark.parametrize("source", [
    "embedding(0, 4)", "embedding(-3, 4)", "embedding(True, 4)", "embedding(2.5, 4)", 'embedding("10", 4)',
    "embedding(10, 0)", "embedding(10, -4)", "embedding(10, 4.0)", "embedding(10, 4, 2)",
    "embedding(10, 4, padding_idx=10)", "embedding(10, 4, padding_idx=-1)", "embedding(10, 4, padding_idx=1.0)",
    "embedding(10, 4, padding_idx=True)", "embedding(10, 4, max_norm=1.0)",
])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 5), ("B", 5, 4)).code == "E_ARGUMENT"


def test_literal_width_contradicting_the_contract_is_a_constraint_error():
    error = _fails("embedding(10, 8)", ("B", 5), ("B", 5, 4))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("input_shape, output_shape", [
    (("B", 5, 3), ("B", 5, 3, 4)),  # ids must be [B, T]
    (("B", 5), ("B", 5, 4, 1)),  # the output is [B, T, D]
    (("B", 5), ("B", 6, 4)),  # T is shared by ids and out
])
def test_rank_and_sequence_length_are_constraint_errors(input_shape, output_shape):
    assert _fails("embedding(10, 4)", input_shape, output_shape).code == "E_CONSTRAINT"


@pytest.mark.parametrize("input_dtype", [None, "float32", "bool"])
def test_non_integer_ids_are_a_dtype_error_at_resolution(input_dtype):
    error = _fails("embedding(10, 4)", ("B", 5), ("B", 5, 4), input_dtype=input_dtype)
    assert error.code == "E_DTYPE"
    assert error.location.node == "n0"
    assert "int64 or int32" in error.message


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_floating_ids_in_a_half_plan_are_a_dtype_error(dtype):
    with pytest.raises(HNDLError) as error:
        hndl.resolve("embedding(10, 4)", input_shape=("B", 5), output_shape=("B", 5, 4), dtype=dtype)
    assert error.value.code == "E_DTYPE"


def test_float_ids_from_a_producer_are_a_dtype_error():
    error = _fails("h = linear(x, 5)\nembedding(h, 10, 4)", ("B", 5), ("B", 5, 4), input_dtype=None)
    assert error.code == "E_DTYPE" and error.location.node == "n1"


@pytest.mark.parametrize("input_dtype, torch_dtype", [("int64", torch.int64), ("int32", torch.int32)])
def test_int64_and_int32_ids_resolve_and_run(input_dtype, torch_dtype):
    model = _model(input_dtype=input_dtype)
    ids = torch.randint(0, 10, (3, 5), dtype=torch_dtype)
    out = model(ids)
    assert out.shape == (3, 5, 4) and out.dtype == torch.float32
    torch.testing.assert_close(out, model.nodes.n_n0.weight[ids.long()])


@pytest.mark.parametrize("dtype, torch_dtype", [("float16", torch.float16), ("bfloat16", torch.bfloat16)])
def test_half_plans_build_the_table_in_the_compute_dtype(dtype, torch_dtype):
    model = _model(dtype=dtype)
    assert model.nodes.n_n0.weight.dtype == torch_dtype
    ids = torch.randint(0, 10, (2, 5))
    out = model(ids)
    assert out.dtype == torch_dtype
    assert torch.equal(out, model.nodes.n_n0.weight[ids])


def test_numerics_forward_and_backward_against_functional_module_and_indexing():
    model = _model("embedding(10, 4)")
    layer = model.nodes.n_n0
    assert isinstance(layer, torch.nn.Embedding)
    ids = torch.tensor([[0, 3, 3, 9, 1], [2, 2, 2, 0, 7]])
    out = model(ids)
    torch.testing.assert_close(out, layer.weight[ids])
    torch.testing.assert_close(out, F.embedding(ids, layer.weight))
    torch.testing.assert_close(out, spec_of(Embedding).reference(layer)(ids))
    plain = torch.nn.Embedding(10, 4)
    plain.load_state_dict(layer.state_dict())
    torch.testing.assert_close(out, plain(ids))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), layer.weight)
    expected = torch.zeros(10, 4).index_add_(0, ids.reshape(-1), upstream.reshape(-1, 4))
    torch.testing.assert_close(grad, expected)
    (plain_grad,) = torch.autograd.grad((plain(ids) * upstream).sum(), plain.weight)
    torch.testing.assert_close(grad, plain_grad)


def test_padding_row_starts_at_zero_and_never_learns():
    model = _model("embedding(10, 4, padding_idx=2)")
    layer = model.nodes.n_n0
    assert model.plan.nodes[0].args["padding_idx"] == 2
    assert torch.equal(layer.weight[2], torch.zeros(4))
    ids = torch.tensor([[2, 2, 1, 0, 2]])
    out = model(ids)
    torch.testing.assert_close(out, spec_of(Embedding).reference(layer)(ids))
    out.square().sum().backward()
    assert torch.equal(layer.weight.grad[2], torch.zeros(4))
    assert layer.weight.grad[1].abs().sum() > 0
    reference_weight = layer.weight.detach().clone().requires_grad_(True)
    F.embedding(ids, reference_weight, padding_idx=2).square().sum().backward()
    torch.testing.assert_close(layer.weight.grad, reference_weight.grad)


def test_default_padding_idx_is_none_with_provenance():
    node = hndl.resolve("embedding(10, 4)", input_shape=("B", 5), output_shape=("B", 5, 4),
                        input_dtype="int64").nodes[0]
    assert node.args["padding_idx"] is None and node.provenance["padding_idx"] == "default"


def test_forward_draws_no_randomness_and_matches_in_eval():
    model = _model()
    ids = torch.randint(0, 10, (2, 5))
    before = torch.get_rng_state()
    first = model(ids)
    model.eval()
    second = model(ids)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(first, second)


def test_gradcheck_and_gradgradcheck_in_float64():
    # no padding_idx here: its row's gradient is zeroed by design, which gradcheck would flag
    model = _model("embedding(6, 3)", ("B", 4), ("B", 4, 3))
    layer = model.nodes.n_n0.double()
    ids = torch.tensor([[0, 1, 5, 5], [3, 1, 2, 0]])
    weight = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)

    def through_module(w):
        return functional_call(layer, {"weight": w}, (ids,))

    assert torch.autograd.gradcheck(through_module, (weight,))
    assert torch.autograd.gradgradcheck(through_module, (weight,))


def test_plan_round_trips_with_equal_digest():
    plan = hndl.resolve("embedding(10, padding_idx=0)", input_shape=("B", 5), output_shape=("B", 5, 4),
                        input_dtype="int32")
    restored = ResolvedPlan.from_json(plan.to_json())
    assert restored.semantic_digest == plan.semantic_digest
    assert restored.nodes[0].args == plan.nodes[0].args
    model = build(restored, device="cpu")
    assert model(x=torch.zeros(2, 5, dtype=torch.int32))["output"].shape == (2, 5, 4)
