"""inverted_residual@2: the declaration, spatial arithmetic in both directions (dilation too),
channel inference, the expansion and the skip exactly when torchvision has them, numerics against
torchvision's mobilenetv2.InvertedResidual, mobilenetv3.InvertedResidual (explicit hidden width,
hard-swish, the hidden-based squeeze width rounded to 8, eps 1e-3 / momentum 0.01, dilation) and
efficientnet.MBConv (squeeze width from the input, SiLU, kernel 5, the hidden width rounded to 8,
stochastic depth with the same draw) with copied weights and state keys one to one, in execution
order, in training and evaluation mode; the declared reference, gradcheck/gradgradcheck in float64,
the harness, and every error code."""

import pytest
import torch
from functools import partial

from torch import nn
from torchvision.models._utils import _make_divisible
from torchvision.models.efficientnet import MBConv, MBConvConfig
from torchvision.models.mobilenetv2 import InvertedResidual as TorchvisionInvertedResidual
from torchvision.models.mobilenetv3 import InvertedResidual as MobileNetV3Block
from torchvision.models.mobilenetv3 import InvertedResidualConfig

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.block_parts import make_divisible
from hndl_ops_vision.inverted_residual import InvertedResidual, hidden_width, squeeze_width
from hndl_ops_vision.squeeze_excitation import SqueezeExcitation


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


def _out(size, stride, kernel=3, dilation=1):
    padding = (kernel - 1) // 2 * dilation
    return tuple((extent + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1 for extent in size)


def _model(source, c_in, c_out, size, stride=1, kernel=3, dilation=1):
    return network(source, input_shape=("B", c_in, *size),
                   output_shape=("B", c_out, *_out(size, stride, kernel, dilation)), device="cpu")


def _compare_training_and_eval(model, block, reference, c_in, size, rename=lambda name: name):
    for step in range(2):  # two training steps: the running statistics move identically
        x = torch.randn(3, c_in, *size, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        torch.manual_seed(step)  # the same stochastic-depth draw, if any
        out = model(x)
        torch.manual_seed(step)
        expected = reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.manual_seed(step)
        torch.testing.assert_close(out, spec_of(InvertedResidual).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        theirs = dict(reference.named_parameters())
        assert len(theirs) == len(list(block.parameters()))
        for name, parameter in block.named_parameters():
            torch.testing.assert_close(parameter.grad, theirs[rename(name)].grad, msg=name)
        buffers = dict(reference.named_buffers())
        for name, buffer in block.named_buffers():
            torch.testing.assert_close(buffer, buffers[rename(name)], msg=name)
    model.eval()
    reference.eval()
    x = torch.randn(2, c_in, *size)
    torch.testing.assert_close(model(x), reference(x))
    torch.testing.assert_close(model(x), spec_of(InvertedResidual).reference(block)(x))


def test_declaration():
    spec = spec_of(InvertedResidual)
    assert spec.alias == "inverted_residual" and spec.qualified == "inverted_residual@2"
    assert spec.category == "block"
    assert spec.positional_args == ("out_channels", "expand_ratio")
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    assert spec.args["expand_ratio"].default is None and spec.args["expand_ratio"].min == 1
    defaults = {name: spec.args[name].default for name in (
        "hidden_channels", "hidden_divisor", "kernel_size", "stride", "dilation", "activation", "se_ratio",
        "se_channels", "se_from", "se_divisor", "se_activation", "se_gate", "norm_eps", "norm_momentum",
        "stochastic_depth_prob", "layout")}
    assert defaults == {"hidden_channels": None, "hidden_divisor": 1, "kernel_size": 3, "stride": 1, "dilation": 1,
                        "activation": "relu6", "se_ratio": 0.0, "se_channels": None, "se_from": "input",
                        "se_divisor": 1, "se_activation": "relu", "se_gate": "sigmoid", "norm_eps": 1e-5,
                        "norm_momentum": 0.1, "stochastic_depth_prob": 0.0, "layout": "mobilenet_v2"}
    assert spec.args["stride"].max == 2 and spec.args["layout"].choices == ("mobilenet_v2", "mobilenet_v3")
    assert spec.relation is not None and spec.reference is not None and spec.validate is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_harness():
    check_operator(InvertedResidual)


@pytest.mark.parametrize("expand_ratio, stride, channels", [(1, 1, (4, 4)), (6, 1, (4, 4)), (1, 2, (4, 6)),
                                                             (6, 2, (3, 5)), (6, 1, (3, 5)), (1, 1, (4, 8))])
def test_numerics_against_torchvision_mobilenet_v2_with_copied_weights(expand_ratio, stride, channels):
    c_in, c_out = channels
    size = (6, 5)
    model = _model(f"inverted_residual({c_out}, {expand_ratio}, stride={stride})", c_in, c_out, size, stride)
    block = model.nodes.n_n0
    _randomize(block)
    reference = TorchvisionInvertedResidual(c_in, c_out, stride, expand_ratio)
    assert list(block.state_dict()) == list(reference.state_dict())  # torchvision's keys, so its weights load
    reference.load_state_dict(block.state_dict())
    assert block.residual == reference.use_res_connect == (stride == 1 and c_in == c_out)
    assert block.expand == (expand_ratio != 1)
    _compare_training_and_eval(model, block, reference, c_in, size)


def test_the_hidden_width_rounds_like_torchvision():
    model = _model("inverted_residual(4, 2.5)", 5, 4, (3, 3))
    block = model.nodes.n_n0
    reference = TorchvisionInvertedResidual(5, 4, 1, 2.5)
    assert block.hidden_channels == 12  # round(12.5), as torchvision's int(round(...))
    assert list(block.state_dict()) == list(reference.state_dict())
    assert [t.shape for t in block.state_dict().values()] == [t.shape for t in reference.state_dict().values()]


@pytest.mark.parametrize("expand_ratio, stride, channels, kernel", [(4, 1, (8, 8), 5), (6, 2, (8, 16), 3),
                                                                     (4, 1, (8, 16), 5), (1, 1, (8, 8), 3),
                                                                     (2.5, 1, (8, 8), 3)])
def test_numerics_against_torchvision_mbconv_with_copied_weights(expand_ratio, stride, channels, kernel):
    """Keys one to one and in torchvision's order (the squeeze-and-excitation between the depthwise
    stage and the projection); 8 * 2.5 = 20 rounds to 24 as EfficientNet's adjust_channels does."""
    c_in, c_out = channels
    size = (5, 6)
    source = (f'inverted_residual({c_out}, {expand_ratio}, kernel_size={kernel}, stride={stride}, activation="silu", '
              'se_ratio=0.25, se_activation="silu", hidden_divisor=8, stochastic_depth_prob=0.5, '
              'layout="mobilenet_v3")')
    model = _model(source, c_in, c_out, size, stride, kernel)
    block = model.nodes.n_n0
    _randomize(block)
    hidden = _make_divisible(c_in * expand_ratio, 8)
    assert block.se.fc1.out_channels == max(1, c_in // 4) and block.se.fc1.in_channels == hidden
    config = MBConvConfig(expand_ratio, kernel, stride, c_in, c_out, 1)
    reference = MBConv(config, stochastic_depth_prob=0.5, norm_layer=nn.BatchNorm2d)
    assert list(block.state_dict()) == list(reference.state_dict())
    assert [name for name, _ in block.named_modules()] == [name for name, _ in reference.named_modules()
                                                                 if not name.endswith(("avgpool", "activation"))]
    reference.load_state_dict(block.state_dict())
    assert block.residual == reference.use_res_connect
    _compare_training_and_eval(model, block, reference, c_in, size)


MOBILENET_V3_NORM = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)


@pytest.mark.parametrize("c_in, kernel, hidden, c_out, use_se, activation, stride, dilation", [
    (16, 3, 16, 16, True, "RE", 2, 1),  # mobilenet_v3_small's first block: no expansion, squeeze 8
    (16, 3, 72, 24, False, "RE", 2, 1),
    (24, 3, 88, 24, False, "RE", 1, 1),
    (24, 5, 96, 40, True, "HS", 2, 1),
    (40, 5, 120, 40, True, "HS", 1, 2),  # the dilated tail
])
def test_numerics_against_torchvision_mobilenet_v3_with_copied_weights(c_in, kernel, hidden, c_out, use_se,
                                                                       activation, stride, dilation):
    size = (5, 7)
    act = "hardswish" if activation == "HS" else "relu"
    se = ', se_ratio=0.25, se_from="hidden", se_divisor=8, se_gate="hardsigmoid"' if use_se else ""
    source = (f'inverted_residual({c_out}, hidden_channels={hidden}, kernel_size={kernel}, stride={stride}, '
              f'dilation={dilation}, activation="{act}"{se}, norm_eps=0.001, norm_momentum=0.01, '
              'layout="mobilenet_v3")')
    model = _model(source, c_in, c_out, size, stride, kernel, dilation)
    block = model.nodes.n_n0
    _randomize(block)
    config = InvertedResidualConfig(c_in, kernel, hidden, c_out, use_se, activation, stride, dilation, 1.0)
    reference = MobileNetV3Block(config, MOBILENET_V3_NORM)
    assert list(block.state_dict()) == list(reference.state_dict())
    assert [t.shape for t in block.state_dict().values()] == [t.shape for t in reference.state_dict().values()]
    assert block.expand == (hidden != c_in) and block.residual == reference.use_res_connect
    if use_se:
        assert block.se.fc1.out_channels == _make_divisible(hidden // 4, 8)
    norms = [m for m in block.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(m.eps == 0.001 and m.momentum == 0.01 for m in norms)
    reference.load_state_dict(block.state_dict())
    _compare_training_and_eval(model, block, reference, c_in, size)


@pytest.mark.parametrize("layout, names", [
    ("mobilenet_v2", ["conv.0", "conv.1", "conv.2", "conv.3", "conv.4"]),
    ("mobilenet_v3", ["block.0", "block.1", "block.2", "block.3"]),
])
def test_state_is_registered_in_execution_order(layout, names):
    """Version 1 registered the squeeze-and-excitation after the projection (`se.*` last); now
    printing, parameters and the state dictionary follow the computation."""
    model = _model(f'inverted_residual(8, 4, se_ratio=0.5, layout="{layout}")', 8, 8, (4, 4))
    block = model.nodes.n_n0
    stages = [name for name, _ in block.named_children()]
    assert stages == [layout.replace("mobilenet_v2", "conv").replace("mobilenet_v3", "block"), "stochastic_depth"]
    assert [f"{stages[0]}.{name}" for name, _ in block.body.named_children()] == names
    assert isinstance(block.body[2], SqueezeExcitation) and block.se is block.body[2]
    keys = list(block.state_dict())
    se_keys = [i for i, key in enumerate(keys) if ".fc" in key]
    depthwise = [i for i, key in enumerate(keys) if key.startswith(f"{stages[0]}.1.")]
    projection = [i for i, key in enumerate(keys) if key.startswith(f"{stages[0]}.3")]
    assert max(depthwise) < min(se_keys) and max(se_keys) < min(projection)
    text = repr(block)
    assert text.index("SqueezeExcitation") < text.index("(3)")
    model.eval()
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(model(x), spec_of(InvertedResidual).reference(block)(x))


def test_widths_round_like_torchvision_and_timm():
    for value in [3, 8, 12.5, 18, 22, 36, 60, 72, 90.0, 144, 1000.3]:
        assert make_divisible(value, 8) == _make_divisible(value, 8), value
    assert make_divisible(0, 1) == 1 and make_divisible(7, 1) == 7
    assert hidden_width(10, 6.0, None, 1) == 60 and hidden_width(10, 6.0, None, 8) == 64
    assert hidden_width(5, 2.5, None, 1) == 12 and hidden_width(24, None, 88, 8) == 88
    assert squeeze_width(10, 64, 0.25, "input", 1) == 2 and squeeze_width(2, 12, 0.25, "input", 1) == 1
    assert squeeze_width(24, 88, 0.25, "hidden", 8) == 24 and squeeze_width(16, 16, 0.25, "hidden", 8) == 8


def test_an_explicit_squeeze_width_and_the_expansion_rule():
    model = _model('inverted_residual(6, 1.25, se_channels=3, se_gate="hardsigmoid")', 4, 6, (3, 3))
    block = model.nodes.n_n0
    assert block.hidden_channels == 5 and block.expand and block.se.fc1.out_channels == 3
    model = _model("inverted_residual(6, hidden_channels=4)", 4, 6, (3, 3))
    assert not model.nodes.n_n0.expand and len(model.nodes.n_n0.conv) == 3  # hidden == C_in: no expansion


def test_stochastic_depth_draws_only_in_training_and_only_with_the_skip():
    model = _model('inverted_residual(4, 2, stochastic_depth_prob=0.5, layout="mobilenet_v3")', 4, 4, (3, 3))
    block = model.nodes.n_n0
    x = torch.randn(8, 4, 3, 3)
    model.eval()
    before = torch.get_rng_state()
    model(x)
    assert torch.equal(torch.get_rng_state(), before)  # eval: the identity on the branch, nothing drawn
    model.train()
    torch.manual_seed(3)
    out = model(x)
    assert not torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(3)
    keep = torch.empty(8, 1, 1, 1).bernoulli_(0.5)
    branch = block.body(x)
    torch.testing.assert_close(out, x + branch * keep / 0.5)
    unskipped = _model('inverted_residual(8, 2, stochastic_depth_prob=0.5)', 4, 8, (3, 3))
    state = torch.get_rng_state()
    unskipped(x)
    assert torch.equal(torch.get_rng_state(), state)  # no skip: ignored, as in torchvision's MBConv


def test_squeeze_excitation_gate_and_activation_choices():
    model = _model('inverted_residual(4, 3, activation="hardswish", se_ratio=0.5, se_gate="hardsigmoid")', 4, 4, (3, 3))
    assert model.nodes.n_n0.body is model.nodes.n_n0.conv
    block = model.nodes.n_n0
    assert block.se.gate == "hardsigmoid" and block.se.activation == "relu" and block.se.fc1.out_channels == 2
    assert isinstance(block.conv[0][2], nn.Hardswish) and isinstance(block.conv[1][2], nn.Hardswish)
    _randomize(block)
    model.eval()
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(model(x), spec_of(InvertedResidual).reference(block)(x))


@pytest.mark.parametrize("size, stride, kernel, dilation", [((7, 9), 2, 3, 1), ((8, 8), 2, 5, 1), ((5, 6), 1, 5, 1),
                                                             ((6, 6), 1, 4, 1), ((7, 9), 2, 3, 2), ((6, 6), 1, 4, 3)])
def test_spatial_arithmetic_forward(size, stride, kernel, dilation):
    expected = _out(size, stride, kernel, dilation)
    source = f"inverted_residual(4, 2, stride={stride}, kernel_size={kernel}, dilation={dilation})"
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 4, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, *expected)
    assert _fails(source, ("B", 3, *size), ("B", 4, expected[0] + 1, expected[1])).code == "E_CONSTRAINT"


def test_spatial_inverse_exact_at_stride_one_and_an_interval_at_stride_two():
    plan = hndl.resolve("linear()\nreshape(4)\ninverted_residual(8, 6)", input_shape=("B", 2), output_shape=("B", 8, 5, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 5, 6) and plan.nodes[0].args["out_features"] == 120
    error = _fails("linear()\nreshape(4)\ninverted_residual(8, 6, stride=2)", ("B", 2), ("B", 8, 4, 4))
    assert error.code == "E_AMBIGUOUS"


def test_channels_infer_in_both_directions():
    plan = hndl.resolve("conv(6, kernel_size=1)\ninverted_residual(expand_ratio=6, stride=2)",
                        input_shape=("B", 3, 8, 8), output_shape=("B", 12, 4, 4))
    node = plan.nodes[1]
    assert node.args["in_channels"] == 6 and node.args["out_channels"] == 12
    assert node.provenance["in_channels"] == node.provenance["out_channels"] == "inferred"
    assert node.args["expand_ratio"] == 6.0 and isinstance(node.args["expand_ratio"], float)
    plan = hndl.resolve("inverted_residual(4, 1)\nconv(kernel_size=1)", input_shape=("B", 2, 3, 3),
                        output_shape=("B", 5, 3, 3))
    assert plan.nodes[1].args["in_channels"] == 4


def test_forward_draws_no_randomness_and_leaves_the_input_alone():
    model = _model("inverted_residual(4, 6)", 4, 4, (4, 4))
    block = model.nodes.n_n0
    model.eval()
    x = torch.randn(2, 4, 4, 4)
    copy = x.clone()
    before = torch.get_rng_state()
    first = model(x)
    assert torch.equal(torch.get_rng_state(), before) and torch.equal(model(x), first) and torch.equal(x, copy)
    buffers = {name: buffer.clone() for name, buffer in block.named_buffers()}
    block.train()
    spec_of(InvertedResidual).reference(block)(x)  # the reference never moves the running statistics
    assert all(torch.equal(buffer, buffers[name]) for name, buffer in block.named_buffers())


@pytest.mark.parametrize("source, c_in, c_out", [("inverted_residual(2, 2)", 2, 2),
                                                 ('inverted_residual(3, 2, activation="silu", se_ratio=0.5, '
                                                  'se_activation="silu")', 2, 3),
                                                 ('inverted_residual(2, hidden_channels=4, activation="hardswish", '
                                                  'se_channels=2, se_gate="hardsigmoid", norm_eps=0.001, '
                                                  'norm_momentum=0.01, dilation=2, layout="mobilenet_v3")', 2, 2)])
def test_gradcheck_and_gradgradcheck_in_float64(source, c_in, c_out):
    torch.manual_seed(0)
    block = _model(source, c_in, c_out, (3, 2)).nodes.n_n0.double()
    _randomize(block)
    x = torch.randn(2, c_in, 3, 2, dtype=torch.float64, requires_grad=True)
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


@pytest.mark.parametrize("args", ["4", "4, 0.5", "4, 6, 7", "4, 6, stride=3", "4, 6, stride=0", "4, 6, kernel_size=0",
                                  '4, 6, activation="tanh"', "4, 6, se_ratio=1.5", "4, 6, se_ratio=-0.1",
                                  '4, 6, se_gate="relu"', '4, 6, se_activation="sigmoid"', "4, 6, in_channels=0",
                                  "0, 6", '4, "6"', "4, True", "4, 6, hidden_channels=24",
                                  "4, hidden_channels=0", "4, 6, hidden_divisor=0", "4, 6, dilation=0",
                                  "4, 6, se_ratio=0.25, se_channels=2", "4, 6, se_channels=0",
                                  '4, 6, se_from="output"', "4, 6, se_divisor=0", "4, 6, norm_eps=0",
                                  "4, 6, norm_momentum=1.5", "4, 6, stochastic_depth_prob=1.5",
                                  '4, 6, layout="timm"', "4, hidden_channels=24, hidden_divisor=8",
                                  "4, 6, se_channels=2, se_divisor=8", '4, 6, se_channels=2, se_from="hidden"'])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"inverted_residual({args})", ("B", 4, 8, 8), ("B", 4, 8, 8)).code == "E_ARGUMENT"


@pytest.mark.parametrize("kernel", [2, 4])
def test_an_even_kernel_changes_the_spatial_size_so_the_block_has_no_skip(kernel):
    """kernel_size=2 with C_in == C_out and stride 1 used to keep the skip and fail on the first call
    (``The size of tensor a (6) must match the size of tensor b (5)``): padding (k - 1) // 2 does
    not keep H and W for an even kernel, so x cannot be added to the branch."""
    model = _model(f"inverted_residual(4, 6, kernel_size={kernel})", 4, 4, (6, 6), kernel=kernel)
    block = model.nodes.n_n0
    assert not block.residual
    x = torch.randn(2, 4, 6, 6)
    out = model(x)
    assert out.shape == (2, 4, *_out((6, 6), 1, kernel))
    torch.testing.assert_close(out, spec_of(InvertedResidual).reference(block)(x))


@pytest.mark.parametrize("args, bound", [("4, 6, kernel_size=2147483648", "2147483647"),
                                         ("4, 2147483648.0", "2147483647"), ("4, 1e300", "float32"),
                                         ("4, 6, kernel_size=9223372036854775807", "2147483647")])
def test_extents_and_ratios_beyond_their_bounds_are_argument_errors(args, bound):
    """They used to resolve, then fail in torch (``Storage size calculation overflowed``,
    ``Overflow when unpacking long long``)."""
    error = _fails(f"inverted_residual({args})", ("B", 4, 8, 8), ("B", 4, 8, 8))
    assert error.code == "E_ARGUMENT" and bound in error.message


def test_literal_channels_contradicting_the_contract_are_a_constraint_error():
    assert _fails("inverted_residual(4, 6)", ("B", 4, 8, 8), ("B", 5, 8, 8)).code == "E_CONSTRAINT"


def test_a_kernel_larger_than_the_padded_input_is_a_constraint_error():
    assert _fails("inverted_residual(4, 6, kernel_size=4)", ("B", 4, 1, 1), ("B", 4, 1, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("inverted_residual(4, 6)", shape, ("B", 4, 8, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("inverted_residual(4, 6)", ("B", 4, 4, 4), ("B", 4, 4, 4), input_dtype="int64").code == "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = _model("inverted_residual(4, 6, stride=2)", 4, 4, (2, 2), 2)
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 2, 2))
    assert error.value.code == "E_RUNTIME"
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())  # nothing ran
    assert model(torch.randn(2, 4, 2, 2)).shape == (2, 4, 1, 1)
    model.eval()
    assert model(torch.randn(1, 4, 2, 2)).shape == (1, 4, 1, 1)
