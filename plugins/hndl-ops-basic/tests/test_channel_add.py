"""channel_add@1: a [B, C] tensor added at every position of a [B, C, ...] tensor. Declaration,
numerics forward and backward against the broadcast the references write (diffusers'
ResnetBlock2D time embedding) at rank 2, 3 and 4, gradcheck and gradgradcheck in float64, C
inferred in every direction, every error code, harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.channel_add import ChannelAdd


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


def test_declaration():
    spec = spec_of(ChannelAdd)
    assert spec.alias == "channel_add" and spec.qualified == "channel_add@1" and spec.version == 1
    assert spec.input_ports() == ("x", "y") and spec.args == {}
    assert str(spec.shape) == "x[B, C, ...], y[B, C] -> out[B, C, ...]"
    assert spec.category == "join" and spec.shape_text and spec.summary and spec.reference is not None
    assert "Rank 2" in spec.docstring and "E_CONSTRAINT" in spec.docstring


def test_passes_the_harness(registry):
    check_operator(ChannelAdd, registry=registry)


@pytest.mark.parametrize("shape", [("B", 6), ("B", 6, 5), ("B", 6, 3, 4)])
def test_numerics_forward_and_backward(registry, shape):
    model = network("channel_add(x, y)", input_shape={"x": shape, "y": ("B", 6)}, output_shape=shape,
                    device="cpu", registry=registry)
    assert list(model.parameters()) == [] and list(model.buffers()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    y = torch.randn(3, 6, requires_grad=True)
    out = model(x=x, y=y)
    view = y.detach()[(...,) + (None,) * (len(shape) - 2)]
    torch.testing.assert_close(out, x.detach() + view)
    torch.testing.assert_close(out, spec_of(ChannelAdd).reference(model.nodes.n_n0)(x.detach(), y.detach()))
    upstream = torch.randn_like(out)
    grad_x, grad_y = torch.autograd.grad((out * upstream).sum(), (x, y))
    torch.testing.assert_close(grad_x, upstream)
    torch.testing.assert_close(grad_y, upstream.reshape(3, 6, -1).sum(-1))


def test_matches_the_time_embedding_of_a_diffusers_resnet_block(registry):
    # diffusers ResnetBlock2D (time_embedding_norm="default"): h = h + time_emb_proj(act(temb))[:, :, None, None]
    source = "t = swish(temb)\nt = linear(t)\nchannel_add(h, t)"
    model = network(source, input_shape={"h": ("B", 8, 4, 4), "temb": ("B", 16)}, output_shape=("B", 8, 4, 4),
                    device="cpu", registry=registry)
    projection = model.nodes.n_n1
    assert (projection.in_features, projection.out_features) == (16, 8)  # 8 inferred from the feature map
    h, temb = torch.randn(2, 8, 4, 4), torch.randn(2, 16)
    expected = h + projection(torch.nn.functional.silu(temb))[:, :, None, None]
    torch.testing.assert_close(model(h=h, temb=temb), expected)


def test_gradcheck_and_gradgradcheck_in_float64(registry):
    model = network("channel_add(x, y)", input_shape={"x": ("B", 3, 2, 2), "y": ("B", 3)},
                    output_shape=("B", 3, 2, 2), device="cpu", registry=registry)
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x, y))
    assert torch.autograd.gradgradcheck(module, (x, y))


def test_channels_infer_forward_from_x_to_the_producer_of_y(registry):
    plan = _resolve(registry, "t = linear(z)\nchannel_add(x, t)", {"x": ("B", 8, 5), "z": ("B", 3)}, ("B", 8, 5))
    assert plan.node("n0").args["out_features"] == 8


def test_channels_infer_from_y_to_the_producer_of_x(registry):
    plan = _resolve(registry, "h = linear(x)\nh = transpose(h, 1, 2)\nchannel_add(h, y)",
                    {"x": ("B", 5, 3), "y": ("B", 8)}, ("B", 8, 5))
    assert plan.node("n0").args["out_features"] == 8
    assert plan.node("n2").input_shapes == {"x": ("B", 8, 5), "y": ("B", 8)}


def test_channels_infer_backward_from_the_output_contract(registry):
    source = "h = linear(x)\nh = transpose(h, 1, 2)\nt = linear(z)\nchannel_add(h, t)"
    plan = _resolve(registry, source, {"x": ("B", 5, 3), "z": ("B", 4)}, ("B", 8, 5))
    assert plan.node("n0").args["out_features"] == 8 and plan.node("n2").args["out_features"] == 8


@pytest.mark.parametrize("x_shape, y_shape, out_shape, text", [
    (("B", 8, 4, 4), ("B", 6), ("B", 8, 4, 4), "but must equal"),
    (("B", 8, 4, 4), ("B", 8, 1, 1), ("B", 8, 4, 4), "input y must have rank 2 but has rank 4"),
    (("B", 8, 4, 4), ("B", 8, 4), ("B", 8, 4, 4), "input y must have rank 2 but has rank 3"),
    (("B", 8, 4, 4), ("B", 8), ("B", 8, 4, 5), "but must equal"),
    (("B", 8, 4, 4), ("B", 8), ("B", 8, 16), "'...' run"),
])
def test_shape_disagreements_are_constraint_errors(registry, x_shape, y_shape, out_shape, text):
    error = _fails(registry, "channel_add(x, y)", {"x": x_shape, "y": y_shape}, out_shape)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0" and text in error.message


def test_other_errors(registry):
    shapes = {"x": ("B", 8, 4), "y": ("B", 8)}
    assert _fails(registry, "channel_add(x, y, 1)", shapes, ("B", 8, 4)).code == "E_ARGUMENT"
    assert _fails(registry, "channel_add(x)", {"x": ("B", 8, 4)}, ("B", 8, 4)).code == "E_BINDING"
    assert _fails(registry, "channel_add(x, y)", shapes, ("B", 8, 4), input_dtype={"y": "int64"}).code == "E_DTYPE"


@pytest.mark.parametrize("shape", [("B", 6), ("B", 6, 5), ("B", 6, 3, 4)])
def test_fx_and_export_trace_the_per_channel_index(registry, shape):
    model = network("channel_add(x, y)", input_shape={"x": shape, "y": ("B", 6)}, output_shape=shape,
                    device="cpu", registry=registry)
    x, y = torch.randn(2, *shape[1:]), torch.randn(2, 6)
    expected = model(x=x, y=y)
    traced = torch.fx.symbolic_trace(model)
    torch.testing.assert_close(traced(x, y), expected)
    exported = torch.export.export(model, (x, y))
    torch.testing.assert_close(exported.module()(x, y), expected)

