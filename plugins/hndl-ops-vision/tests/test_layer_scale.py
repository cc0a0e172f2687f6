"""layer_scale@1: the declaration, which axis each rank scales, the initial value, the width
inferred in both directions, numerics against timm's LayerScale / LayerScale2d and
torchvision's ConvNeXt layer scale with copied weights, gradcheck/gradgradcheck in float64,
the harness, and every error code."""

import pytest
import torch
from timm.layers import LayerScale as TimmLayerScale, LayerScale2d as TimmLayerScale2d

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.layer_scale import LayerScale


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _model(source, shape):
    return network(source, input_shape=shape, output_shape=shape, device="cpu")


def test_declaration():
    spec = spec_of(LayerScale)
    assert spec.alias == "layer_scale" and spec.qualified == "layer_scale@1"
    assert spec.category == "block"
    assert spec.positional_args == ("init_value",) and spec.args["init_value"].default == 1e-6
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    for phrase in ("axis 1, the channels", "axis 2, the features", "never broadcast"):
        assert phrase in spec.docstring, phrase


def test_the_harness():
    check_operator(LayerScale)


@pytest.mark.parametrize("shape, channels", [(("B", 5, 3, 4), 5), (("B", 3, 7), 7), (("B", 6), 6)])
def test_one_scale_per_channel_starting_at_init_value(shape, channels):
    block = _model("layer_scale(0.25)", shape).nodes.n_n0
    assert list(block.state_dict()) == ["gamma"]
    assert block.gamma.shape == (channels,) and torch.equal(block.gamma, torch.full((channels,), 0.25))
    assert _model("layer_scale()", shape).nodes.n_n0.gamma[0].item() == pytest.approx(1e-6)


def test_images_scale_the_channel_axis_and_sequences_the_last():
    image = _model("layer_scale()", ("B", 3, 2, 2)).nodes.n_n0
    sequence = _model("layer_scale()", ("B", 3, 2)).nodes.n_n0
    with torch.no_grad():
        image.gamma.copy_(torch.tensor([1.0, 2.0, 3.0]))
        sequence.gamma.copy_(torch.tensor([1.0, 2.0]))
    out = image(torch.ones(2, 3, 2, 2))
    assert torch.equal(out[:, :, 1, 0], torch.tensor([[1.0, 2.0, 3.0]] * 2))
    out = sequence(torch.ones(2, 3, 2))
    assert torch.equal(out[0], torch.tensor([[1.0, 2.0]] * 3))


@pytest.mark.parametrize("shape, timm_class", [(("B", 4, 3, 5), TimmLayerScale2d), (("B", 6, 4), TimmLayerScale),
                                               (("B", 4), TimmLayerScale)])
def test_numerics_against_timm_with_copied_weights(shape, timm_class):
    model = _model("layer_scale()", shape)
    block = model.nodes.n_n0
    channels = block.gamma.shape[0]
    with torch.no_grad():
        block.gamma.normal_()
    reference = timm_class(channels)
    reference.load_state_dict(block.state_dict())  # same name, same [C] layout
    for training in (True, False):
        model.train(training)
        x = torch.randn(3, *shape[1:], requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(LayerScale).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(block.gamma.grad, reference.gamma.grad)
        block.gamma.grad, reference.gamma.grad = None, None


def test_equals_torchvision_convnext_layer_scale():
    block = _model("layer_scale()", ("B", 4, 3, 3)).nodes.n_n0
    with torch.no_grad():
        block.gamma.normal_()
    torchvision_layout = block.gamma.detach().view(4, 1, 1)  # CNBlock.layer_scale is [C, 1, 1]
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(block(x), torchvision_layout * x)


def test_width_infers_in_both_directions():
    plan = hndl.resolve("linear()\nlayer_scale(1e-5)", input_shape=("B", 6, 16), output_shape=("B", 6, 32))
    assert plan.nodes[0].args["out_features"] == 32 and plan.nodes[0].provenance["out_features"] == "inferred"
    plan = hndl.resolve("conv(kernel_size=1)\nlayer_scale()", input_shape=("B", 2, 3, 3), output_shape=("B", 7, 3, 3))
    assert plan.nodes[0].args["out_channels"] == 7
    plan = hndl.resolve("layer_scale()\nlinear()", input_shape=("B", 9), output_shape=("B", 2))
    assert plan.nodes[1].args["in_features"] == 9


def test_input_is_untouched_and_no_randomness():
    block = _model("layer_scale(0.5)", ("B", 3, 2, 2)).nodes.n_n0
    x = torch.randn(2, 3, 2, 2)
    copy = x.clone()
    before = torch.get_rng_state()
    torch.testing.assert_close(block(x), x * 0.5)
    assert torch.equal(x, copy) and torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("shape", [("B", 3, 2, 2), ("B", 2, 3)])
def test_gradcheck_and_gradgradcheck_in_float64(shape):
    block = _model("layer_scale(0.3)", shape).nodes.n_n0.double()
    x = torch.randn(2, *shape[1:], dtype=torch.float64, requires_grad=True)
    gamma = torch.randn_like(block.gamma, requires_grad=True)

    def through(x, gamma):
        return torch.func.functional_call(block, {"gamma": gamma}, (x,))

    assert torch.autograd.gradcheck(through, (x, gamma))
    assert torch.autograd.gradgradcheck(through, (x, gamma))


@pytest.mark.parametrize("args", ['"small"', "True", "1e-6, 2", "init_value=None", "scale=1.0"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"layer_scale({args})", ("B", 4), ("B", 4)).code == "E_ARGUMENT"


def test_a_shape_change_is_a_constraint_error():
    assert _fails("layer_scale()", ("B", 4, 3, 3), ("B", 5, 3, 3)).code == "E_CONSTRAINT"
    assert _fails("layer_scale()", ("B", 4, 3), ("B", 4, 3, 1)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("layer_scale()", ("B", 4), ("B", 4), input_dtype="int64").code == "E_DTYPE"


def test_runtime_width_mismatch_is_a_runtime_error():
    model = _model("layer_scale()", ("B", 3, 4))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 3, 5))
    assert error.value.code == "E_RUNTIME"
