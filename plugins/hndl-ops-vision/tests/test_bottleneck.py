"""bottleneck@2: the declaration, spatial arithmetic at stride 1 and 2 in both directions,
out_channels and width inferred from each other and from the contracts, the projection exactly
when channels or stride change, numerics against torchvision.models.resnet.Bottleneck (with
and without downsample, grouped as in ResNeXt, dilated as in replace_stride_with_dilation, with
configured batch norms) with copied weights in training and evaluation mode, against timm's
Bottleneck with a drop path (the same draw), the declared reference, gradcheck/gradgradcheck in
float64, the harness, and every error code."""

from functools import partial

import pytest
import torch
from timm.layers import DropPath
from timm.models.resnet import Bottleneck as TimmBottleneck
from torch import nn
from torchvision.models.resnet import Bottleneck as TorchvisionBottleneck

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.bottleneck import Bottleneck

TORCHVISION_KEYS = [f"{layer}.{name}" for index in (1, 2, 3) for layer, names in (
    (f"conv{index}", ("weight",)),
    (f"bn{index}", ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")),
) for name in names]
PROJECTION_KEYS = ["downsample.0.weight"] + [f"downsample.1.{name}" for name in (
    "weight", "bias", "running_mean", "running_var", "num_batches_tracked")]


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _randomize(module):
    """Non-trivial batch-norm affines and running statistics, so every parameter matters."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                sub.weight.uniform_(0.5, 1.5)
                sub.bias.normal_(0, 0.2)
                sub.running_mean.normal_(0, 0.1)
                sub.running_var.uniform_(0.5, 2.0)


def _torchvision(c_in, planes, stride, groups=1, base_width=64, dilation=1, norm=nn.BatchNorm2d):
    """torchvision's Bottleneck with the projection torchvision's ResNet._make_layer gives it."""
    downsample = None
    if stride != 1 or c_in != planes * TorchvisionBottleneck.expansion:
        downsample = nn.Sequential(nn.Conv2d(c_in, planes * 4, 1, stride=stride, bias=False), norm(planes * 4))
    return TorchvisionBottleneck(c_in, planes, stride, downsample, groups=groups, base_width=base_width,
                                 dilation=dilation, norm_layer=norm)


def test_declaration():
    spec = spec_of(Bottleneck)
    assert spec.alias == "bottleneck" and spec.qualified == "bottleneck@2"
    assert spec.category == "block"
    assert spec.positional_args == ("out_channels",)
    for name in ("out_channels", "width", "in_channels"):
        assert spec.args[name].inferable, name
    defaults = {name: spec.args[name].default for name in ("stride", "expansion", "groups", "dilation", "norm_eps",
                                                           "norm_momentum", "stochastic_depth_prob")}
    assert defaults == {"stride": 1, "expansion": 4, "groups": 1, "dilation": 1, "norm_eps": 1e-5,
                        "norm_momentum": 0.1, "stochastic_depth_prob": 0.0}
    assert spec.args["stride"].max == 2
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_harness():
    check_operator(Bottleneck)


def test_width_and_out_channels_infer_each_other():
    plan = hndl.resolve("bottleneck(16)", input_shape=("B", 8, 4, 4), output_shape=("B", 16, 4, 4))
    node = plan.nodes[0]
    assert node.args["width"] == 4 and node.provenance["width"] == "inferred"
    plan = hndl.resolve("bottleneck(width=4)\nconv(kernel_size=1)", input_shape=("B", 8, 4, 4),
                        output_shape=("B", 3, 4, 4))
    node = plan.nodes[0]
    assert node.args["out_channels"] == 16 and node.provenance["out_channels"] == "inferred"
    assert plan.nodes[1].args["in_channels"] == 16
    plan = hndl.resolve("bottleneck(width=6, expansion=2)", input_shape=("B", 12, 4, 4), output_shape=("B", 12, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 12


def test_channels_infer_backward_from_the_output_contract():
    plan = hndl.resolve("conv(6, kernel_size=1)\nbottleneck(stride=2)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 32, 4, 4))
    block = plan.nodes[1]
    assert block.args["out_channels"] == 32 and block.args["width"] == 8 and block.args["in_channels"] == 6
    assert block.provenance["out_channels"] == block.provenance["width"] == block.provenance["in_channels"] == \
        "inferred"
    # the producer's width stays open: the block's input channels appear in no relation to its output
    assert _fails("conv(kernel_size=1)\nbottleneck(32)", ("B", 3, 8, 8), ("B", 32, 8, 8)).code == "E_AMBIGUOUS"


@pytest.mark.parametrize("size, expected", [((8, 8), (4, 4)), ((7, 9), (4, 5)), ((1, 2), (1, 1))])
def test_stride_two_halves_rounding_up(size, expected):
    plan = hndl.resolve("bottleneck(8, stride=2)", input_shape=("B", 3, *size), output_shape=("B", 8, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, *expected)
    assert _fails("bottleneck(8, stride=2)", ("B", 3, *size), ("B", 8, expected[0] + 1, expected[1])).code == \
        "E_CONSTRAINT"


def test_spatial_inverse_exact_at_stride_one_and_an_interval_at_stride_two():
    plan = hndl.resolve("linear()\nreshape(4)\nbottleneck(8)", input_shape=("B", 2), output_shape=("B", 8, 5, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 5, 6) and plan.nodes[0].args["out_features"] == 120
    error = _fails("linear()\nreshape(4)\nbottleneck(8, stride=2)", ("B", 2), ("B", 8, 4, 4))
    assert error.code == "E_AMBIGUOUS" and "7..8" in error.message


@pytest.mark.parametrize("source, in_shape, out_shape, projected",
                         [("bottleneck()", (16, 4, 4), (16, 4, 4), False),
                          ("bottleneck(16)", (8, 4, 4), (16, 4, 4), True),
                          ("bottleneck(stride=2)", (16, 4, 4), (16, 2, 2), True),
                          ("bottleneck(width=2, stride=2)", (4, 5, 4), (8, 3, 2), True)])
def test_the_projection_exists_exactly_when_channels_or_stride_change(source, in_shape, out_shape, projected):
    model = network(source, input_shape=("B", *in_shape), output_shape=("B", *out_shape), device="cpu")
    block = model.nodes.n_n0
    assert (block.downsample is not None) == projected
    assert list(block.state_dict()) == TORCHVISION_KEYS + (PROJECTION_KEYS if projected else [])
    assert all(conv.bias is None for conv in block.modules() if isinstance(conv, nn.Conv2d))


@pytest.mark.parametrize("stride, c_in, planes", [(1, 16, 4), (1, 8, 4), (2, 8, 4), (2, 16, 4), (1, 6, 2)])
def test_numerics_against_torchvision_bottleneck_with_copied_weights(stride, c_in, planes):
    c_out = planes * 4
    size = (6, 5)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(f"bottleneck({c_out}, stride={stride})", input_shape=("B", c_in, *size),
                    output_shape=("B", c_out, *out_size), device="cpu")
    block = model.nodes.n_n0
    _randomize(block)
    reference = _torchvision(c_in, planes, stride)
    assert (block.downsample is None) == (reference.downsample is None)
    assert list(block.state_dict()) == list(reference.state_dict())
    reference.load_state_dict(block.state_dict())
    _compare(model, block, reference, c_in, size)


def test_grouped_numerics_against_torchvision_resnext_bottleneck():
    # torchvision's width = int(planes * base_width / 64) * groups = int(4 * 32 / 64) * 4 = 8, out = 16
    c_in, size = 8, (5, 5)
    model = network("bottleneck(16, stride=2, expansion=2, groups=4)", input_shape=("B", c_in, *size),
                    output_shape=("B", 16, 3, 3), device="cpu")
    block = model.nodes.n_n0
    assert model.plan.nodes[0].args["width"] == 8
    _randomize(block)
    reference = _torchvision(c_in, 4, 2, groups=4, base_width=32)
    assert reference.conv2.groups == 4 and reference.conv2.in_channels == 8
    reference.load_state_dict(block.state_dict())
    _compare(model, block, reference, c_in, size)


@pytest.mark.parametrize("stride, dilation, c_in", [(1, 2, 16), (1, 4, 8), (2, 1, 8)])
def test_dilated_numerics_with_configured_norms_against_torchvision(stride, dilation, c_in):
    """torchvision's replace_stride_with_dilation blocks (dilation 2 and 4 at stride 1) with
    norm_layer=partial(BatchNorm2d, eps=1e-3, momentum=0.01)."""
    size = (6, 7)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(f"bottleneck(16, stride={stride}, dilation={dilation}, norm_eps=0.001, norm_momentum=0.01)",
                    input_shape=("B", c_in, *size), output_shape=("B", 16, *out_size), device="cpu")
    block = model.nodes.n_n0
    _randomize(block)
    reference = _torchvision(c_in, 4, stride, dilation=dilation, norm=partial(nn.BatchNorm2d, eps=0.001,
                                                                              momentum=0.01))
    assert reference.conv2.dilation == block.conv2.dilation == (dilation, dilation)
    assert list(block.state_dict()) == list(reference.state_dict())
    assert all(m.eps == 0.001 and m.momentum == 0.01 for m in block.modules() if isinstance(m, nn.BatchNorm2d))
    reference.load_state_dict(block.state_dict())
    _compare(model, block, reference, c_in, size)


@pytest.mark.parametrize("c_in", [16, 8])
def test_a_drop_path_draws_as_timm_does(c_in):
    size = (4, 5)
    model = network("bottleneck(16, stochastic_depth_prob=0.5)", input_shape=("B", c_in, *size),
                    output_shape=("B", 16, *size), device="cpu")
    block = model.nodes.n_n0
    _randomize(block)
    downsample = None
    if c_in != 16:
        downsample = nn.Sequential(nn.Conv2d(c_in, 16, 1, bias=False), nn.BatchNorm2d(16))
    reference = TimmBottleneck(c_in, 4, downsample=downsample, drop_path=DropPath(0.5))
    assert list(block.state_dict()) == list(reference.state_dict())
    reference.load_state_dict(block.state_dict())
    for step in range(2):
        x = torch.randn(8, c_in, *size)
        torch.manual_seed(step)
        out = model(x)
        torch.manual_seed(step)
        expected = reference(x)
        torch.testing.assert_close(out, expected)
        torch.manual_seed(step)
        torch.testing.assert_close(out, spec_of(Bottleneck).reference(block)(x))
    model.eval()
    reference.eval()
    x = torch.randn(2, c_in, *size)
    state = torch.get_rng_state()
    torch.testing.assert_close(model(x), reference(x))
    assert torch.equal(torch.get_rng_state(), state)


def _compare(model, block, reference, c_in, size):
    for _ in range(2):  # two training steps: the running statistics move identically
        x = torch.randn(3, c_in, *size, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(Bottleneck).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        theirs = dict(reference.named_parameters())
        assert list(theirs) == [name for name, _ in block.named_parameters()]
        for name, parameter in block.named_parameters():
            torch.testing.assert_close(parameter.grad, theirs[name].grad, msg=name)
        for (name, buffer), other in zip(block.named_buffers(), reference.buffers()):
            torch.testing.assert_close(buffer, other, msg=name)
    model.eval()
    reference.eval()
    x = torch.randn(1, c_in, *size)
    torch.testing.assert_close(model(x), reference(x))
    torch.testing.assert_close(model(x), spec_of(Bottleneck).reference(block)(x))


def test_the_reference_leaves_the_running_statistics_alone_and_forward_draws_nothing():
    model = network("bottleneck(8, stride=2)", input_shape=("B", 4, 4, 4), output_shape=("B", 8, 2, 2), device="cpu")
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    x = torch.randn(2, 4, 4, 4)
    copy = x.clone()
    spec_of(Bottleneck).reference(block)(x)
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())
    model.eval()
    state = torch.get_rng_state()
    first = model(x)
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(model(x), first) and torch.equal(x, copy)


@pytest.mark.parametrize("source, c_in, c_out, stride", [("bottleneck(width=1)", 4, 4, 1),
                                                         ("bottleneck(width=2, expansion=2, groups=2, stride=2)", 2, 4,
                                                          2)])
def test_gradcheck_and_gradgradcheck_in_float64(source, c_in, c_out, stride):
    size = (3, 4)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(source, input_shape=("B", c_in, *size), output_shape=("B", c_out, *out_size), device="cpu")
    torch.manual_seed(0)
    block = model.nodes.n_n0.double()
    _randomize(block)
    x = torch.randn(2, c_in, *size, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    assert torch.autograd.gradgradcheck(block, (x,), fast_mode=True)  # the full check takes seconds here
    block.eval()
    assert torch.autograd.gradcheck(block, (x,))
    block.train()
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in block.named_parameters())

    def through(*values):
        return torch.func.functional_call(block, dict(zip(names, values)), (x.detach(),))

    assert torch.autograd.gradcheck(through, params, fast_mode=True)


@pytest.mark.parametrize("args", ["stride=3", "stride=0", "stride=(2, 2)", "stride=True", "0", "-4", "4.0",
                                  "in_channels=0", "width=0", "expansion=0", "groups=0", "16, 4",
                                  "16, kernel_size=3", "width=2.5", "dilation=0", "norm_eps=0",
                                  "norm_momentum=1.5", "stochastic_depth_prob=2", "16, dilation=1.5"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"bottleneck({args})", ("B", 16, 8, 8), ("B", 16, 8, 8)).code == "E_ARGUMENT"


def test_out_channels_not_a_multiple_of_expansion_is_a_constraint_error():
    error = _fails("bottleneck()", ("B", 8, 4, 4), ("B", 10, 4, 4))
    assert error.code == "E_CONSTRAINT" and "expansion" in error.message


def test_width_and_out_channels_that_disagree_are_a_constraint_error():
    assert _fails("bottleneck(16, width=8)", ("B", 8, 4, 4), ("B", 16, 4, 4)).code == "E_CONSTRAINT"


def test_width_not_divisible_by_groups_is_a_constraint_error():
    error = _fails("bottleneck(24, groups=4)", ("B", 8, 4, 4), ("B", 24, 4, 4))
    assert error.code == "E_CONSTRAINT" and "groups" in error.message


def test_literal_channels_contradicting_the_contract_are_a_constraint_error():
    assert _fails("bottleneck(16)", ("B", 16, 8, 8), ("B", 32, 8, 8)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("bottleneck(16)", shape, ("B", 16, 8, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("bottleneck(16)", ("B", 16, 4, 4), ("B", 16, 4, 4), input_dtype="int64").code == "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = network("bottleneck(8, stride=2)", input_shape=("B", 4, 2, 2), output_shape=("B", 8, 1, 1), device="cpu")
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 2, 2))
    assert error.value.code == "E_RUNTIME"
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())  # bn1 never ran
    assert model(torch.randn(2, 4, 2, 2)).shape == (2, 8, 1, 1)
    model.eval()
    assert model(torch.randn(1, 4, 2, 2)).shape == (1, 8, 1, 1)
