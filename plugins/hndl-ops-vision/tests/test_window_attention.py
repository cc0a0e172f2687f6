"""window_attention@1: Swin's (shifted) window attention with relative position bias on
[B, C, H, W]. Numerics against torchvision's ShiftedWindowAttention with its state dict loaded
as is (forward, input and parameter gradients; padding, shift, torchvision's zero-shift rule,
rectangular windows, no biases), the declared window-by-window reference, the buffers (the
persistent relative_position_index equal to torchvision's, the non-persistent mask equal to the
one torchvision builds), locality of windows, reduced precision, gradcheck/gradgradcheck in
float64, inference in both directions, every error code, and the public harness."""

import pytest
import torch
from torchvision.models.swin_transformer import ShiftedWindowAttention

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.window_attention import WindowAttention
from hndl_ops_vision.windows import MASK_VALUE, shifted_window_mask


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source, shape, **kwargs):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu", **kwargs)
    return model, model.nodes.n_n0


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def _reference(channels, heads, window, shift, **kwargs):
    torch.manual_seed(0)
    module = ShiftedWindowAttention(channels, list(_pair(window)), list(_pair(shift)), heads, **kwargs)
    with torch.no_grad():  # biases start at 0 and the table near 0: move everything
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def _torchvision_mask(H, W, window, shift):
    """torchvision's mask construction (shifted_window_attention), for a padded H x W map."""
    attn_mask = torch.zeros((H, W))
    h_slices = ((0, -window[0]), (-window[0], -shift[0]), (-shift[0], None))
    w_slices = ((0, -window[1]), (-window[1], -shift[1]), (-shift[1], None))
    count = 0
    for h in h_slices:
        for w in w_slices:
            attn_mask[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    attn_mask = attn_mask.view(H // window[0], window[0], W // window[1], window[1])
    attn_mask = attn_mask.permute(0, 2, 1, 3).reshape(-1, window[0] * window[1])
    attn_mask = attn_mask.unsqueeze(1) - attn_mask.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)


def test_declaration():
    spec = spec_of(WindowAttention)
    assert spec.alias == "window_attention" and spec.qualified == "window_attention@1"
    assert spec.category == "attention"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H, W]"
    assert list(spec.args) == ["heads", "window", "shift", "qkv_bias", "proj_bias"]
    assert spec.positional_args == ("heads", "window", "shift")
    assert spec.args["shift"].default == (0, 0) and spec.args["qkv_bias"].default is True
    assert spec.reference is not None and spec.relation is not None and spec.validate is not None
    assert "ShiftedWindowAttention" in spec.docstring and "-100" in spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(WindowAttention, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv(kernel_size=1)\nwindow_attention(2, 4)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 6, 8, 8))
    assert plan.nodes[0].args["out_channels"] == 6 and plan.nodes[1].input_shapes["x"] == ("B", 6, 8, 8)
    plan = hndl.resolve("window_attention(2, 4)\nconv(kernel_size=1)", input_shape=("B", 6, 8, 8),
                        output_shape=("B", 3, 8, 8))
    assert plan.nodes[1].args["in_channels"] == 6
    assert plan.nodes[0].args == {"heads": 2, "window": (4, 4), "shift": (0, 0), "qkv_bias": True,
                                  "proj_bias": True}


@pytest.mark.parametrize("channels, heads, window, shift, size", [
    (8, 2, 4, 0, (8, 8)),        # W-MSA
    (8, 2, 4, 2, (8, 8)),        # SW-MSA, no padding
    (8, 2, 4, 2, (6, 6)),        # padded to 8 x 8, then shifted
    (6, 3, 4, 2, (4, 9)),        # H fits one window: torchvision turns that axis's shift off
    (4, 1, 7, 3, (5, 5)),        # a window bigger than the map: no shift at all
    (6, 2, (3, 2), (1, 1), (7, 5)),  # rectangular windows
])
def test_numerics_against_torchvision_with_its_state_dict(channels, heads, window, shift, size):
    reference = _reference(channels, heads, window, shift)
    model, layer = _built(f"window_attention({heads}, {window}, {shift})", (channels, *size))
    assert list(layer.state_dict()) == list(reference.state_dict())
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(2, channels, *size, requires_grad=True)
    x_ref = x.detach().permute(0, 2, 3, 1).clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref).permute(0, 3, 1, 2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(WindowAttention).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad.permute(0, 3, 1, 2))
    theirs = dict(reference.named_parameters())
    for name, parameter in layer.named_parameters():
        torch.testing.assert_close(parameter.grad, theirs[name].grad, rtol=1e-4, atol=1e-5)
    model.eval()
    torch.testing.assert_close(model(x), out)  # no dropout: train and eval agree
    fresh = ShiftedWindowAttention(channels, list(_pair(window)), list(_pair(shift)), heads)
    fresh.load_state_dict(layer.state_dict())  # and torchvision loads ours under the same names


@pytest.mark.parametrize("qkv_bias, proj_bias", [(False, True), (True, False), (False, False)])
def test_projection_biases_can_be_left_out(qkv_bias, proj_bias):
    reference = _reference(8, 2, 4, 2, qkv_bias=qkv_bias, proj_bias=proj_bias)
    model, layer = _built(f"window_attention(2, 4, 2, qkv_bias={qkv_bias}, proj_bias={proj_bias})", (8, 8, 8))
    assert (layer.qkv.bias is None) != qkv_bias and (layer.proj.bias is None) != proj_bias
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(2, 8, 8, 8)
    torch.testing.assert_close(model(x), reference(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


def test_the_buffers():
    _, layer = _built("window_attention(2, 4, 2)", (8, 6, 6))
    reference = _reference(8, 2, 4, 2)
    assert layer.relative_position_bias_table.shape == (49, 2)
    assert torch.equal(layer.relative_position_index, reference.relative_position_index)
    assert layer.relative_position_index.dtype == torch.int64
    assert set(layer.state_dict()) == {"qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                       "relative_position_bias_table", "relative_position_index"}
    assert [name for name, _ in layer.named_buffers()] == ["relative_position_index", "attention_mask"]
    assert torch.equal(layer.attention_mask, _torchvision_mask(8, 8, (4, 4), (2, 2)))  # the 6 x 6 map padded
    assert set(layer.attention_mask.unique().tolist()) == {0.0, MASK_VALUE}
    assert not any(name == "relative_position_bias_table" for name, _ in layer.named_buffers())
    _, unshifted = _built("window_attention(2, 4)", (8, 6, 6))
    assert unshifted.attention_mask is None and [name for name, _ in unshifted.named_buffers()] == [
        "relative_position_index"]
    assert shifted_window_mask(4, 4, (4, 4), (2, 2)) is None  # one window: the shift is off


def test_windows_do_not_see_each_other_without_a_shift():
    model, _ = _built("window_attention(2, 4)", (8, 8, 8))
    x = torch.randn(1, 8, 8, 8)
    changed = x.clone()
    changed[:, :, 5, 6] += 10  # a position of the bottom-right window
    out, again = model(x), model(changed)
    torch.testing.assert_close(again[:, :, :4, :], out[:, :, :4, :], rtol=0, atol=0)
    torch.testing.assert_close(again[:, :, 4:, :4], out[:, :, 4:, :4], rtol=0, atol=0)
    assert not torch.allclose(again[:, :, 4:, 4:], out[:, :, 4:, 4:])


def test_reduced_precision_casts_the_mask_and_matches_float32():
    model, layer = _built("window_attention(2, 4, 2)", (8, 6, 6), dtype="bfloat16")
    assert layer.qkv.weight.dtype == torch.bfloat16 and layer.attention_mask.dtype == torch.bfloat16
    assert layer.relative_position_index.dtype == torch.int64
    full, full_layer = _built("window_attention(2, 4, 2)", (8, 6, 6))
    full_layer.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(2, 8, 6, 6)
    out = model(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), full(x), rtol=5e-2, atol=5e-2)


def test_gradcheck_and_gradgradcheck_in_float64():
    # a 3 x 3 map padded to 4 x 4, four 2 x 2 windows, shifted: padding, roll and mask on the path
    _, layer = _built("window_attention(2, 2, 1)", (2, 3, 3))
    layer = layer.double()
    assert layer.attention_mask is not None
    inputs = (torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True),
              layer.relative_position_bias_table.detach().clone().requires_grad_(True))

    def through_input_and_table(image, bias_table):
        original = layer.relative_position_bias_table
        del layer.relative_position_bias_table
        layer.relative_position_bias_table = bias_table
        try:
            return layer(image)
        finally:
            del layer.relative_position_bias_table
            layer.relative_position_bias_table = original
    assert torch.autograd.gradcheck(through_input_and_table, inputs)
    assert torch.autograd.gradgradcheck(through_input_and_table, inputs)
    assert torch.autograd.gradcheck(layer, (inputs[0],))


@pytest.mark.parametrize("args", ["0, 4", "2", "2, 0", "2, 4, 4", "2, 4, -1", "2, (4, 2), (1, 2)", "2.0, 4",
                                  "2, 4, qkv_bias=1", "2, 4, dropout=0.1", "heads=2, window=4, scale=1.0"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"window_attention({args})", ("B", 8, 8, 8), ("B", 8, 8, 8)).code == "E_ARGUMENT"


def test_heads_that_do_not_divide_the_channels_are_constraint_errors():
    error = _fails("window_attention(3, 4)", ("B", 8, 8, 8), ("B", 8, 8, 8))
    assert error.code == "E_CONSTRAINT" and "divisible" in str(error)
    error = _fails("conv(kernel_size=1)\nwindow_attention(3, 4)", ("B", 2, 8, 8), ("B", 8, 8, 8))
    assert error.code == "E_CONSTRAINT"  # found backward, from the output's channels


@pytest.mark.parametrize("input_shape, output_shape", [(("B", 8), ("B", 8)), (("B", 4, 8), ("B", 4, 8)),
                                                       (("B", 8, 8, 8), ("B", 8, 8, 7))])
def test_ranks_and_shape_changes_are_constraint_errors(input_shape, output_shape):
    assert _fails("window_attention(2, 4)", input_shape, output_shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('window_attention(2, 4, policy="up2")', ("B", 8, 8, 8), ("B", 8, 8, 8)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    error = _fails("window_attention(2, 4)", ("B", 8, 8, 8), ("B", 8, 8, 8), input_dtype="int64")
    assert error.code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model, _ = _built("window_attention(2, 4, 2)", (8, 8, 8))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 8, 12, 8))  # the mask was built for 8 x 8
    assert error.value.code == "E_RUNTIME"
