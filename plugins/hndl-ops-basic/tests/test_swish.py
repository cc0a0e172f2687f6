"""swish@1 (SiLU): declaration, numerics forward and backward against F.silu on every rank, out of
place, gradcheck and gradgradcheck in float64, shape inference both ways, error codes, harness.

The alias is swish because silu stays free for the specification's custom-operator example (§8):
`Registry.builtins()` plus an `example.silu@1` must keep registering."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.swish import Swish


@pytest.fixture(scope="module")
def registry():
    return Registry.from_packs("basic")


def _fails(registry, source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, registry=registry, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Swish)
    assert spec.alias == "swish" and spec.qualified == "swish@1" and spec.version == 1
    assert spec.args == {} and spec.category == "activation"
    assert str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.reference is not None and spec.summary and spec.docstring
    assert issubclass(Swish, torch.nn.SiLU)


def test_the_specifications_silu_example_still_registers_beside_it():
    registry = Registry.builtins()
    assert registry.get("swish").cls is Swish

    @registry.operator("silu", identity="example.silu", summary="SiLU.", shape="x[B, ...] -> out[B, ...]")
    class SiLU(nn.SiLU):
        """The §8 example."""

    plan = hndl.resolve("linear(8)\nsilu()\nswish()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                        registry=registry)
    assert [node.op for node in plan.nodes] == ["linear@1", "example.silu@1", "swish@1", "linear@1"]


def test_passes_the_harness(registry):
    check_operator(Swish, registry=registry)


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_out_of_place(registry, shape):
    model = network("swish()", input_shape=shape, output_shape=shape, device="cpu", registry=registry)
    module = model.nodes.n_n0
    assert module.inplace is False and list(model.parameters()) == []
    x = (torch.randn(3, *shape[1:]) * 4).requires_grad_()
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved) and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, F.silu(saved))
    torch.testing.assert_close(out, saved * torch.sigmoid(saved))
    torch.testing.assert_close(out, spec_of(Swish).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    sig = torch.sigmoid(saved)
    torch.testing.assert_close(grad, upstream * sig * (1 + saved * (1 - sig)))
    torch_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.silu(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected)


def test_gradcheck_and_gradgradcheck_in_float64(registry):
    model = network("swish()", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu", registry=registry)
    module = model.nodes.n_n0.double()
    x = (torch.randn(2, 3, 4, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_shape_infers_in_both_directions(registry):
    backward = hndl.resolve("linear()\nswish()", input_shape=("B", 16), output_shape=("B", 3), registry=registry)
    assert backward.nodes[0].args["out_features"] == 3
    forward = hndl.resolve("linear(5)\nswish()\nlinear()", input_shape=("B", 4, 16), output_shape=("B", 4, 2),
                           registry=registry)
    assert forward.nodes[1].output_shapes["out"] == ("B", 4, 5)


def test_errors(registry):
    assert _fails(registry, "swish(3)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails(registry, "swish(inplace=True)", ("B", 4)).code == "E_ARGUMENT"
    assert _fails(registry, "swish()", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails(registry, "swish()", ("B", 4), input_dtype="int64").code == "E_DTYPE"
