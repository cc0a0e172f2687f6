"""swin_block@1: one Swin Transformer block on [B, C, H, W]. Numerics against torchvision's
SwinTransformerBlock with its weights (forward, input and parameter gradients; regular, shifted,
padded and single-window maps), the declared reference, the MLP width, gradcheck/gradgradcheck
in float64, inference in both directions, every error code, and the public harness."""

import pytest
import torch
from torchvision.models.swin_transformer import SwinTransformerBlock

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.swin_block import SwinBlock

#: torchvision's MLP is a Sequential with dropouts between: mlp.0 and mlp.3 are our fc1 and fc2
RENAMED = {"mlp.0.weight": "mlp.fc1.weight", "mlp.0.bias": "mlp.fc1.bias",
           "mlp.3.weight": "mlp.fc2.weight", "mlp.3.bias": "mlp.fc2.bias"}


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source, shape, **kwargs):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu", **kwargs)
    return model, model.nodes.n_n0


def _reference(channels, heads, window, shift, **kwargs):
    torch.manual_seed(0)
    module = SwinTransformerBlock(channels, heads, [window, window], [shift, shift], **kwargs)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return module


def _ours(state):
    return {RENAMED.get(key, key): value for key, value in state.items()}


def test_declaration():
    spec = spec_of(SwinBlock)
    assert spec.alias == "swin_block" and spec.qualified == "swin_block@1"
    assert spec.category == "block"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H, W]"
    assert list(spec.args) == ["heads", "window", "shift", "qkv_bias", "proj_bias", "mlp_ratio", "eps"]
    assert spec.positional_args == ("heads", "window", "shift")
    assert spec.args["mlp_ratio"].default == 4.0 and spec.args["eps"].default == 1e-5
    assert spec.reference is not None and spec.relation is not None and spec.validate is not None
    assert "SwinTransformerBlock" in spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(SwinBlock, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv(kernel_size=1)\nswin_block(2, 4)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 8, 8, 8))
    assert plan.nodes[0].args["out_channels"] == 8
    plan = hndl.resolve("swin_block(2, 4, 2)\nconv(kernel_size=1)", input_shape=("B", 8, 8, 8),
                        output_shape=("B", 3, 8, 8))
    assert plan.nodes[1].args["in_channels"] == 8
    assert plan.nodes[0].args == {"heads": 2, "window": (4, 4), "shift": (2, 2), "qkv_bias": True,
                                  "proj_bias": True, "mlp_ratio": 4.0, "eps": 1e-5}


@pytest.mark.parametrize("channels, heads, window, shift, size", [
    (8, 2, 4, 0, (8, 8)), (8, 2, 4, 2, (8, 8)), (12, 3, 4, 2, (6, 7)), (8, 4, 4, 2, (4, 4)), (6, 2, 7, 3, (9, 9)),
])
def test_numerics_against_torchvision_with_its_weights(channels, heads, window, shift, size):
    reference = _reference(channels, heads, window, shift)
    model, layer = _built(f"swin_block({heads}, {window}, {shift})", (channels, *size))
    assert list(layer.state_dict()) == list(_ours(reference.state_dict()))
    layer.load_state_dict(_ours(reference.state_dict()))
    x = torch.randn(2, channels, *size, requires_grad=True)
    x_ref = x.detach().permute(0, 2, 3, 1).clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref).permute(0, 3, 1, 2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(SwinBlock).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad.permute(0, 3, 1, 2))
    theirs = _ours(dict(reference.named_parameters()))
    for name, parameter in layer.named_parameters():
        torch.testing.assert_close(parameter.grad, theirs[name].grad, rtol=1e-4, atol=1e-5)
    model.eval()
    torch.testing.assert_close(model(x), out)


def test_mlp_ratio_and_eps():
    reference = _reference(8, 2, 4, 2, mlp_ratio=2.5)
    model, layer = _built("swin_block(2, 4, 2, mlp_ratio=2.5, eps=1e-6)", (8, 8, 8))
    assert layer.mlp.fc1.weight.shape == (20, 8) and layer.mlp.fc2.weight.shape == (8, 20)
    assert layer.norm1.eps == layer.norm2.eps == 1e-6
    layer.load_state_dict(_ours(reference.state_dict()))
    for norm in (layer.norm1, layer.norm2):
        norm.eps = 1e-5
    x = torch.randn(2, 8, 8, 8)
    torch.testing.assert_close(model(x), reference(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


def test_state_and_buffers():
    _, layer = _built("swin_block(2, 4, 2)", (8, 8, 8))
    assert sum(p.numel() for p in layer.parameters()) == sum(
        p.numel() for p in _reference(8, 2, 4, 2).parameters())
    assert [name for name, _ in layer.named_buffers()] == ["attn.relative_position_index", "attn.attention_mask"]
    assert "attn.attention_mask" not in layer.state_dict()


def test_gradcheck_and_gradgradcheck_in_float64():
    _, layer = _built("swin_block(1, 2, 1, mlp_ratio=1.0)", (2, 3, 3))
    layer = layer.double()
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


def test_reduced_precision_matches_float32():
    model, layer = _built("swin_block(2, 4, 2)", (8, 6, 6), dtype="bfloat16")
    full, full_layer = _built("swin_block(2, 4, 2)", (8, 6, 6))
    full_layer.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(2, 8, 6, 6)
    out = model(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), full(x), rtol=5e-2, atol=1e-1)


@pytest.mark.parametrize("args", ["0, 4", "2", "2, 4, 4", "2, 4, -1", "2, 4, mlp_ratio=0", "2, 4, eps=0",
                                  "2, 4, mlp_ratio=-1.0", "2, 4, 2, True", "2, 4, dropout=0.1", '2, 4, eps="1"'])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"swin_block({args})", ("B", 8, 8, 8), ("B", 8, 8, 8)).code == "E_ARGUMENT"


def test_heads_that_do_not_divide_the_channels_are_constraint_errors():
    assert _fails("swin_block(3, 4)", ("B", 8, 8, 8), ("B", 8, 8, 8)).code == "E_CONSTRAINT"


def test_an_mlp_without_hidden_units_is_a_constraint_error():
    error = _fails("swin_block(2, 4, mlp_ratio=0.1)", ("B", 8, 8, 8), ("B", 8, 8, 8))
    assert error.code == "E_CONSTRAINT" and "hidden" in str(error)
    assert hndl.resolve("swin_block(2, 4, mlp_ratio=0.125)", input_shape=("B", 8, 8, 8),
                        output_shape=("B", 8, 8, 8)).nodes[0].args["mlp_ratio"] == 0.125


@pytest.mark.parametrize("input_shape, output_shape", [(("B", 8), ("B", 8)), (("B", 4, 8), ("B", 4, 8)),
                                                       (("B", 8, 8, 8), ("B", 8, 7, 8))])
def test_ranks_and_shape_changes_are_constraint_errors(input_shape, output_shape):
    assert _fails("swin_block(2, 4)", input_shape, output_shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('swin_block(2, 4, policy="up2")', ("B", 8, 8, 8), ("B", 8, 8, 8)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("swin_block(2, 4)", ("B", 8, 8, 8), ("B", 8, 8, 8), input_dtype="int64").code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model, _ = _built("swin_block(2, 4)", (8, 8, 8))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 8, 8, 12))
    assert error.value.code == "E_RUNTIME"
