"""channel_scale_shift@1: x * (1 + scale) + shift per channel, [scale, shift] from one [B, 2*C]
tensor. Declaration, numerics forward and backward against diffusers' scale_shift formula at rank
2, 3 and 4, gradcheck and gradgradcheck in float64, C and 2*C inferred in every direction, every
error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.channel_scale_shift import ChannelScaleShift


@pytest.fixture(scope="module")
def registry():
    return Registry.from_packs("basic")


def _resolve(registry, source, input_shape, output_shape, **kwargs):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry, **kwargs)


def _fails(registry, source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        _resolve(registry, source, input_shape, output_shape, **kwargs)
    assert error.value.remedies
    return error.value


def _expected(x, params):
    scale, shift = torch.chunk(params, 2, dim=1)
    trailing = (None,) * (x.dim() - 2)
    return x * (1 + scale[(...,) + trailing]) + shift[(...,) + trailing]


def test_declaration():
    spec = spec_of(ChannelScaleShift)
    assert spec.alias == "channel_scale_shift" and spec.qualified == "channel_scale_shift@1" and spec.version == 1
    assert spec.input_ports() == ("x", "params") and spec.args == {}
    assert str(spec.shape) == "x[B, C, ...], params[B, 2*C] -> out[B, C, ...]"
    assert spec.category == "join" and spec.shape_text and spec.summary and spec.reference is not None
    assert "scale_shift" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness(registry):
    check_operator(ChannelScaleShift, registry=registry)


@pytest.mark.parametrize("shape", [("B", 6), ("B", 6, 5), ("B", 6, 3, 4)])
def test_numerics_forward_and_backward(registry, shape):
    model = network("channel_scale_shift(x, params)", input_shape={"x": shape, "params": ("B", 12)},
                    output_shape=shape, device="cpu", registry=registry)
    assert list(model.parameters()) == [] and list(model.buffers()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    params = torch.randn(3, 12, requires_grad=True)
    out = model(x=x, params=params)
    torch.testing.assert_close(out, _expected(x.detach(), params.detach()))
    reference = spec_of(ChannelScaleShift).reference(model.nodes.n_n0)
    torch.testing.assert_close(out, reference(x.detach(), params.detach()))
    upstream = torch.randn_like(out)
    grad_x, grad_params = torch.autograd.grad((out * upstream).sum(), (x, params))
    x_ref, params_ref = x.detach().clone().requires_grad_(), params.detach().clone().requires_grad_()
    expected = torch.autograd.grad((_expected(x_ref, params_ref) * upstream).sum(), (x_ref, params_ref))
    torch.testing.assert_close(grad_x, expected[0])
    torch.testing.assert_close(grad_params, expected[1])


def test_zero_params_leave_x_unchanged(registry):
    model = network("channel_scale_shift(x, params)", input_shape={"x": ("B", 4, 3), "params": ("B", 8)},
                    output_shape=("B", 4, 3), device="cpu", registry=registry)
    x = torch.randn(2, 4, 3)
    assert torch.equal(model(x=x, params=torch.zeros(2, 8)), x)


def test_matches_the_scale_shift_time_embedding_of_a_diffusers_resnet_block(registry):
    # diffusers ResnetBlock2D(time_embedding_norm="scale_shift"):
    #   temb = time_emb_proj(act(temb))[:, :, None, None]; scale, shift = chunk(temb, 2, 1)
    #   h = norm2(h) * (1 + scale) + shift
    source = "t = swish(temb)\nt = linear(t)\nchannel_scale_shift(h, t)"
    model = network(source, input_shape={"h": ("B", 8, 4, 4), "temb": ("B", 16)}, output_shape=("B", 8, 4, 4),
                    device="cpu", registry=registry)
    projection = model.nodes.n_n1
    assert (projection.in_features, projection.out_features) == (16, 16)  # 2 * 8, inferred
    h, temb = torch.randn(2, 8, 4, 4), torch.randn(2, 16)
    emb = projection(torch.nn.functional.silu(temb))[:, :, None, None]
    scale, shift = torch.chunk(emb, 2, dim=1)
    torch.testing.assert_close(model(h=h, temb=temb), h * (1 + scale) + shift)


def test_gradcheck_and_gradgradcheck_in_float64(registry):
    model = network("channel_scale_shift(x, params)", input_shape={"x": ("B", 3, 2, 2), "params": ("B", 6)},
                    output_shape=("B", 3, 2, 2), device="cpu", registry=registry)
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    params = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x, params))
    assert torch.autograd.gradgradcheck(module, (x, params))


def test_twice_the_channels_infer_forward_to_the_producer_of_params(registry):
    plan = _resolve(registry, "p = linear(z)\nchannel_scale_shift(x, p)", {"x": ("B", 8, 5), "z": ("B", 3)},
                    ("B", 8, 5))
    assert plan.node("n0").args["out_features"] == 16


def test_channels_infer_from_params_to_the_producer_of_x(registry):
    plan = _resolve(registry, "h = linear(x)\nh = transpose(h, 1, 2)\nchannel_scale_shift(h, p)",
                    {"x": ("B", 5, 3), "p": ("B", 14)}, ("B", 7, 5))
    assert plan.node("n0").args["out_features"] == 7
    plan = _resolve(registry, "h = linear(x)\nchannel_scale_shift(h, p)", {"x": ("B", 5), "p": ("B", 6)}, ("B", 3))
    assert plan.node("n0").args["out_features"] == 3


def test_channels_infer_backward_from_the_output_contract(registry):
    source = "h = linear(x)\nh = transpose(h, 1, 2)\np = linear(z)\nchannel_scale_shift(h, p)"
    plan = _resolve(registry, source, {"x": ("B", 5, 3), "z": ("B", 4)}, ("B", 8, 5))
    assert plan.node("n0").args["out_features"] == 8 and plan.node("n2").args["out_features"] == 16


@pytest.mark.parametrize("x_shape, p_shape, out_shape, text", [
    (("B", 8, 4, 4), ("B", 12), ("B", 8, 4, 4), "but must be 2 times"),
    (("B", 8, 4, 4), ("B", 8), ("B", 8, 4, 4), "but must be 2 times"),
    (("B", 8, 4, 4), ("B", 16, 1, 1), ("B", 8, 4, 4), "input params must have rank 2 but has rank 4"),
    (("B", 8, 4, 4), ("B", 16), ("B", 8, 4, 5), "but must equal"),
])
def test_shape_disagreements_are_constraint_errors(registry, x_shape, p_shape, out_shape, text):
    error = _fails(registry, "channel_scale_shift(x, params)", {"x": x_shape, "params": p_shape}, out_shape)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0" and text in error.message


def test_an_odd_params_width_is_a_constraint_error(registry):
    error = _fails(registry, "h = linear(x)\nchannel_scale_shift(h, p)", {"x": ("B", 5), "p": ("B", 7)}, ("B", 3))
    assert error.code == "E_CONSTRAINT" and "3.5" in error.message and "not a positive integer" in error.message


def test_other_errors(registry):
    shapes = {"x": ("B", 8, 4), "params": ("B", 16)}
    source = "channel_scale_shift(x, params)"
    assert _fails(registry, "channel_scale_shift(x, params, 1)", shapes, ("B", 8, 4)).code == "E_ARGUMENT"
    assert _fails(registry, "channel_scale_shift(x)", {"x": ("B", 8, 4)}, ("B", 8, 4)).code == "E_BINDING"
    assert _fails(registry, source, shapes, ("B", 8, 4), input_dtype={"params": "int64"}).code == "E_DTYPE"


@pytest.mark.parametrize("shape", [("B", 6), ("B", 6, 5), ("B", 6, 3, 4)])
def test_fx_and_export_trace_the_per_channel_index(registry, shape):
    model = network("channel_scale_shift(x, params)", input_shape={"x": shape, "params": ("B", 12)}, output_shape=shape,
                    device="cpu", registry=registry)
    x, params = torch.randn(2, *shape[1:]), torch.randn(2, 12)
    expected = model(x=x, params=params)
    traced = torch.fx.symbolic_trace(model)
    torch.testing.assert_close(traced(x, params), expected)
    exported = torch.export.export(model, (x, params))
    torch.testing.assert_close(exported.module()(x, params), expected)

