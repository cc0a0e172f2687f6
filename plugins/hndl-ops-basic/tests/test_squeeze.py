"""squeeze@1: remove one named non-batch axis of extent 1 (an axis of another extent is
E_CONSTRAINT). Declaration, numerics forward and backward against torch.squeeze, gradcheck and
gradgradcheck in float64, rank and extents inferred both ways (the removed axis is inferred as
1), every error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.squeeze import Squeeze


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Squeeze)
    assert spec.alias == "squeeze" and spec.qualified == "squeeze@1" and spec.version == 1
    assert spec.positional_args == ("dim",)
    assert spec.args["dim"].type is int and spec.args["dim"].required and spec.args["dim"].help
    assert spec.category == "shape" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness():
    check_operator(Squeeze, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dim, expected", [
    (("B", 1, 6), 1, ("B", 6)), (("B", 6, 1), 2, ("B", 6)), (("B", 6, 1), -1, ("B", 6)), (("B", 1, 6), -2, ("B", 6)),
    (("B", 1, 1, 6), 1, ("B", 1, 6)), (("B", 4, 1, 6), 2, ("B", 4, 6)), (("B", 4, 6, 1), -1, ("B", 4, 6)),
])
def test_numerics_forward_and_backward(shape, dim, expected):
    model = network(f"squeeze({dim})", input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert node.args["dim"] == dim and module.dim == dim  # kept as written
    assert node.output_shapes["out"] == expected and list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, no copy
    assert torch.equal(out, torch.squeeze(saved, dim))
    assert torch.equal(out, spec_of(Squeeze).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    assert torch.equal(grad, upstream.unsqueeze(dim))


def test_only_the_named_axis_is_removed():
    model = network("squeeze(1)", input_shape=("B", 1, 1, 3), output_shape=("B", 1, 3), device="cpu")
    assert model(torch.randn(1, 1, 1, 3)).shape == (1, 1, 3)  # a batch of one stays, and so does axis 2


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("squeeze(-2)", input_shape=("B", 3, 1, 2), output_shape=("B", 3, 2), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 1, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_the_removed_axis_is_inferred_as_one_backward():
    plan = _resolve("linear()\nsqueeze(-1)", ("B", 4, 8), ("B", 4))
    assert plan.nodes[0].args["out_features"] == 1
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_a_width_known_only_from_the_output_reaches_the_linear_before():
    plan = _resolve("linear()\nunsqueeze(1)\nsqueeze(1)", ("B", 8), ("B", 5))
    assert plan.nodes[0].args["out_features"] == 5


def test_rank_and_extents_infer_backward_from_the_output():
    plan = _resolve("reshape(1)\nsqueeze(1)", ("B", 8), ("B", 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 1, 8)
    plan = _resolve("reshape(2)\nsqueeze(-1)", ("B", 6), ("B", 2, 3))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 3, 1)


def test_rank_infers_forward_to_a_bare_reshape_after():
    plan = _resolve("squeeze(1)\nreshape()\nlinear()", ("B", 1, 2, 3), ("B", 4))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 3)
    assert plan.nodes[2].args["in_features"] == 6


@pytest.mark.parametrize("source, shape, output_shape", [("squeeze(1)", ("B", 4, 3), ("B", 3)),
                                                         ("squeeze(-1)", ("B", 3, 2), ("B", 3))])
def test_an_axis_that_is_not_one_is_a_constraint_error(source, shape, output_shape):
    error = _fails(source, shape, output_shape)
    assert error.code == "E_CONSTRAINT" and "not 1" in error.message and error.location.field == "dim"


def test_an_axis_that_is_not_one_is_caught_when_it_arrives_from_upstream():
    assert _fails("linear(3)\nsqueeze(-1)", ("B", 4, 8), ("B", 4)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("source, shape", [("squeeze(0)", ("B", 1, 4)), ("squeeze(dim=0)", ("B", 1, 4)),
                                           ("squeeze(-3)", ("B", 1, 4)), ("squeeze(-4)", ("B", 1, 1, 4))])
def test_the_batch_axis_is_an_argument_error(source, shape):
    error = _fails(source, shape, ("B", *shape[2:]))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim" and "batch" in error.message


@pytest.mark.parametrize("source, shape", [("squeeze(3)", ("B", 1, 4)), ("squeeze(-4)", ("B", 1, 4))])
def test_a_dim_beyond_the_rank_is_a_constraint_error(source, shape):
    error = _fails(source, shape, ("B", 4))
    assert error.code == "E_CONSTRAINT" and "out of range" in error.message


def test_a_result_below_rank_two_is_a_constraint_error():
    error = _fails("squeeze(1)", ("B", 1), ("B", 1))
    assert error.code == "E_CONSTRAINT" and "rank 1" in error.message


@pytest.mark.parametrize("source", ["squeeze()", "squeeze(1.0)", "squeeze(True)", 'squeeze("1")',
                                    "squeeze(1, 2)", "squeeze(None)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 1, 4), ("B", 4)).code == "E_ARGUMENT"


def test_integer_input_is_a_dtype_error():
    assert _fails("squeeze(1)", ("B", 1, 4), ("B", 4), input_dtype="int64").code == "E_DTYPE"
