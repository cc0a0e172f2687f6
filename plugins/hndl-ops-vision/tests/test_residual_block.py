"""residual_block@2: one node/one module for the ResNet basic block; spatial arithmetic at
stride 1 and 2 in both directions, channel inference, the projection exactly when channels
or stride change, numerics against a handwritten torchvision-style BasicBlock in training and
evaluation mode (forward, input and parameter gradients, running statistics), against timm's
BasicBlock with configured batch norms (eps, momentum) and a drop path (the same draw), the
declared reference, gradcheck/gradgradcheck in float64, the harness, and every error code."""

from functools import partial

import pytest
import torch
from timm.layers import DropPath
from timm.models.resnet import BasicBlock as TimmBasicBlock
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.residual_block import ResidualBlock

TORCHVISION_KEYS = [
    "conv1.weight",
    "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
    "conv2.weight",
    "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked",
]
PROJECTION_KEYS = [
    "downsample.0.weight",
    "downsample.1.weight", "downsample.1.bias", "downsample.1.running_mean", "downsample.1.running_var",
    "downsample.1.num_batches_tracked",
]


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock, written out by hand."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


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


def test_declaration():
    spec = spec_of(ResidualBlock)
    assert spec.alias == "residual_block" and spec.qualified == "residual_block@2"
    assert spec.category == "block"
    assert spec.positional_args == ("out_channels",)
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    stride = spec.args["stride"]
    assert stride.default == 1 and stride.min == 1 and stride.max == 2 and not stride.positional
    assert {name: spec.args[name].default for name in ("norm_eps", "norm_momentum", "stochastic_depth_prob")} == {
        "norm_eps": 1e-5, "norm_momentum": 0.1, "stochastic_depth_prob": 0.0}
    assert not any(spec.args[name].positional for name in ("norm_eps", "norm_momentum", "stochastic_depth_prob"))
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_harness():
    check_operator(ResidualBlock)


@pytest.mark.parametrize("stride, channels", [(1, (4, 4)), (2, (4, 8))])
def test_numerics_against_timm_with_configured_norms_and_a_drop_path(stride, channels):
    """timm's ResNet BasicBlock with norm_layer=partial(BatchNorm2d, eps=1e-3, momentum=0.01) and
    drop_path=DropPath(0.5): the same keys in the same order, and the same values and draws in
    training (drop path on the branch, also beside a projection) and in eval mode."""
    c_in, c_out = channels
    size = (5, 6)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(f"residual_block({c_out}, stride={stride}, norm_eps=0.001, norm_momentum=0.01, "
                    "stochastic_depth_prob=0.5)", input_shape=("B", c_in, *size),
                    output_shape=("B", c_out, *out_size), device="cpu")
    block = model.nodes.n_n0
    _randomize(block)
    norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
    downsample = None
    if block.downsample is not None:
        downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), norm(c_out))
    reference = TimmBasicBlock(c_in, c_out, stride, downsample, norm_layer=norm, drop_path=DropPath(0.5))
    assert list(block.state_dict()) == list(reference.state_dict())
    reference.load_state_dict(block.state_dict())
    assert all(m.eps == 0.001 and m.momentum == 0.01 for m in block.modules() if isinstance(m, nn.BatchNorm2d))
    for step in range(2):
        x = torch.randn(8, c_in, *size)
        torch.manual_seed(step)
        out = model(x)
        torch.manual_seed(step)
        expected = reference(x)
        torch.testing.assert_close(out, expected)
        torch.manual_seed(step)
        torch.testing.assert_close(out, spec_of(ResidualBlock).reference(block)(x))
        for (name, buffer), other in zip(block.named_buffers(), reference.buffers()):
            torch.testing.assert_close(buffer, other, msg=name)
    model.eval()
    reference.eval()
    x = torch.randn(2, c_in, *size)
    state = torch.get_rng_state()
    torch.testing.assert_close(model(x), reference(x))
    assert torch.equal(torch.get_rng_state(), state)  # eval: no drop path, nothing drawn


@pytest.mark.parametrize("size, expected", [((8, 8), (4, 4)), ((7, 9), (4, 5)), ((1, 2), (1, 1))])
def test_stride_two_halves_rounding_up(size, expected):
    plan = hndl.resolve("residual_block(6, stride=2)", input_shape=("B", 3, *size), output_shape=("B", 6, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 6, *expected)
    assert _fails("residual_block(6, stride=2)", ("B", 3, *size), ("B", 6, expected[0] + 1, expected[1])).code == \
        "E_CONSTRAINT"


def test_stride_one_keeps_the_extent_and_inverts_exactly():
    plan = hndl.resolve("residual_block()", input_shape=("B", 4, 5, 7), output_shape=("B", 4, 5, 7))
    node = plan.nodes[0]
    assert node.args == {"out_channels": 4, "stride": 1, "in_channels": 4, "norm_eps": 1e-5, "norm_momentum": 0.1,
                         "stochastic_depth_prob": 0.0}
    assert node.provenance["out_channels"] == "inferred" and node.provenance["stride"] == "default"
    plan = hndl.resolve("linear()\nreshape(4)\nresidual_block(8)", input_shape=("B", 2), output_shape=("B", 8, 5, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 5, 6)
    assert plan.nodes[0].args["out_features"] == 120


def test_stride_two_inverse_is_an_interval():
    error = _fails("linear()\nreshape(4)\nresidual_block(8, stride=2)", ("B", 2), ("B", 8, 4, 4))
    assert error.code == "E_AMBIGUOUS" and "7..8" in error.message
    # intersected with a down2 convolution's [8, 9], only 8 remains
    plan = hndl.resolve(
        "linear()\nr = reshape(4)\na = residual_block(r, 8, stride=2)\nb = conv(r, 8, policy=\"down2\")\nadd(a, b)",
        input_shape=("B", 2), output_shape=("B", 8, 4, 4),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 8, 8)


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv(6, kernel_size=1)\nresidual_block(stride=2)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 12, 4, 4))
    node = plan.nodes[1]
    assert node.args["in_channels"] == 6 and node.args["out_channels"] == 12
    assert node.provenance["in_channels"] == node.provenance["out_channels"] == "inferred"


@pytest.mark.parametrize("source, in_shape, out_shape, projected",
                         [("residual_block()", (4, 6, 6), (4, 6, 6), False),
                          ("residual_block(8)", (4, 6, 6), (8, 6, 6), True),
                          ("residual_block(stride=2)", (4, 6, 6), (4, 3, 3), True),
                          ("residual_block(8, stride=2)", (4, 7, 6), (8, 4, 3), True)])
def test_the_projection_exists_exactly_when_channels_or_stride_change(source, in_shape, out_shape, projected):
    model = network(source, input_shape=("B", *in_shape), output_shape=("B", *out_shape), device="cpu")
    block = model.nodes.n_n0
    assert (block.downsample is not None) == projected
    assert list(block.state_dict()) == TORCHVISION_KEYS + (PROJECTION_KEYS if projected else [])
    assert all(conv.bias is None for conv in block.modules() if isinstance(conv, nn.Conv2d))
    handwritten = BasicBlock(in_shape[0], out_shape[0], stride=2 if "stride=2" in source else 1)
    assert sum(p.numel() for p in block.parameters()) == sum(p.numel() for p in handwritten.parameters())


@pytest.mark.parametrize("stride, channels", [(1, (4, 4)), (2, (4, 8)), (1, (3, 6)), (2, (5, 5))])
def test_numerics_against_a_handwritten_basic_block(stride, channels):
    c_in, c_out = channels
    size = (6, 5)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(f"residual_block({c_out}, stride={stride})", input_shape=("B", c_in, *size),
                    output_shape=("B", c_out, *out_size), device="cpu")
    block = model.nodes.n_n0
    _randomize(block)
    reference = BasicBlock(c_in, c_out, stride)
    reference.load_state_dict(block.state_dict())
    for _ in range(2):  # two training steps: the running statistics move identically
        x = torch.randn(3, c_in, *size, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(ResidualBlock).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        ours, theirs = dict(block.named_parameters()), dict(reference.named_parameters())
        assert list(ours) == list(theirs)
        for name in ours:
            torch.testing.assert_close(ours[name].grad, theirs[name].grad, msg=name)
        for (name, buffer), other in zip(block.named_buffers(), reference.buffers()):
            torch.testing.assert_close(buffer, other, msg=name)
    model.eval()
    reference.eval()
    x = torch.randn(1, c_in, *size)
    torch.testing.assert_close(model(x), reference(x))
    torch.testing.assert_close(model(x), spec_of(ResidualBlock).reference(block)(x))


def test_the_reference_leaves_the_running_statistics_alone():
    model = network("residual_block(4, stride=2)", input_shape=("B", 2, 4, 4), output_shape=("B", 4, 2, 2),
                    device="cpu")
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    spec_of(ResidualBlock).reference(block)(torch.randn(2, 2, 4, 4))
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())


def test_forward_draws_no_randomness_and_is_repeatable():
    model = network("residual_block(4)", input_shape=("B", 4, 4, 4), output_shape=("B", 4, 4, 4), device="cpu")
    model.eval()
    x = torch.randn(2, 4, 4, 4)
    state = torch.get_rng_state()
    first = model(x)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model(x), first)


@pytest.mark.parametrize("stride, channels", [(1, (2, 2)), (2, (2, 3))])
def test_gradcheck_and_gradgradcheck_in_float64(stride, channels):
    c_in, c_out = channels
    size = (4, 3)
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    model = network(f"residual_block({c_out}, stride={stride})", input_shape=("B", c_in, *size),
                    output_shape=("B", c_out, *out_size), device="cpu")
    torch.manual_seed(0)
    block = model.nodes.n_n0.double()
    _randomize(block)
    x = torch.randn(2, c_in, *size, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    assert torch.autograd.gradgradcheck(block, (x,), fast_mode=True)  # the full check takes seconds here
    block.eval()
    assert torch.autograd.gradcheck(block, (x,))
    # every parameter gradient, in training mode (the reference's are compared with them above)
    block.train()
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in block.named_parameters())

    def through(*values):
        return torch.func.functional_call(block, dict(zip(names, values)), (x.detach(),))

    assert torch.autograd.gradcheck(through, params, fast_mode=True)


@pytest.mark.parametrize("args", ["stride=3", "stride=0", "stride=(2, 2)", "stride=True", "0", "-4", "4.0",
                                  "in_channels=0", "4, kernel_size=3", "norm_eps=0", "norm_eps=-1",
                                  "norm_momentum=1.5", "stochastic_depth_prob=1.5", "stochastic_depth_prob=-0.1",
                                  'norm_eps="small"'])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"residual_block({args})", ("B", 4, 8, 8), ("B", 4, 8, 8)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("residual_block(4)", shape, shape).code == "E_CONSTRAINT"


def test_literal_channels_contradicting_the_contract_are_a_constraint_error():
    assert _fails("residual_block(4)", ("B", 4, 8, 8), ("B", 5, 8, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("residual_block(4)", ("B", 4, 8, 8), ("B", 4, 8, 8), input_dtype="int64").code == "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = network("residual_block(4, stride=2)", input_shape=("B", 4, 2, 2), output_shape=("B", 4, 1, 1),
                    device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 2, 2))
    assert error.value.code == "E_RUNTIME"
    assert model(torch.randn(2, 4, 2, 2)).shape == (2, 4, 1, 1)
    model.eval()
    assert model(torch.randn(1, 4, 2, 2)).shape == (1, 4, 1, 1)
