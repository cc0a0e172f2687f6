"""group_norm@1: group divisibility as a resolution contradiction (from the producer, the
output contract or an explicit num_channels), channel inference in both directions, numerics
against nn.GroupNorm and the group formula (forward, input and parameter gradients),
finiteness for constant inputs, gradcheck/gradgradcheck in float64, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.group_norm import GroupNorm


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source="group_norm(2)", shape=(6, 4, 5)):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu")
    return model, model.nodes.n_n0


def _formula(x, groups, weight, bias, eps):
    """Population statistics over each (example, group), then the per-channel affine."""
    b, c, h, w = x.shape
    grouped = x.reshape(b, groups, -1)
    mean = grouped.mean(dim=2, keepdim=True)
    variance = ((grouped - mean) ** 2).mean(dim=2, keepdim=True)
    normalized = ((grouped - mean) / torch.sqrt(variance + eps)).reshape(b, c, h, w)
    if weight is None:
        return normalized
    return normalized * weight[None, :, None, None] + bias[None, :, None, None]


def test_declaration():
    spec = spec_of(GroupNorm)
    assert spec.alias == "group_norm" and spec.qualified == "group_norm@1"
    assert spec.category == "normalization"
    assert spec.positional_args == ("num_groups",)
    assert spec.args["num_groups"].required and spec.args["num_groups"].min == 1
    assert spec.args["affine"].default is True and spec.args["eps"].default == 1e-5
    assert spec.args["num_channels"].inferable and spec.args["num_channels"].dim == "C"
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_num_channels_inferred_forward_and_backward():
    plan = hndl.resolve("conv(6, kernel_size=3)\ngroup_norm(3)", input_shape=("B", 2, 7, 7),
                        output_shape=("B", 6, 5, 5))
    assert plan.nodes[1].args["num_channels"] == 6 and plan.nodes[1].provenance["num_channels"] == "inferred"
    plan = hndl.resolve("conv(kernel_size=1)\ngroup_norm(4)", input_shape=("B", 3, 4, 4), output_shape=("B", 8, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 8


def test_indivisible_channels_from_the_producer_are_a_constraint_error():
    error = _fails("group_norm(4)", ("B", 6, 3, 3), ("B", 6, 3, 3))
    assert error.code == "E_CONSTRAINT"
    assert "6 channels" in error.message and "num_groups=4" in error.message


def test_indivisible_channels_from_the_output_contract_are_a_constraint_error():
    # the convolution's channel count comes backward from the contract, then meets the groups
    error = _fails("conv(kernel_size=1)\ngroup_norm(4)", ("B", 3, 4, 4), ("B", 10, 4, 4))
    assert error.code == "E_CONSTRAINT" and "not divisible" in error.message


def test_indivisible_explicit_num_channels_is_a_constraint_error():
    error = _fails("linear()\nreshape(3, 3)\ngroup_norm(2, num_channels=5)", ("B", 4), ("B", 5, 3, 3))
    assert error.code == "E_CONSTRAINT" and "not divisible" in error.message


@pytest.mark.parametrize("source, groups", [("group_norm(2)", 2), ("group_norm(1)", 1), ("group_norm(6)", 6),
                                            ("group_norm(3, affine=False, eps=0.01)", 3)])
def test_numerics_against_nn_groupnorm_and_the_formula(source, groups):
    model, layer = _built(source)
    reference = nn.GroupNorm(groups, 6, eps=layer.eps, affine=layer.affine)
    if layer.affine:
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
    reference.load_state_dict(layer.state_dict())
    x = (torch.randn(3, 6, 4, 5) * 2 - 1).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _formula(x, groups, layer.weight, layer.bias, layer.eps), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, spec_of(GroupNorm).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    if layer.affine:
        torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
        torch.testing.assert_close(layer.bias.grad, reference.bias.grad)
    else:
        assert list(layer.parameters()) == []
    model.eval()
    torch.testing.assert_close(model(x), out)  # no running statistics: eval is the same
    assert list(layer.buffers()) == []


def test_examples_are_normalized_independently():
    model, _ = _built()
    x = torch.randn(2, 6, 4, 5)
    torch.testing.assert_close(model(x)[:1], model(x[:1]))


@pytest.mark.parametrize("affine", ["True", "False"])
def test_constant_input_is_finite_forward_and_backward(affine):
    model, layer = _built(f"group_norm(3, affine={affine})")
    x = torch.full((2, 6, 4, 5), -3.0, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    out.mul(torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all()
    if layer.affine:
        assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(layer.bias.grad).all()
        torch.testing.assert_close(out, layer.bias[None, :, None, None].expand_as(out).detach(), rtol=0, atol=1e-4)


def test_gradcheck_and_gradgradcheck_in_float64():
    _, layer = _built(shape=(4, 2, 3))
    layer = layer.double()
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(2, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
    assert torch.autograd.gradcheck(lambda w, b: F.group_norm(x.detach(), 2, w, b, layer.eps),
                                    (layer.weight, layer.bias))


@pytest.mark.parametrize("source", ["group_norm()", "group_norm(0)", "group_norm(-2)", "group_norm(2.0)",
                                    "group_norm(2, eps=0)", "group_norm(2, affine=0)", "group_norm(True)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 3, 3), ("B", 4, 3, 3)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("group_norm(2)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("group_norm(2)", ("B", 4, 3, 3), ("B", 4, 3, 3), input_dtype="int32").code == "E_DTYPE"


@pytest.mark.parametrize("source", ["group_norm(4, affine=False)", "group_norm(4)"])
def test_a_group_of_a_single_value_is_a_constraint_error_at_resolution(source):
    # torch refuses it at batch 1, in eval mode too, and at any other batch it outputs zeros
    error = _fails(source, ("B", 4, 1, 1), ("B", 4, 1, 1))
    assert error.code == "E_CONSTRAINT"
    assert "single value per group" in error.message and "(C / num_groups) * H * W > 1" in error.message
    assert "fewer groups" in error.message
    # the channels may come from the producer: a 1 x 1 map seen only after the convolution
    error = _fails("conv(kernel_size=3)\ngroup_norm(8)", ("B", 3, 3, 3), ("B", 8, 1, 1))
    assert error.code == "E_CONSTRAINT" and "single value per group" in error.message


@pytest.mark.parametrize("source, shape", [("group_norm(2)", (4, 1, 1)), ("group_norm(4)", (4, 1, 2)),
                                           ("group_norm(1)", (1, 2, 1))])
def test_every_group_of_several_values_runs_at_batch_one_in_both_modes(source, shape):
    model, layer = _built(source, shape)
    x = torch.randn(1, *shape)
    for mode in (model.train, model.eval):
        mode()
        out = model(x)
        torch.testing.assert_close(out, F.group_norm(x, layer.num_groups, layer.weight, layer.bias, layer.eps))
