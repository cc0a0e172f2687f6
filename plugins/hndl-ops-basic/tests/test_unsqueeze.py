"""unsqueeze@1: insert an axis of extent 1 at a non-batch position (counted on the output, as in
torch.unsqueeze). Declaration, numerics forward and backward against torch.unsqueeze, gradcheck
and gradgradcheck in float64, rank and extents inferred both ways, every error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.unsqueeze import Unsqueeze


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Unsqueeze)
    assert spec.alias == "unsqueeze" and spec.qualified == "unsqueeze@1" and spec.version == 1
    assert spec.positional_args == ("dim",)
    assert spec.args["dim"].type is int and spec.args["dim"].required and spec.args["dim"].help
    assert spec.category == "shape" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness():
    check_operator(Unsqueeze, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dim, expected", [
    (("B", 6), 1, ("B", 1, 6)), (("B", 6), 2, ("B", 6, 1)), (("B", 6), -1, ("B", 6, 1)), (("B", 6), -2, ("B", 1, 6)),
    (("B", 4, 6), 1, ("B", 1, 4, 6)), (("B", 4, 6), 2, ("B", 4, 1, 6)), (("B", 4, 6), -1, ("B", 4, 6, 1)),
])
def test_numerics_forward_and_backward(shape, dim, expected):
    model = network(f"unsqueeze({dim})", input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert node.args["dim"] == dim and module.dim == dim  # kept as written
    assert node.output_shapes["out"] == expected and list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, no copy
    assert torch.equal(out, torch.unsqueeze(saved, dim))
    assert torch.equal(out, spec_of(Unsqueeze).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    assert torch.equal(grad, upstream.squeeze(dim))


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("unsqueeze(-1)", input_shape=("B", 3, 2), output_shape=("B", 3, 2, 1), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("dim, output_shape", [(1, ("B", 1, 5)), (-1, ("B", 5, 1)), (-2, ("B", 1, 5))])
def test_a_width_known_only_from_the_output_reaches_the_linear_before(dim, output_shape):
    plan = _resolve(f"linear()\nunsqueeze({dim})", ("B", 8), output_shape)
    assert plan.nodes[0].args["out_features"] == 5
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_rank_and_extents_infer_backward_from_the_output():
    plan = _resolve("reshape(4)\nunsqueeze(1)", ("B", 32), ("B", 1, 4, 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 8)


def test_rank_infers_forward_to_a_bare_reshape_after():
    plan = _resolve("unsqueeze(1)\nreshape()\nlinear()", ("B", 2, 3), ("B", 4))
    assert plan.nodes[0].output_shapes["out"] == ("B", 1, 2, 3)
    assert plan.nodes[2].args["in_features"] == 6


def test_the_new_axis_must_be_one():
    error = _fails("unsqueeze(1)", ("B", 4), ("B", 2, 4))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("source, shape", [("unsqueeze(0)", ("B", 4)), ("unsqueeze(dim=0)", ("B", 4, 2)),
                                           ("unsqueeze(-3)", ("B", 4)), ("unsqueeze(-4)", ("B", 4, 2))])
def test_the_batch_position_is_an_argument_error(source, shape):
    error = _fails(source, shape, ("B", 1, *shape[1:]))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim" and "batch" in error.message


@pytest.mark.parametrize("source, shape", [("unsqueeze(3)", ("B", 4)), ("unsqueeze(-4)", ("B", 4)),
                                           ("unsqueeze(4)", ("B", 4, 2))])
def test_a_position_beyond_the_output_rank_is_a_constraint_error(source, shape):
    error = _fails(source, shape, ("B", 1, *shape[1:]))
    assert error.code == "E_CONSTRAINT" and "out of range" in error.message


def test_an_output_above_rank_four_is_a_constraint_error():
    error = _fails("unsqueeze(1)", ("B", 2, 3, 4), ("B", 2, 3, 4))
    assert error.code == "E_CONSTRAINT" and "rank 5" in error.message


@pytest.mark.parametrize("source", ["unsqueeze()", "unsqueeze(1.0)", "unsqueeze(True)", 'unsqueeze("1")',
                                    "unsqueeze(1, 2)", "unsqueeze(None)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4), ("B", 1, 4)).code == "E_ARGUMENT"


def test_contradicting_ranks_are_constraint_errors():
    assert _fails("unsqueeze(1)", ("B", 4), ("B", 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("unsqueeze(1)", ("B", 4), ("B", 1, 4), input_dtype="int64").code == "E_DTYPE"
