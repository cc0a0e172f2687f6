"""select@1: one position of one non-batch axis, the axis dropped (class-token pooling).
Declaration, numerics forward and backward against torch.select, negative index, gradcheck and
gradgradcheck in float64, rank and the other extents inferred both ways (the indexed extent only
from the input), every error code (an index out of range is E_CONSTRAINT), harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.select import Select


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Select)
    assert spec.alias == "select" and spec.qualified == "select@1" and spec.version == 1
    assert spec.positional_args == ("dim", "index")
    assert all(arg.type is int and arg.required and arg.help for arg in spec.args.values())
    assert spec.category == "shape" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness():
    check_operator(Select, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dim, index, expected", [
    (("B", 5, 8), 1, 0, ("B", 8)),
    (("B", 5, 8), 1, -1, ("B", 8)),
    (("B", 5, 8), -2, 4, ("B", 8)),
    (("B", 5, 8), -1, -8, ("B", 5)),
    (("B", 3, 4, 5), 2, 1, ("B", 3, 5)),
    (("B", 3, 4, 5), -1, -2, ("B", 3, 4)),
])
def test_numerics_forward_and_backward(shape, dim, index, expected):
    model = network(f"select({dim}, {index})", input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert (node.args["dim"], node.args["index"]) == (dim, index)  # kept as written
    assert (module.dim, module.index) == (dim, index) and list(model.parameters()) == []
    assert node.output_shapes["out"] == expected
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, no copy
    assert torch.equal(out, torch.select(saved, dim, index))
    assert torch.equal(out, spec_of(Select).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    expected_grad = torch.zeros_like(saved)
    expected_grad.select(dim, index).copy_(upstream)
    assert torch.equal(grad, expected_grad)  # only the selected position gets gradient


def test_class_token_pooling_feeds_a_head():
    source = "select(1, 0)\nlinear()"
    plan = _resolve(source, ("B", 5, 8), ("B", 2))
    assert plan.nodes[1].args["in_features"] == 8
    model = network(source, input_shape=("B", 5, 8), output_shape=("B", 2), device="cpu")
    head = model.nodes.n_n1
    x = torch.randn(4, 5, 8)
    torch.testing.assert_close(model(x), torch.nn.functional.linear(x[:, 0], head.weight, head.bias))


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("select(1, -1)", input_shape=("B", 3, 4), output_shape=("B", 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_a_width_known_only_from_the_output_reaches_the_linear_before():
    plan = _resolve("linear()\nselect(1, 0)", ("B", 6, 8), ("B", 16))
    assert plan.nodes[0].args["out_features"] == 16
    assert plan.nodes[1].input_shapes["x"] == ("B", 6, 16)


def test_rank_and_extents_infer_backward_from_the_output():
    plan = _resolve("reshape(4)\nselect(1, 0)", ("B", 32), ("B", 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 8)
    plan = _resolve("reshape(2)\nselect(-1, 0)", ("B", 24), ("B", 2, 3))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 3, 4)


def test_the_indexed_extent_is_never_read_off_the_output():
    error = _fails("linear()\nselect(-1, 0)", ("B", 4, 8), ("B", 4))
    assert error.code == "E_AMBIGUOUS"


@pytest.mark.parametrize("index", [5, 6, -6, -100])
def test_an_index_out_of_range_is_a_constraint_error(index):
    error = _fails(f"select(1, {index})", ("B", 5, 8), ("B", 8))
    assert error.code == "E_CONSTRAINT" and error.location.field == "index" and "out of range" in error.message


def test_an_index_out_of_range_is_caught_when_the_extent_arrives_from_upstream():
    error = _fails("linear(3)\nselect(-1, 3)", ("B", 4, 8), ("B", 4))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


@pytest.mark.parametrize("source, shape", [("select(0, 0)", ("B", 4, 3)), ("select(dim=0, index=1)", ("B", 4, 3)),
                                           ("select(-3, 0)", ("B", 4, 3)), ("select(-4, 0)", ("B", 2, 4, 3))])
def test_the_batch_axis_is_an_argument_error(source, shape):
    error = _fails(source, shape, ("B", *shape[2:]))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim" and "batch" in error.message


@pytest.mark.parametrize("source", ["select(3, 0)", "select(-4, 0)"])
def test_a_dim_beyond_the_rank_is_a_constraint_error(source):
    error = _fails(source, ("B", 4, 3), ("B", 3))
    assert error.code == "E_CONSTRAINT" and "out of range" in error.message


def test_a_result_below_rank_two_is_a_constraint_error():
    error = _fails("select(1, 0)", ("B", 4), ("B", 4))
    assert error.code == "E_CONSTRAINT" and "rank 1" in error.message


@pytest.mark.parametrize("source", ["select()", "select(1)", "select(1.0, 0)", "select(1, 0.0)", "select(True, 0)",
                                    'select(1, "0")', "select(1, 0, 2)", "select(1, None)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 3), ("B", 3)).code == "E_ARGUMENT"


def test_contradicting_extents_are_constraint_errors():
    assert _fails("select(1, 0)", ("B", 4, 3), ("B", 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("select(1, 0)", ("B", 4, 3), ("B", 3), input_dtype="int64").code == "E_DTYPE"
