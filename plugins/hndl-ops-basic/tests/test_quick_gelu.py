"""quick_gelu@1: CLIP's x * sigmoid(1.702 x). Declaration, numerics forward and backward against
transformers' QuickGELUActivation on every rank, out of place, gradcheck and gradgradcheck in
float64, shape inference both ways, error codes, harness."""

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import QuickGELUActivation

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.quick_gelu import QuickGELU


@pytest.fixture(scope="module")
def registry():
    return Registry.from_packs("basic")


def _fails(registry, source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, registry=registry, **kwargs)
    assert error.value.remedies
    return error.value


def test_declaration():
    spec = spec_of(QuickGELU)
    assert spec.alias == "quick_gelu" and spec.qualified == "quick_gelu@1" and spec.version == 1
    assert spec.args == {} and spec.category == "activation"
    assert str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.reference is not None and spec.summary and "1.702" in spec.docstring


def test_passes_the_harness(registry):
    check_operator(QuickGELU, registry=registry)


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_against_transformers(registry, shape):
    model = network("quick_gelu()", input_shape=shape, output_shape=shape, device="cpu", registry=registry)
    module = model.nodes.n_n0
    assert list(model.parameters()) == [] and list(model.buffers()) == []
    x = (torch.randn(3, *shape[1:]) * 4).requires_grad_()
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved) and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, QuickGELUActivation()(saved))
    torch.testing.assert_close(out, spec_of(QuickGELU).reference(module)(saved))
    assert not torch.allclose(out, F.gelu(saved))  # a different function from gelu
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    reference_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((QuickGELUActivation()(reference_x) * upstream).sum(), reference_x)
    torch.testing.assert_close(grad, expected)
    sig = torch.sigmoid(1.702 * saved)
    torch.testing.assert_close(grad, upstream * (sig + 1.702 * saved * sig * (1 - sig)))


def test_gradcheck_and_gradgradcheck_in_float64(registry):
    model = network("quick_gelu()", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu",
                    registry=registry)
    module = model.nodes.n_n0.double()
    x = (torch.randn(2, 3, 4, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_shape_infers_in_both_directions(registry):
    backward = hndl.resolve("linear()\nquick_gelu()", input_shape=("B", 16), output_shape=("B", 3), registry=registry)
    assert backward.nodes[0].args["out_features"] == 3
    forward = hndl.resolve("linear(5)\nquick_gelu()\nlinear()", input_shape=("B", 4, 16), output_shape=("B", 4, 2),
                           registry=registry)
    assert forward.nodes[1].output_shapes["out"] == ("B", 4, 5)


def test_errors(registry):
    assert _fails(registry, "quick_gelu(3)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails(registry, "quick_gelu(slope=2.0)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails(registry, "quick_gelu()", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails(registry, "quick_gelu()", ("B", 4), input_dtype="int64").code == "E_DTYPE"
