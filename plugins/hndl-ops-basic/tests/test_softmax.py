"""softmax@1: the explicit, required dim (batch axis rejected with E_ARGUMENT, an axis past
the rank with E_CONSTRAINT), numerics against the formula, F.softmax and nn.Softmax forward
and backward on every supported rank, stability, gradcheck in float64, and error codes."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.softmax import Softmax


def _formula(x, dim):
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Softmax)
    assert spec.alias == "softmax" and spec.qualified == "softmax@1"
    assert spec.positional_args == ("dim",)
    dim = spec.args["dim"]
    assert dim.type is int and dim.required and dim.min is None and dim.help
    assert spec.category == "activation"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring


@pytest.mark.parametrize("shape, dim", [
    (("B", 6), 1), (("B", 6), -1),
    (("B", 4, 6), 1), (("B", 4, 6), 2), (("B", 4, 6), -1), (("B", 4, 6), -2),
    (("B", 2, 3, 3), 1), (("B", 2, 3, 3), -1), (("B", 2, 3, 3), 3), (("B", 2, 3, 3), -3),
])
def test_numerics_forward_and_backward_on_every_rank(shape, dim):
    model = network(f"softmax({dim})", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.dim == dim and model.plan.nodes[0].args["dim"] == dim  # kept as written
    assert list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, _formula(saved, dim))
    torch.testing.assert_close(out, F.softmax(saved, dim=dim))
    torch.testing.assert_close(out, torch.nn.Softmax(dim=dim)(saved))
    torch.testing.assert_close(out, spec_of(Softmax).reference(module)(saved))
    torch.testing.assert_close(out.sum(dim=dim), torch.ones_like(out.sum(dim=dim)))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    # d softmax: s * (g - sum(g * s))
    torch.testing.assert_close(grad, out.detach() * (upstream - (upstream * out.detach()).sum(dim=dim, keepdim=True)))
    torch_x = saved.clone().requires_grad_(True)
    (torch_grad,) = torch.autograd.grad((torch.nn.Softmax(dim=dim)(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, torch_grad)


def test_normalizes_along_the_named_axis_only():
    model = network("softmax(dim=1)", input_shape=("B", 4, 6), output_shape=("B", 4, 6), device="cpu")
    out = model(torch.randn(2, 4, 6))
    torch.testing.assert_close(out.sum(dim=1), torch.ones(2, 6))
    assert not torch.allclose(out.sum(dim=2), torch.ones(2, 4))


def test_large_logits_stay_finite():
    model = network("softmax(-1)", input_shape=("B", 3), output_shape=("B", 3), device="cpu")
    x = torch.tensor([[1000.0, 1000.0, -1000.0]], requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.5, 0.0]]))
    out[0, 0].backward()
    assert torch.isfinite(x.grad).all()


def test_width_propagates_backward_through_softmax():
    plan = hndl.resolve("linear()\nsoftmax(-1)", input_shape=("B", 32), output_shape=("B", 10))
    assert plan.nodes[0].args["out_features"] == 10


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("softmax(-1)", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_dim_is_required():
    error = _fails("softmax()", ("B", 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim"


@pytest.mark.parametrize("shape", [("B", 4), ("B", 4, 6), ("B", 2, 3, 3)])
def test_dim_zero_is_the_batch_axis_and_an_argument_error(shape):
    error = _fails("softmax(0)", shape)
    assert error.code == "E_ARGUMENT" and error.location.field == "dim"
    assert "batch" in error.message


@pytest.mark.parametrize("shape, dim", [(("B", 4), -2), (("B", 4, 6), -3), (("B", 2, 3, 3), -4)])
def test_a_negative_dim_naming_the_batch_axis_is_an_argument_error(shape, dim):
    error = _fails(f"softmax({dim})", shape)
    assert error.code == "E_ARGUMENT" and error.location.node == "n0"
    assert "batch" in error.message


@pytest.mark.parametrize("shape, dim", [
    (("B", 4), 2), (("B", 4), -3), (("B", 4, 6), 3), (("B", 4, 6), -4), (("B", 2, 3, 3), 4), (("B", 2, 3, 3), -5),
])
def test_a_dim_beyond_the_rank_is_a_constraint_error(shape, dim):
    error = _fails(f"softmax(dim={dim})", shape)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "out of range" in error.message


def test_out_of_range_is_detected_when_the_rank_comes_from_downstream():
    error = _fails("linear(x, 8)\nsoftmax(2)", ("B", 4), ("B", 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


@pytest.mark.parametrize("source", ["softmax(1.0)", "softmax(True)", 'softmax("last")', "softmax(None)",
                                    "softmax(1, 2)", "softmax(dim=1, dtype=1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4)).code == "E_ARGUMENT"


def test_shape_mismatch_is_a_constraint_error():
    assert _fails("softmax(-1)", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("softmax(-1)", ("B", 4), input_dtype="int64").code == "E_DTYPE"
