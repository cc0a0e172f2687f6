"""layer_norm2d@1 (alias channel_layer_norm): ConvNeXt's LayerNorm2d over the channels of
[B, C, H, W]. Numerics against timm.layers.LayerNorm2d with copied weights and against
F.layer_norm over the channels-last permutation (forward, input and parameter gradients),
the declared reference, per-position independence, finiteness for constant inputs,
gradcheck/gradgradcheck in float64, channels inferred in both directions, every error code,
and the public harness."""

import pytest
import torch
import torch.nn.functional as F
from timm.layers import LayerNorm2d

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.channel_layer_norm import ChannelLayerNorm


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source="channel_layer_norm()", shape=(5, 3, 4), **kwargs):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu", **kwargs)
    return model, model.nodes.n_n0


def _randomize(layer):
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()


def _permuted_layer_norm(x, layer):
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), layer.weight, layer.bias, layer.eps).permute(0, 3, 1, 2)


def test_declaration():
    spec = spec_of(ChannelLayerNorm)
    assert spec.alias == "channel_layer_norm" and spec.qualified == "layer_norm2d@1"
    assert spec.category == "normalization"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H, W]"
    assert list(spec.args) == ["eps", "elementwise_affine"]
    assert spec.args["eps"].default == 1e-6 and spec.args["eps"].exclusive_min
    assert spec.args["elementwise_affine"].default is True and not spec.args["elementwise_affine"].positional
    assert spec.positional_args == ("eps",)
    assert "ConvNeXt" in spec.docstring and "LayerNorm2d" in spec.docstring
    assert spec.reference is not None and not spec.policies
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(ChannelLayerNorm, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_the_defaults_are_recorded():
    plan = hndl.resolve("channel_layer_norm()", input_shape=("B", 4, 3, 3), output_shape=("B", 4, 3, 3))
    node = plan.nodes[0]
    assert node.args == {"eps": 1e-6, "elementwise_affine": True}
    assert node.provenance == {"eps": "default", "elementwise_affine": "default"}


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv(8, kernel_size=3, padding=1)\nchannel_layer_norm()\nconv(kernel_size=1)",
                        input_shape=("B", 3, 6, 6), output_shape=("B", 2, 6, 6))
    assert plan.nodes[1].input_shapes["x"] == ("B", 8, 6, 6)
    assert plan.nodes[2].args["in_channels"] == 8
    plan = hndl.resolve("conv(kernel_size=1)\nchannel_layer_norm()", input_shape=("B", 2, 3, 3),
                        output_shape=("B", 7, 3, 3))
    assert plan.nodes[0].args["out_channels"] == 7
    # spatial extents pass through backward, too
    plan = hndl.resolve("linear()\nreshape(4, 5)\nchannel_layer_norm()", input_shape=("B", 2),
                        output_shape=("B", 4, 5, 6))
    assert plan.nodes[0].args["out_features"] == 120


@pytest.mark.parametrize("source, eps", [("channel_layer_norm()", 1e-6), ("channel_layer_norm(1e-3)", 1e-3)])
def test_numerics_against_timm_layernorm2d_with_copied_weights(source, eps):
    model, layer = _built(source)
    reference = LayerNorm2d(5, eps=eps)
    _randomize(reference)
    layer.load_state_dict(reference.state_dict())
    assert list(layer.state_dict()) == list(reference.state_dict()) == ["weight", "bias"]
    x = (torch.randn(3, 5, 3, 4) * 2 + 1).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = x.detach().clone()
    out, expected = model(x), reference(x_ref)
    assert torch.equal(x.detach(), before)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
    torch.testing.assert_close(layer.bias.grad, reference.bias.grad)
    # and the other way round: timm loads our state
    fresh = LayerNorm2d(5, eps=eps)
    fresh.load_state_dict(layer.state_dict())
    torch.testing.assert_close(fresh(x.detach()), out.detach())
    model.eval()
    torch.testing.assert_close(model(x), out)


def test_numerics_against_f_layer_norm_over_the_permuted_tensor_and_the_reference():
    model, layer = _built()
    _randomize(layer)
    x = torch.randn(2, 5, 3, 4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), _permuted_layer_norm(x_ref, layer)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(ChannelLayerNorm).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_every_position_is_normalized_over_its_channels_alone():
    model, layer = _built("channel_layer_norm(elementwise_affine=False)")
    assert list(layer.parameters()) == [] and layer.weight is None and layer.bias is None
    x = torch.randn(2, 5, 3, 4)
    out = model(x)
    torch.testing.assert_close(out.mean(dim=1), torch.zeros(2, 3, 4), rtol=0, atol=1e-5)
    torch.testing.assert_close(out.var(dim=1, unbiased=False), torch.ones(2, 3, 4), rtol=0, atol=1e-4)
    # changing one position of one example changes nothing else (not group_norm(1), not batch statistics)
    changed = x.clone()
    changed[1, :, 2, 3] = torch.randn(5) * 10
    again = model(changed)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2, 3] = False
    torch.testing.assert_close(again.permute(0, 2, 3, 1)[mask], out.permute(0, 2, 3, 1)[mask], rtol=0, atol=0)
    assert not torch.allclose(out, F.group_norm(x, 1))


def test_state_is_initialized_like_layer_norm():
    _, layer = _built()
    assert torch.equal(layer.weight, torch.ones(5)) and torch.equal(layer.bias, torch.zeros(5))
    assert list(layer.buffers()) == []


@pytest.mark.parametrize("affine", ["True", "False"])
def test_constant_input_is_finite_forward_and_backward(affine):
    model, layer = _built(f"channel_layer_norm(elementwise_affine={affine})")
    if layer.weight is not None:
        _randomize(layer)
    x = torch.full((2, 5, 3, 4), 3.0, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    expected = torch.zeros_like(out)
    if layer.bias is not None:
        expected = layer.bias[None, :, None, None].expand_as(out).detach()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-3)
    out.mul(torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_gradcheck_and_gradgradcheck_in_float64():
    _, layer = _built(shape=(3, 2, 3))
    layer = layer.double()
    _randomize(layer)
    x = torch.randn(2, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))

    def through_parameters(w, b):
        return F.layer_norm(x.detach().permute(0, 2, 3, 1), (3,), w, b, layer.eps).permute(0, 3, 1, 2)
    assert torch.autograd.gradcheck(through_parameters, (layer.weight, layer.bias))
    assert torch.autograd.gradgradcheck(through_parameters, (layer.weight, layer.bias))


def test_reduced_precision_matches_float32():
    model, layer = _built(dtype="bfloat16")
    assert layer.weight.dtype == torch.bfloat16
    x = torch.randn(2, 5, 3, 4)
    out = model(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.layer_norm(x.permute(0, 2, 3, 1), (5,), eps=1e-6).permute(0, 3, 1, 2),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("args", ["0", "-1e-6", "eps=0", "elementwise_affine=1", "True", '"1e-6"',
                                  "num_channels=5", "1e-6, False", "bias=False"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"channel_layer_norm({args})", ("B", 5, 3, 3), ("B", 5, 3, 3)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_ranks_other_than_four_are_constraint_errors(shape):
    # layer_norm normalizes the last axis of ranks 2 and 3; this operator never guesses an axis there
    assert _fails("channel_layer_norm()", shape, shape).code == "E_CONSTRAINT"


def test_shape_changes_are_constraint_errors():
    assert _fails("channel_layer_norm()", ("B", 4, 3, 3), ("B", 4, 3, 2)).code == "E_CONSTRAINT"
    assert _fails("channel_layer_norm()", ("B", 4, 3, 3), ("B", 5, 3, 3)).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    error = _fails('channel_layer_norm(policy="up2")', ("B", 4, 3, 3), ("B", 4, 3, 3))
    assert error.code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("channel_layer_norm()", ("B", 4, 3, 3), ("B", 4, 3, 3), input_dtype="int64").code == "E_DTYPE"


def test_runtime_channel_mismatch_is_a_runtime_error():
    model, _ = _built()
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 6, 3, 4))
    assert error.value.code == "E_RUNTIME"
