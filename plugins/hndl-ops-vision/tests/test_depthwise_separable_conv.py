"""depthwise_separable_conv@2: the declaration, the depthwise equation with its default padding
in both directions, channel inference, equality with conv(groups=C_in) then conv(kernel_size=1)
and with torchvision's Conv2dNormActivation pair (MobileNetV1) from copied weights in training
and evaluation mode, with torch's and with configured batch-norm eps and momentum,
gradcheck/gradgradcheck in float64, the harness, and every error code."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import Conv2dNormActivation

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.depthwise_separable_conv import DepthwiseSeparableConv

TORCHVISION_ACTIVATIONS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish}
#: Our state keys -> those of nn.Sequential(Conv2dNormActivation(depthwise), Conv2dNormActivation(pointwise)).
TORCHVISION_KEYS = {"depthwise": "0.0", "depthwise_norm": "0.1", "pointwise": "1.0", "pointwise_norm": "1.1"}


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _randomize(module):
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                sub.weight.uniform_(0.5, 1.5)
                sub.bias.normal_(0, 0.2)
                sub.running_mean.normal_(0, 0.1)
                sub.running_var.uniform_(0.5, 2.0)


def _torchvision_state(block):
    state = {}
    for key, value in block.state_dict().items():
        head, rest = key.split(".", 1)
        state[f"{TORCHVISION_KEYS[head]}.{rest}"] = value
    return state


def test_declaration():
    spec = spec_of(DepthwiseSeparableConv)
    assert spec.alias == "depthwise_separable_conv" and spec.qualified == "depthwise_separable_conv@2"
    assert spec.category == "convolution"
    assert spec.positional_args == ("out_channels",)
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    defaults = {name: spec.args[name].default for name in ("kernel_size", "stride", "padding", "dilation", "norm",
                                                          "activation", "norm_eps", "norm_momentum")}
    assert defaults == {"kernel_size": (3, 3), "stride": (1, 1), "padding": None, "dilation": (1, 1), "norm": False,
                        "activation": "none", "norm_eps": 1e-5, "norm_momentum": 0.1}
    assert spec.args["activation"].choices == ("none", "relu", "relu6", "silu", "hardswish")
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_harness():
    check_operator(DepthwiseSeparableConv)


@pytest.mark.parametrize("args, size, expected", [
    ("", (6, 5), (6, 5)),
    ("kernel_size=5", (6, 5), (6, 5)),
    ("kernel_size=(3, 5), dilation=2", (9, 9), (9, 9)),
    ("padding=0", (6, 5), (4, 3)),
    ("stride=2", (7, 6), (4, 3)),
    ("kernel_size=4", (6, 6), (5, 5)),
    ("kernel_size=(1, 3), stride=(1, 2), padding=(0, 2)", (4, 5), (4, 4)),
])
def test_the_depthwise_equation_per_axis(args, size, expected):
    source = f"depthwise_separable_conv(5, {args})"
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 5, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 5, *expected)
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 5, *expected), device="cpu")
    assert model(torch.randn(2, 3, *size)).shape == (2, 5, *expected)
    assert _fails(source, ("B", 3, *size), ("B", 5, expected[0] + 1, expected[1])).code == "E_CONSTRAINT"


def test_stride_one_inverts_exactly_and_stride_two_stays_ambiguous():
    plan = hndl.resolve("linear()\nreshape(4)\ndepthwise_separable_conv(8)", input_shape=("B", 2),
                        output_shape=("B", 8, 5, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 5, 6) and plan.nodes[0].args["out_features"] == 120
    error = _fails("linear()\nreshape(4)\ndepthwise_separable_conv(8, stride=2)", ("B", 2), ("B", 8, 4, 4))
    assert error.code == "E_AMBIGUOUS"


def test_channels_infer_in_both_directions():
    plan = hndl.resolve("conv(6, kernel_size=1)\ndepthwise_separable_conv()", input_shape=("B", 3, 5, 5),
                        output_shape=("B", 12, 5, 5))
    node = plan.nodes[1]
    assert node.args["in_channels"] == 6 and node.args["out_channels"] == 12
    assert node.provenance["in_channels"] == node.provenance["out_channels"] == "inferred"
    plan = hndl.resolve("depthwise_separable_conv(4)\nconv(kernel_size=1)", input_shape=("B", 3, 5, 5),
                        output_shape=("B", 2, 5, 5))
    assert plan.nodes[0].args["in_channels"] == 3 and plan.nodes[1].args["in_channels"] == 4


def test_an_open_producer_width_stays_ambiguous():
    error = _fails("conv(kernel_size=1)\ndepthwise_separable_conv(4)", ("B", 3, 5, 5), ("B", 4, 5, 5))
    assert error.code == "E_AMBIGUOUS"  # the pointwise convolution hides the depthwise width


def test_equals_conv_with_groups_then_a_pointwise_conv():
    block = network("depthwise_separable_conv(6, kernel_size=3, stride=2)", input_shape=("B", 4, 7, 7),
                    output_shape=("B", 6, 4, 4), device="cpu").nodes.n_n0
    assert block.depthwise.groups == 4 and block.depthwise.weight.shape == (4, 1, 3, 3)
    assert block.depthwise.bias is not None and block.pointwise.bias is not None
    pair = network("conv(4, kernel_size=3, stride=2, padding=1, groups=4)\nconv(6, kernel_size=1)",
                   input_shape=("B", 4, 7, 7), output_shape=("B", 6, 4, 4), device="cpu")
    pair.nodes.n_n0.load_state_dict(block.depthwise.state_dict())
    pair.nodes.n_n1.load_state_dict(block.pointwise.state_dict())
    x = torch.randn(2, 4, 7, 7)
    torch.testing.assert_close(block(x), pair(x))
    expected = F.conv2d(F.conv2d(x, block.depthwise.weight, block.depthwise.bias, 2, 1, groups=4),
                        block.pointwise.weight, block.pointwise.bias)
    torch.testing.assert_close(block(x), expected)


@pytest.mark.parametrize("eps, momentum", [(1e-5, 0.1), (1e-3, 0.01)])
@pytest.mark.parametrize("activation", ["relu", "relu6", "silu", "hardswish"])
def test_numerics_against_torchvision_conv_norm_activation_with_copied_weights(activation, eps, momentum):
    c_in, c_out = 3, 5
    model = network(f'depthwise_separable_conv({c_out}, stride=2, norm=True, activation="{activation}", '
                    f"norm_eps={eps}, norm_momentum={momentum})",
                    input_shape=("B", c_in, 6, 5), output_shape=("B", c_out, 3, 3), device="cpu")
    block = model.nodes.n_n0
    assert block.depthwise.bias is None and block.pointwise.bias is None
    assert block.depthwise_norm.eps == block.pointwise_norm.eps == eps
    assert block.depthwise_norm.momentum == block.pointwise_norm.momentum == momentum
    _randomize(block)
    act = TORCHVISION_ACTIVATIONS[activation]
    norm = partial(nn.BatchNorm2d, eps=eps, momentum=momentum)
    reference = nn.Sequential(
        Conv2dNormActivation(c_in, c_in, 3, stride=2, groups=c_in, norm_layer=norm, activation_layer=act,
                             inplace=False),
        Conv2dNormActivation(c_in, c_out, 1, norm_layer=norm, activation_layer=act, inplace=False),
    )
    assert list(_torchvision_state(block)) == list(reference.state_dict())  # execution order, one to one
    reference.load_state_dict(_torchvision_state(block))
    for _ in range(2):  # training: the running statistics move identically
        x = torch.randn(3, c_in, 6, 5, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(DepthwiseSeparableConv).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        for (name, ours), theirs in zip(block.named_parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, msg=name)
    for (name, ours), theirs in zip(block.named_buffers(), reference.buffers()):
        torch.testing.assert_close(ours, theirs, msg=name)
    model.eval()
    reference.eval()
    x = torch.randn(1, c_in, 6, 5)
    torch.testing.assert_close(model(x), reference(x))
    torch.testing.assert_close(model(x), spec_of(DepthwiseSeparableConv).reference(block)(x))


def test_the_reference_leaves_the_running_statistics_alone_and_the_input_is_untouched():
    block = network("depthwise_separable_conv(4, norm=True)", input_shape=("B", 2, 4, 4),
                    output_shape=("B", 4, 4, 4), device="cpu").nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    x = torch.randn(2, 2, 4, 4)
    copy = x.clone()
    spec_of(DepthwiseSeparableConv).reference(block)(x)
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())
    block(x)
    assert torch.equal(x, copy)


@pytest.mark.parametrize("args", ["", ', norm=True, activation="silu"'])
def test_gradcheck_and_gradgradcheck_in_float64(args):
    torch.manual_seed(0)
    block = network(f"depthwise_separable_conv(3{args})", input_shape=("B", 2, 3, 3), output_shape=("B", 3, 3, 3),
                    device="cpu").nodes.n_n0.double()
    _randomize(block)
    x = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
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


@pytest.mark.parametrize("args", ["kernel_size=0", "stride=0", "padding=-1", "dilation=0", "norm=1",
                                  'activation="tanh"', "in_channels=0", "0", "4, 3", "kernel_size=(1, 2, 3)",
                                  "4.0", "groups=2", "norm_eps=0", "norm_momentum=-0.1", "norm_momentum=2"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"depthwise_separable_conv({args})", ("B", 4, 8, 8), ("B", 4, 8, 8)).code == "E_ARGUMENT"


def test_input_smaller_than_the_kernel_is_a_constraint_error():
    assert _fails("depthwise_separable_conv(4, kernel_size=5, padding=0)", ("B", 2, 3, 3), ("B", 4, 1, 1)).code == \
        "E_CONSTRAINT"


def test_literal_channels_contradicting_the_contract_are_a_constraint_error():
    assert _fails("depthwise_separable_conv(4)", ("B", 2, 5, 5), ("B", 5, 5, 5)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("depthwise_separable_conv(4)", shape, ("B", 4, 8, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("depthwise_separable_conv(4)", ("B", 4, 4, 4), ("B", 4, 4, 4), input_dtype="int64").code == \
        "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = network("depthwise_separable_conv(4, stride=2, norm=True)", input_shape=("B", 2, 2, 2),
                    output_shape=("B", 4, 1, 1), device="cpu")
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 2, 2, 2))
    assert error.value.code == "E_RUNTIME"
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())  # nothing ran
    assert model(torch.randn(2, 2, 2, 2)).shape == (2, 4, 1, 1)
    model.eval()
    assert model(torch.randn(1, 2, 2, 2)).shape == (1, 4, 1, 1)
    # without batch norms one value per channel is fine in training
    plain = network("depthwise_separable_conv(4, stride=2)", input_shape=("B", 2, 2, 2), output_shape=("B", 4, 1, 1),
                    device="cpu")
    assert plain(torch.randn(1, 2, 2, 2)).shape == (1, 4, 1, 1)


def test_torch_positional_order_is_refused_not_read_another_way():
    """Issue 30 item 1's audit: a SeparableConv2d(in, out, kernel_size)-style call is refused; the HNDL
    spelling is depthwise_separable_conv(16, kernel_size=3), in_channels inferred or checked by keyword."""
    with pytest.raises(HNDLError) as error:
        hndl.resolve("depthwise_separable_conv(3, 16, 3)", input_shape=("B", 3, 8, 8), output_shape=("B", 16, 8, 8))
    assert error.value.code == "E_ARGUMENT" and any("kernel_size=" in remedy for remedy in error.value.remedies)
    plan = hndl.resolve("depthwise_separable_conv(16, kernel_size=3, in_channels=3)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 16, 8, 8))
    assert (plan.nodes[0].args["in_channels"], plan.nodes[0].args["out_channels"]) == (3, 16)
