"""instance_norm2d@1 (alias instance_norm): affine off by default (no parameters), numerics
against nn.InstanceNorm2d and the formula with and without affine (forward, input and
parameter gradients), identical train/eval behaviour, finiteness for constant inputs,
gradcheck/gradgradcheck in float64, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.instance_norm import InstanceNorm


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source="instance_norm()", shape=(3, 4, 5)):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu")
    return model, model.nodes.n_n0


def _formula(x, eps, weight=None, bias=None):
    mean = x.mean(dim=(2, 3), keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
    normalized = (x - mean) / torch.sqrt(variance + eps)
    if weight is None:
        return normalized
    return normalized * weight[None, :, None, None] + bias[None, :, None, None]


def test_declaration_and_the_affine_default():
    spec = spec_of(InstanceNorm)
    assert spec.alias == "instance_norm" and spec.qualified == "instance_norm2d@1"
    assert spec.category == "normalization"
    assert spec.args["affine"].default is False
    assert "affine defaults to False" in spec.docstring
    assert spec.args["num_features"].inferable and spec.args["eps"].default == 1e-5
    assert spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_default_node_has_no_parameters_and_no_buffers():
    plan = hndl.resolve("conv(4, kernel_size=3)\ninstance_norm()", input_shape=("B", 2, 6, 6),
                        output_shape=("B", 4, 4, 4))
    node = plan.nodes[1]
    assert node.args == {"eps": 1e-5, "affine": False, "num_features": 4}
    assert node.provenance["affine"] == "default" and node.provenance["num_features"] == "inferred"
    _, layer = _built()
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_channels_inferred_backward_through_the_normalization():
    plan = hndl.resolve("conv(kernel_size=1)\ninstance_norm()", input_shape=("B", 3, 4, 4), output_shape=("B", 6, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 6 and plan.nodes[1].args["num_features"] == 6


@pytest.mark.parametrize("source", ["instance_norm()", "instance_norm(affine=True)", "instance_norm(eps=0.1)"])
def test_numerics_against_nn_instancenorm2d_and_the_formula(source):
    model, layer = _built(source)
    reference = nn.InstanceNorm2d(3, eps=layer.eps, affine=layer.affine)
    if layer.affine:
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
    reference.load_state_dict(layer.state_dict())
    x = (torch.randn(2, 3, 4, 5) * 4 + 2).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _formula(x, layer.eps, layer.weight, layer.bias), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, spec_of(InstanceNorm).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    if layer.affine:
        torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
        torch.testing.assert_close(layer.bias.grad, reference.bias.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)  # no running statistics: eval is the same


@pytest.mark.parametrize("affine", ["True", "False"])
def test_constant_input_is_finite_forward_and_backward(affine):
    model, layer = _built(f"instance_norm(affine={affine})")
    x = torch.full((2, 3, 4, 5), 11.0, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    out.mul(torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all()
    if layer.affine:
        assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(layer.bias.grad).all()
        torch.testing.assert_close(out, layer.bias[None, :, None, None].expand_as(out).detach(), rtol=0, atol=1e-4)
    else:
        torch.testing.assert_close(out, torch.zeros_like(out), rtol=0, atol=1e-4)


@pytest.mark.parametrize("affine", [False, True])
def test_gradcheck_and_gradgradcheck_in_float64(affine):
    _, layer = _built(f"instance_norm(affine={affine})", shape=(2, 3, 2))
    layer = layer.double()
    x = torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
    if affine:
        with torch.no_grad():
            layer.weight.normal_()
        assert torch.autograd.gradcheck(lambda w, b: F.instance_norm(x.detach(), weight=w, bias=b, eps=layer.eps),
                                        (layer.weight, layer.bias))


def test_a_single_spatial_element_is_a_constraint_error():
    error = _fails("instance_norm()", ("B", 4, 1, 1), ("B", 4, 1, 1))
    assert error.code == "E_CONSTRAINT" and "H * W > 1" in error.message
    # found once the producer fixes the extent
    error = _fails("conv(4, kernel_size=3)\ninstance_norm()", ("B", 2, 3, 3), ("B", 4, 1, 1))
    assert error.code == "E_CONSTRAINT"
    # one spatial axis of 1 is fine
    hndl.resolve("instance_norm()", input_shape=("B", 4, 1, 3), output_shape=("B", 4, 1, 3))


@pytest.mark.parametrize("args", ["eps=0", "eps=-1.0", "affine=1", "affine=\"yes\"", "num_features=0", "True"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"instance_norm({args})", ("B", 4, 3, 3), ("B", 4, 3, 3)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("instance_norm()", shape, shape).code == "E_CONSTRAINT"


def test_num_features_contradicting_the_input_is_a_constraint_error():
    assert _fails("instance_norm(num_features=2)", ("B", 4, 3, 3), ("B", 4, 3, 3)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("instance_norm()", ("B", 4, 3, 3), ("B", 4, 3, 3), input_dtype="int64").code == "E_DTYPE"
