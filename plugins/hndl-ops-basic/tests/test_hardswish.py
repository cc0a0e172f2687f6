"""hardswish@1: declaration, numerics forward and backward against F.hardswish on every rank,
out of place, gradcheck and gradgradcheck in float64, shape inference both ways, error codes,
harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.hardswish import Hardswish

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
    spec = spec_of(Hardswish)
    assert spec.alias == "hardswish" and spec.qualified == "hardswish@1" and spec.version == 1
    assert spec.args == {} and spec.category == "activation"
    assert str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.reference is not None and spec.summary and spec.docstring
    assert issubclass(Hardswish, torch.nn.Hardswish)


def test_passes_the_harness():
    check_operator(Hardswish, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_out_of_place(shape):
    model = network("hardswish()", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.inplace is False and list(model.parameters()) == []
    x = _away_from_kinks(torch.randn(3, *shape[1:]) * 4).requires_grad_()
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved) and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, F.hardswish(saved))
    torch.testing.assert_close(out, saved * torch.clamp(saved + 3, 0, 6) / 6)
    torch.testing.assert_close(out, spec_of(Hardswish).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    slope = torch.where(saved < -3, 0.0, torch.where(saved > 3, 1.0, (2 * saved + 3) / 6))
    torch.testing.assert_close(grad, upstream * slope)
    torch_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.hardswish(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("hardswish()", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = _away_from_kinks(torch.randn(2, 3, 4, dtype=torch.float64) * 4).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_shape_infers_in_both_directions():
    backward = hndl.resolve("linear()\nhardswish()", input_shape=("B", 16), output_shape=("B", 3))
    assert backward.nodes[0].args["out_features"] == 3
    forward = hndl.resolve("linear(5)\nhardswish()\nlinear()", input_shape=("B", 4, 16), output_shape=("B", 4, 2))
    assert forward.nodes[1].output_shapes["out"] == ("B", 4, 5)


def test_errors():
    assert _fails("hardswish(3)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails("hardswish(inplace=True)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails("hardswish()", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails("hardswish()", ("B", 4), input_dtype="int64").code == "E_DTYPE"
