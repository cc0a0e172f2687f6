"""crop2d@1 (alias crop): the centered window and its offsets (against
torchvision.transforms.functional.center_crop for even surpluses and the floor rule for odd
ones), size explicit or inferred from the output or through a concat (the unpadded U-Net skip
connection), forward and backward numerics, gradcheck/gradgradcheck in float64, every error
code, and the public harness."""

import pytest
import torch
from torchvision.transforms.functional import center_crop

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.crop import Crop, crop_offsets


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _layer(size, in_hw):
    model = network(f"crop({size})", input_shape=("B", 3, *in_hw), output_shape=("B", 3, *size), device="cpu")
    return model, model.nodes.n_n0


UNET = "up = deconv(max_pool(x, 3), 4, kernel_size=2, stride=2)\nconcat(crop(x), up)"


def test_declaration():
    spec = spec_of(Crop)
    assert spec.alias == "crop" and spec.qualified == "crop2d@1"
    assert spec.category == "shape"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H_out, W_out]"
    assert spec.positional_args == ("size",)
    assert spec.args["size"].inferable and spec.args["size"].type == "pair"
    assert "(H - H_out) // 2" in spec.docstring and "center_crop" in spec.docstring
    assert spec.relation is not None and spec.reference is not None and not spec.policies
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(Crop, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_explicit_size_as_one_int_or_a_pair():
    plan = hndl.resolve("crop(8)\nflatten()", input_shape=("B", 4, 12, 12), output_shape=("B", 256))
    node = plan.nodes[0]
    assert node.args == {"size": (8, 8)} and node.provenance["size"] == "explicit"
    assert node.output_shapes["out"] == ("B", 4, 8, 8)
    plan = hndl.resolve("crop((5, 7))\nflatten()", input_shape=("B", 2, 9, 9), output_shape=("B", 70))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 5, 7)
    # the identity crop is allowed
    plan = hndl.resolve("crop((9, 9))", input_shape=("B", 2, 9, 9), output_shape=("B", 2, 9, 9))
    assert plan.nodes[0].args["size"] == (9, 9)


def test_omitted_size_is_inferred_from_the_output_contract():
    plan = hndl.resolve("crop()", input_shape=("B", 4, 12, 10), output_shape=("B", 4, 8, 6))
    node = plan.nodes[0]
    assert node.args == {"size": (8, 6)} and node.provenance["size"] == "inferred"


def test_omitted_size_is_inferred_backward_through_a_consumer():
    # an unpadded 3 x 3 convolution with stride 1 turns the 6 x 6 contract into an 8 x 8 crop
    plan = hndl.resolve("crop()\nconv(2, kernel_size=3)", input_shape=("B", 4, 12, 12), output_shape=("B", 2, 6, 6))
    assert plan.nodes[0].args["size"] == (8, 8)
    # channels pass through backward as well
    plan = hndl.resolve("conv(kernel_size=1)\ncrop(2)", input_shape=("B", 3, 4, 4), output_shape=("B", 5, 2, 2))
    assert plan.nodes[0].args["out_channels"] == 5


def test_the_unet_skip_connection_infers_the_crop_through_concat():
    plan = hndl.resolve(UNET, input_shape=("B", 4, 12, 12), output_shape=("B", 8, 8, 8))
    crop = next(node for node in plan.nodes if node.op == "crop2d@1")
    assert crop.args == {"size": (8, 8)} and crop.provenance["size"] == "inferred"
    assert crop.input_shapes["x"] == ("B", 4, 12, 12) and crop.output_shapes["out"] == ("B", 4, 8, 8)
    model = network(UNET, input_shape=("B", 4, 12, 12), output_shape=("B", 8, 8, 8), device="cpu")
    x = torch.randn(2, 4, 12, 12, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 8, 8, 8)
    torch.testing.assert_close(out[:, :4], center_crop(x.detach(), [8, 8]))
    torch.testing.assert_close(out[:, :4], x.detach()[:, :, 2:10, 2:10])
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    # the branch fixes the crop even when no output contract names the spatial extents
    plan = hndl.resolve(UNET + "\nconv(3, kernel_size=1)\nflatten()", input_shape=("B", 4, 12, 12),
                        output_shape=("B", 192))
    assert next(node for node in plan.nodes if node.op == "crop2d@1").args["size"] == (8, 8)


@pytest.mark.parametrize("in_hw, size", [((12, 12), (8, 8)), ((10, 6), (4, 2)), ((7, 9), (3, 1)), ((5, 5), (5, 5))])
def test_numerics_match_torchvision_center_crop_for_even_surpluses(in_hw, size):
    model, layer = _layer(size, in_hw)
    x = torch.randn(2, 3, *in_hw, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    before = x.detach().clone()
    out, expected = model(x), center_crop(x_ref, list(size))
    assert torch.equal(x.detach(), before)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(Crop).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=0)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


@pytest.mark.parametrize("in_hw, size, offsets", [((8, 9), (5, 6), (1, 1)), ((9, 12), (6, 7), (1, 2)),
                                                   ((6, 11), (1, 6), (2, 2)), ((4, 4), (3, 3), (0, 0))])
def test_odd_surpluses_put_the_extra_row_and_column_at_the_bottom_and_right(in_hw, size, offsets):
    assert crop_offsets(*in_hw, size) == offsets
    model, layer = _layer(size, in_hw)
    x = torch.arange(2 * 3 * in_hw[0] * in_hw[1], dtype=torch.float32).reshape(2, 3, *in_hw)
    top, left = offsets
    torch.testing.assert_close(model(x), x[:, :, top:top + size[0], left:left + size[1]], rtol=0, atol=0)
    torch.testing.assert_close(model(x), spec_of(Crop).reference(layer)(x))


def test_the_gradient_is_the_upstream_gradient_in_the_window_and_zero_elsewhere():
    model, _ = _layer((2, 3), (6, 5))
    x = torch.randn(1, 3, 6, 5, requires_grad=True)
    upstream = torch.randn(1, 3, 2, 3)
    (model(x) * upstream).sum().backward()
    expected = torch.zeros(1, 3, 6, 5)
    expected[:, :, 2:4, 1:4] = upstream
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


def test_gradcheck_and_gradgradcheck_in_float64():
    _, layer = _layer((3, 2), (6, 5))
    x = torch.randn(2, 3, 6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


def test_an_output_larger_than_the_input_is_a_constraint_error():
    for size in ("13", "(8, 13)", "(13, 8)"):
        error = _fails(f"crop({size})", ("B", 4, 12, 12), ("B", 4, 8, 8))
        assert error.code == "E_CONSTRAINT"
    error = _fails("crop((13, 8))\nflatten()", ("B", 4, 12, 12), ("B", 416))
    assert error.code == "E_CONSTRAINT" and "larger than the input height 12" in error.message
    # inferred from the output contract
    error = _fails("crop()", ("B", 4, 12, 12), ("B", 4, 8, 14))
    assert error.code == "E_CONSTRAINT" and "width 14" in error.message
    # inferred through a concat whose other branch is larger than the skip
    error = _fails("up = upsample(x, 2)\nconcat(crop(x), up)", ("B", 4, 6, 6), ("B", 8, 12, 12))
    assert error.code == "E_CONSTRAINT" and "crop" in error.message


def test_an_explicit_size_contradicting_the_output_is_a_constraint_error():
    assert _fails("crop(8)", ("B", 4, 12, 12), ("B", 4, 8, 6)).code == "E_CONSTRAINT"
    assert _fails("crop(8)", ("B", 4, 12, 12), ("B", 3, 8, 8)).code == "E_CONSTRAINT"


def test_an_undetermined_size_is_ambiguous():
    # flatten's 64 features leave H_out * W_out = 16 with two unknown factors
    error = _fails("crop()\nflatten()", ("B", 4, 12, 12), ("B", 64))
    assert error.code == "E_AMBIGUOUS" and "crop" in error.message


def test_the_input_extents_are_never_inferred_from_the_output():
    error = _fails("linear()\nreshape(4)\ncrop(2)", ("B", 8), ("B", 4, 2, 2))
    assert error.code == "E_AMBIGUOUS"
    assert "n2 (crop) x is [B, 4, ?, ?]" in error.chain


@pytest.mark.parametrize("args", ["0", "-1", "(0, 2)", "(2, 3, 4)", "2.0", "True", '"center"', "size=2, mode=1",
                                  "2, 3"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"crop({args})", ("B", 4, 12, 12), ("B", 4, 2, 2)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("crop(2)", shape, shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('crop(2, policy="down2")', ("B", 4, 4, 4), ("B", 4, 2, 2)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("crop(2)", ("B", 4, 4, 4), ("B", 4, 2, 2), input_dtype="int64").code == "E_DTYPE"


def test_runtime_input_mismatch_is_a_runtime_error():
    model, layer = _layer((4, 4), (8, 8))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 3, 9, 8))
    assert error.value.code == "E_RUNTIME"
    # the module itself refuses an input too small for its window rather than returning less
    for bad in (torch.randn(2, 3, 3, 8), torch.randn(2, 3, 8, 3), torch.randn(3, 8, 8)):
        with pytest.raises(HNDLError) as error:
            layer(bad)
        assert error.value.code == "E_RUNTIME" and error.value.remedies
    # a larger input is centered by the same rule
    torch.testing.assert_close(layer(torch.arange(100.0).reshape(1, 1, 10, 10)),
                               torch.arange(100.0).reshape(1, 1, 10, 10)[:, :, 3:7, 3:7])
