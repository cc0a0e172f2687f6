"""mean@1: the mean over one non-batch axis, removed or kept as 1. Declaration, numerics forward
and backward against torch.mean (token pooling of [B, T, D], global pooling of [B, C, L]),
gradcheck and gradgradcheck in float64, rank and the other extents inferred both ways (the
reduced extent only from the input), every error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.mean import Mean


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Mean)
    assert spec.alias == "mean" and spec.qualified == "mean@1" and spec.version == 1
    assert spec.positional_args == ("dim", "keepdim")
    assert spec.args["dim"].type is int and spec.args["dim"].required
    assert spec.args["keepdim"].type is bool and spec.args["keepdim"].default is False
    assert all(arg.help for arg in spec.args.values())
    assert spec.category == "reduction" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness():
    check_operator(Mean, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, source, expected", [
    (("B", 5, 8), "mean(1)", ("B", 8)),
    (("B", 5, 8), "mean(-1)", ("B", 5)),
    (("B", 5, 8), "mean(-2, keepdim=True)", ("B", 1, 8)),
    (("B", 5, 8), "mean(2, True)", ("B", 5, 1)),
    (("B", 3, 4, 5), "mean(2)", ("B", 3, 5)),
    (("B", 3, 4, 5), "mean(-1, keepdim=True)", ("B", 3, 4, 1)),
    (("B", 6), "mean(1, keepdim=True)", ("B", 1)),
])
def test_numerics_forward_and_backward(shape, source, expected):
    model = network(source, input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    dim, keepdim = node.args["dim"], node.args["keepdim"]
    assert (module.dim, module.keepdim) == (dim, keepdim) and list(model.parameters()) == []
    assert node.output_shapes["out"] == expected
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, torch.mean(saved, dim=dim, keepdim=keepdim))
    torch.testing.assert_close(out, spec_of(Mean).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    spread = upstream if keepdim else upstream.unsqueeze(dim)
    torch.testing.assert_close(grad, spread.expand_as(saved) / saved.shape[dim])
    torch_x = saved.clone().requires_grad_()
    (expected_grad,) = torch.autograd.grad((torch.mean(torch_x, dim=dim, keepdim=keepdim) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected_grad)


def test_defaults_and_provenance():
    node = _resolve("mean(1)", ("B", 5, 8), ("B", 8)).nodes[0]
    assert node.args == {"dim": 1, "keepdim": False}
    assert node.provenance["keepdim"] == "default" and node.provenance["dim"] == "explicit"


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("mean(1)", input_shape=("B", 3, 4), output_shape=("B", 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_token_pooling_width_infers_backward_from_the_output():
    plan = _resolve("linear()\nmean(1)", ("B", 6, 8), ("B", 16))
    assert plan.nodes[0].args["out_features"] == 16
    assert plan.nodes[1].input_shapes["x"] == ("B", 6, 16)
    plan = _resolve("linear()\nmean(-2, keepdim=True)", ("B", 6, 8), ("B", 1, 16))
    assert plan.nodes[0].args["out_features"] == 16


def test_global_pooling_width_infers_forward():
    plan = _resolve("mean(-1)\nlinear()", ("B", 8, 12), ("B", 10))
    assert plan.nodes[1].args["in_features"] == 8


def test_rank_and_extents_infer_backward_from_the_output():
    plan = _resolve("reshape(4)\nmean(1)", ("B", 32), ("B", 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 8)
    plan = _resolve("reshape(4)\nmean(1, keepdim=True)", ("B", 32), ("B", 1, 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 8)


def test_the_reduced_extent_is_never_read_off_the_output():
    # Every width of the linear reduces to the same [B, 4]: nothing may pick one.
    error = _fails("linear()\nmean(-1)", ("B", 4, 8), ("B", 4))
    assert error.code == "E_AMBIGUOUS"


def test_a_kept_axis_must_be_one():
    assert _fails("mean(1, keepdim=True)", ("B", 5, 8), ("B", 5, 8)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("source, shape", [("mean(0)", ("B", 4, 3)), ("mean(dim=0, keepdim=True)", ("B", 4, 3)),
                                           ("mean(-3)", ("B", 4, 3)), ("mean(-4)", ("B", 2, 4, 3))])
def test_the_batch_axis_is_an_argument_error(source, shape):
    error = _fails(source, shape, ("B", 3))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim" and "batch" in error.message


@pytest.mark.parametrize("source", ["mean(3)", "mean(-4)", "mean(3, keepdim=True)"])
def test_a_dim_beyond_the_rank_is_a_constraint_error(source):
    error = _fails(source, ("B", 4, 3), ("B", 3))
    assert error.code == "E_CONSTRAINT" and "out of range" in error.message


def test_a_result_below_rank_two_is_a_constraint_error():
    error = _fails("mean(1)", ("B", 4), ("B", 4))
    assert error.code == "E_CONSTRAINT" and "rank 1" in error.message


@pytest.mark.parametrize("source", ["mean()", "mean(1.0)", "mean(True)", 'mean("1")', "mean(1, 1)",
                                    "mean(1, keepdim=None)", "mean(1, False, 2)", "mean(1, dtype=1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 3), ("B", 3)).code == "E_ARGUMENT"


def test_contradicting_extents_are_constraint_errors():
    assert _fails("mean(1)", ("B", 4, 3), ("B", 4)).code == "E_CONSTRAINT"
    assert _fails("mean(1)", ("B", 4, 3), ("B", 1, 3)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("mean(1)", ("B", 4, 3), ("B", 3), input_dtype="int64").code == "E_DTYPE"
