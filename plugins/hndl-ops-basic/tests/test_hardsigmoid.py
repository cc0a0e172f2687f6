"""hardsigmoid@1: declaration, numerics forward and backward against F.hardsigmoid on every rank,
out of place, gradcheck and gradgradcheck in float64 (torch's own kernel has no double backward;
ours does), the gradient at the kinks, shape inference both ways, error codes, harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.hardsigmoid import Hardsigmoid

KINKS = (-3.0, 3.0)


def _away_from_kinks(x):
    """Move values off the points where the derivative jumps, so finite differences hold."""
    for kink in KINKS:
        x = torch.where((x - kink).abs() < 0.05, x + 0.1, x)
    return x


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Hardsigmoid)
    assert spec.alias == "hardsigmoid" and spec.qualified == "hardsigmoid@1" and spec.version == 1
    assert spec.args == {} and spec.category == "activation"
    assert str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.reference is not None and spec.summary and spec.docstring
    assert issubclass(Hardsigmoid, torch.nn.Hardsigmoid)


def test_passes_the_harness():
    check_operator(Hardsigmoid, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_out_of_place(shape):
    model = network("hardsigmoid()", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.inplace is False and list(model.parameters()) == []
    x = _away_from_kinks(torch.randn(3, *shape[1:]) * 4).requires_grad_()
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved) and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, F.hardsigmoid(saved))
    torch.testing.assert_close(out, torch.clamp(saved + 3, 0, 6) / 6)
    assert out.min() >= 0 and out.max() <= 1
    torch.testing.assert_close(out, spec_of(Hardsigmoid).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    slope = torch.where((saved > -3) & (saved < 3), 1 / 6, 0.0)
    torch.testing.assert_close(grad, upstream * slope)
    torch_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.hardsigmoid(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("hardsigmoid()", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = _away_from_kinks(torch.randn(2, 3, 4, dtype=torch.float64) * 4).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_gradient_at_the_kinks_matches_torch_and_second_derivatives_exist():
    model = network("hardsigmoid()", input_shape=("B", 5), output_shape=("B", 5), device="cpu")
    x = torch.tensor([[-3.0, -2.999, 0.0, 2.999, 3.0]], requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    torch_x = x.detach().clone().requires_grad_()
    (expected,) = torch.autograd.grad(F.hardsigmoid(torch_x).sum(), torch_x)
    torch.testing.assert_close(grad, expected)
    torch.testing.assert_close(grad.detach(), torch.tensor([[0.0, 1 / 6, 1 / 6, 1 / 6, 0.0]]))
    (second,) = torch.autograd.grad(grad.sum(), x, allow_unused=True)
    assert second is None or torch.equal(second, torch.zeros_like(x))


def test_shape_infers_in_both_directions():
    backward = hndl.resolve("linear()\nhardsigmoid()", input_shape=("B", 16), output_shape=("B", 3))
    assert backward.nodes[0].args["out_features"] == 3
    forward = hndl.resolve("linear(5)\nhardsigmoid()\nlinear()", input_shape=("B", 4, 16), output_shape=("B", 4, 2))
    assert forward.nodes[1].output_shapes["out"] == ("B", 4, 5)


def test_errors():
    assert _fails("hardsigmoid(3)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails("hardsigmoid(inplace=True)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails("hardsigmoid()", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails("hardsigmoid()", ("B", 4), input_dtype="int64").code == "E_DTYPE"
