"""transpose@1: swap two non-batch axes. Declaration, numerics forward and backward against
torch.transpose on [B, T, D] and [B, C, H, W] (a view, input untouched), gradcheck and
gradgradcheck in float64, rank and every extent inferred from x to out and from out back to x
(negative dims included), every error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.transpose import Transpose


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Transpose)
    assert spec.alias == "transpose" and spec.qualified == "transpose@1" and spec.version == 1
    assert spec.positional_args == ("dim0", "dim1")
    assert all(arg.type is int and arg.required and arg.help for arg in spec.args.values())
    assert spec.category == "shape" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert spec.shape_text and "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness():
    check_operator(Transpose, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dims, expected", [
    (("B", 4, 6), (1, 2), ("B", 6, 4)),
    (("B", 4, 6), (-1, -2), ("B", 6, 4)),
    (("B", 4, 6), (2, 2), ("B", 4, 6)),
    (("B", 2, 3, 5), (1, 3), ("B", 5, 3, 2)),
    (("B", 2, 3, 5), (-2, -1), ("B", 2, 5, 3)),
    (("B", 2, 3, 5), (1, -2), ("B", 3, 2, 5)),
])
def test_numerics_forward_and_backward(shape, dims, expected):
    source = f"transpose({dims[0]}, {dims[1]})"
    model = network(source, input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert (node.args["dim0"], node.args["dim1"]) == dims  # kept as written
    assert (module.dim0, module.dim1) == dims and list(model.parameters()) == []
    assert node.output_shapes["out"] == expected
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, no copy
    assert torch.equal(out, torch.transpose(saved, *dims))
    assert torch.equal(out, spec_of(Transpose).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    assert torch.equal(grad, upstream.transpose(*dims))


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("transpose(1, -1)", input_shape=("B", 2, 3, 2), output_shape=("B", 2, 3, 2), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("dims", ["1, 2", "-1, -2", "2, -2"])
def test_a_width_known_only_from_the_output_reaches_the_linear_before(dims):
    plan = _resolve(f"linear()\ntranspose({dims})", ("B", 4, 8), ("B", 16, 4))
    linear, transpose = plan.nodes
    assert linear.args["out_features"] == 16 and linear.provenance["out_features"] == "inferred"
    assert transpose.input_shapes["x"] == ("B", 4, 16)


def test_extents_infer_forward_into_a_linear_after():
    plan = _resolve("transpose(1, 2)\nlinear()", ("B", 6, 16), ("B", 16, 3))
    assert plan.nodes[1].args["in_features"] == 6


def test_rank_and_extents_infer_backward_from_the_output():
    # reshape(2) alone fixes neither its rank nor its other extents: transpose brings both back.
    plan = _resolve("reshape(2)\ntranspose(1, 3)", ("B", 24), ("B", 4, 3, 2))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 3, 4)
    plan = _resolve("reshape(4)\ntranspose(-1, -2)", ("B", 32), ("B", 8, 4))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 8)


def test_rank_infers_forward_to_a_bare_reshape_after():
    plan = _resolve("transpose(1, 2)\nreshape()\nlinear()", ("B", 2, 3, 4), ("B", 5))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, 2, 4)
    assert plan.nodes[2].args["in_features"] == 24


def test_token_mixing_round_trip_in_a_sequence():
    source = "transpose(1, 2)\nlinear()\ntranspose(1, 2)"
    plan = _resolve(source, ("B", 5, 8), ("B", 7, 8))
    assert plan.nodes[1].args["out_features"] == 7 and plan.nodes[1].args["in_features"] == 5
    model = network(source, input_shape=("B", 5, 8), output_shape=("B", 7, 8), device="cpu")
    x = torch.randn(2, 5, 8)
    layer = model.nodes.n_n1
    torch.testing.assert_close(model(x), torch.nn.functional.linear(x.transpose(1, 2), layer.weight, layer.bias)
                               .transpose(1, 2))


@pytest.mark.parametrize("source", ["transpose(0, 1)", "transpose(2, 0)", "transpose(dim0=0, dim1=2)"])
def test_the_batch_axis_is_an_argument_error(source):
    error = _fails(source, ("B", 4, 6), ("B", 6, 4))
    assert error.code == "E_ARGUMENT" and error.location.node == "n0" and "batch" in error.message
    assert error.location.field in ("dim0", "dim1") and error.remedies


@pytest.mark.parametrize("shape, dims", [(("B", 4, 6), "1, -3"), (("B", 2, 3, 5), "-4, 1"), (("B", 6), "-2, 1")])
def test_a_negative_dim_naming_the_batch_axis_is_an_argument_error(shape, dims):
    error = _fails(f"transpose({dims})", shape, shape)
    assert error.code == "E_ARGUMENT" and "batch" in error.message


@pytest.mark.parametrize("shape, dims", [(("B", 4, 6), "1, 3"), (("B", 4, 6), "-4, 1"), (("B", 2, 3, 5), "4, 1"),
                                         (("B", 6), "1, 2")])
def test_a_dim_beyond_the_rank_is_a_constraint_error(shape, dims):
    error = _fails(f"transpose({dims})", shape, shape)
    assert error.code == "E_CONSTRAINT" and "out of range" in error.message


def test_out_of_range_is_detected_when_the_rank_comes_from_downstream():
    error = _fails("reshape(4)\ntranspose(1, 3)", ("B", 32), ("B", 8, 4))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


@pytest.mark.parametrize("source", ["transpose()", "transpose(1)", "transpose(1.0, 2)", "transpose(True, 2)",
                                    'transpose("1", 2)', "transpose(1, 2, 3)", "transpose(1, 2, dims=3)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 6), ("B", 6, 4)).code == "E_ARGUMENT"


def test_contradicting_extents_and_ranks_are_constraint_errors():
    assert _fails("transpose(1, 2)", ("B", 4, 6), ("B", 4, 6)).code == "E_CONSTRAINT"
    assert _fails("transpose(1, 2)", ("B", 4, 6), ("B", 6, 4, 1)).code == "E_CONSTRAINT"


def test_an_unknown_rank_stays_ambiguous_rather_than_guessed():
    # Neither the bare reshape nor flatten's input says which rank the transpose sees.
    assert _fails("reshape()\ntranspose(1, 2)\nflatten()", ("B", 24), ("B", 24)).code == "E_AMBIGUOUS"


def test_integer_input_is_a_dtype_error():
    assert _fails("transpose(1, 2)", ("B", 4, 6), ("B", 6, 4), input_dtype="int64").code == "E_DTYPE"
