"""patch_merging@1: Swin's 2 x 2 patch merging on [B, C, H, W]. Numerics against torchvision's
PatchMerging with its state dict loaded as is (forward, input and parameter gradients, odd sides
padded), the declared reference, the sub-grid order, gradcheck/gradgradcheck in float64, the
channel and spatial inference in both directions (ceil forward, an interval backward), every
error code, and the public harness."""

import pytest
import torch
from torchvision.models.swin_transformer import PatchMerging as TorchvisionPatchMerging

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.patch_merging import PatchMerging


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(shape, source="patch_merging()", **kwargs):
    channels, height, width = shape
    output = ("B", 2 * channels, -(-height // 2), -(-width // 2))
    model = network(source, input_shape=("B", *shape), output_shape=output, device="cpu", **kwargs)
    return model, model.nodes.n_n0


def _reference(channels):
    torch.manual_seed(0)
    module = TorchvisionPatchMerging(channels)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def test_declaration():
    spec = spec_of(PatchMerging)
    assert spec.alias == "patch_merging" and spec.qualified == "patch_merging@1"
    assert spec.category == "block"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, 2*C, H_out, W_out]"
    assert list(spec.args) == ["eps"] and spec.args["eps"].default == 1e-5
    assert spec.reference is not None and spec.relation is not None
    assert "torchvision" in spec.docstring and "x0" in spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(PatchMerging, registry=Registry.from_packs("basic", "vision", "transformer"))


@pytest.mark.parametrize("size, halved", [((8, 8), (4, 4)), ((5, 7), (3, 4)), ((1, 2), (1, 1))])
def test_the_map_is_halved_rounding_up(size, halved):
    plan = hndl.resolve("patch_merging()\nflatten()", input_shape=("B", 4, *size),
                        output_shape=("B", 8 * halved[0] * halved[1]))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, *halved)


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv(kernel_size=1)\npatch_merging()", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 12, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 6
    plan = hndl.resolve("patch_merging()\nconv(kernel_size=1)", input_shape=("B", 6, 8, 8),
                        output_shape=("B", 3, 4, 4))
    assert plan.nodes[1].args["in_channels"] == 12


def test_the_input_size_is_bounded_backward():
    # out 3 x 4 means an input of 5..6 x 7..8; upsample(2) makes it even, so 6 x 8 is the only fit
    plan = hndl.resolve("adaptive_avg_pool()\nupsample(2)\npatch_merging()", input_shape=("B", 8, 9, 9),
                        output_shape=("B", 16, 3, 4))
    assert plan.nodes[2].input_shapes["x"] == ("B", 8, 6, 8)
    # alone, the interval is reported, not guessed
    error = _fails("adaptive_avg_pool()\npatch_merging()", ("B", 8, 9, 9), ("B", 16, 3, 4))
    assert error.code == "E_AMBIGUOUS" and "5..6" in str(error)


@pytest.mark.parametrize("size", [(4, 6), (5, 7), (3, 2), (1, 1)])
def test_numerics_against_torchvision_with_its_state_dict(size):
    reference = _reference(6)
    model, layer = _built((6, *size))
    assert list(layer.state_dict()) == list(reference.state_dict()) == ["reduction.weight", "norm.weight",
                                                                        "norm.bias"]
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(2, 6, *size, requires_grad=True)
    x_ref = x.detach().permute(0, 2, 3, 1).clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref).permute(0, 3, 1, 2)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(PatchMerging).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad.permute(0, 3, 1, 2))
    for name, parameter in layer.named_parameters():
        torch.testing.assert_close(parameter.grad, dict(reference.named_parameters())[name].grad)


def test_the_sub_grids_are_concatenated_in_torchvision_order():
    _, layer = _built((1, 2, 2))
    with torch.no_grad():
        layer.reduction.weight.zero_()
        layer.reduction.weight[0, :4] = torch.tensor([1.0, 10.0, 100.0, 1000.0])  # read x0..x3 apart
        layer.norm.weight.fill_(1.0)
        layer.norm.bias.zero_()
    x = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])  # x0 = (0, 0) = 1, x1 = (1, 0) = 3, x2 = (0, 1) = 2, x3 = 4
    normed = torch.nn.functional.layer_norm(torch.tensor([1.0, 3.0, 2.0, 4.0]), (4,), eps=1e-5)
    expected = (normed * torch.tensor([1.0, 10.0, 100.0, 1000.0])).sum()
    torch.testing.assert_close(layer(x)[0, 0, 0, 0], expected)


def test_state_is_initialized_like_torchvision():
    _, layer = _built((4, 4, 4))
    assert layer.reduction.bias is None and layer.reduction.weight.shape == (8, 16)
    assert torch.equal(layer.norm.weight, torch.ones(16)) and torch.equal(layer.norm.bias, torch.zeros(16))
    assert layer.norm.eps == 1e-5 and list(layer.buffers()) == []
    _, layer = _built((4, 4, 4), "patch_merging(1e-6)")
    assert layer.norm.eps == 1e-6


def test_gradcheck_and_gradgradcheck_in_float64():
    _, layer = _built((2, 3, 3))
    layer = layer.double()
    with torch.no_grad():
        layer.norm.weight.normal_()
        layer.norm.bias.normal_()
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


def test_reduced_precision_matches_float32():
    model, layer = _built((4, 4, 4), dtype="bfloat16")
    full, full_layer = _built((4, 4, 4))
    full_layer.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(2, 4, 4, 4)
    out = model(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), full(x), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("args", ["0", "-1e-5", "eps=0", '"1e-5"', "True", "1e-5, 2", "bias=False"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"patch_merging({args})", ("B", 4, 4, 4), ("B", 8, 2, 2)).code == "E_ARGUMENT"


@pytest.mark.parametrize("output_shape", [("B", 4, 2, 2), ("B", 8, 3, 2), ("B", 8, 2, 4)])
def test_contradicting_outputs_are_constraint_errors(output_shape):
    assert _fails("patch_merging()", ("B", 4, 4, 4), output_shape).code == "E_CONSTRAINT"


def test_an_odd_channel_output_is_a_constraint_error():
    assert _fails("conv(kernel_size=1)\npatch_merging()", ("B", 3, 4, 4), ("B", 7, 2, 2)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_ranks_other_than_four_are_constraint_errors(shape):
    assert _fails("patch_merging()", shape, ("B", 8, 2, 2)).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('patch_merging(policy="up2")', ("B", 4, 4, 4), ("B", 8, 2, 2)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("patch_merging()", ("B", 4, 4, 4), ("B", 8, 2, 2), input_dtype="int64").code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model, _ = _built((4, 4, 4))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 5, 4, 4))
    assert error.value.code == "E_RUNTIME"
