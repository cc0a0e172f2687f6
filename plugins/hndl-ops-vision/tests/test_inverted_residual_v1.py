"""inverted_residual_v1 (identity inverted_residual@1, kept for saved plans): the declaration,
spatial arithmetic in both directions, channel inference, the expansion and the skip exactly
when MobileNetV2 has them, numerics against torchvision's mobilenetv2.InvertedResidual
(expand_ratio 1 and 6, stride 1 and 2) and efficientnet.MBConv (squeeze-and-excitation, SiLU,
kernel 5; version 1's keys renamed, since it registers the squeeze-and-excitation last) with
copied weights in training and evaluation mode, the declared reference, gradcheck/gradgradcheck
in float64, the harness, every error code, and tests/saved_plans/inverted_residual_v1.json
(written by version 1) restoring byte for byte."""

from pathlib import Path

import pytest
import torch
from torch import nn
from torchvision.models.efficientnet import MBConv, MBConvConfig
from torchvision.models.mobilenetv2 import InvertedResidual as TorchvisionInvertedResidual

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network, restore
from hndl_ops_vision.inverted_residual_v1 import InvertedResidualV1

#: Written by HNDL before inverted_residual became version 2: nodes "mbconv" (with a
#: squeeze-and-excitation) and "block" record inverted_residual@1.
SAVED = Path(__file__).parent / "saved_plans" / "inverted_residual_v1.json"


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


def _out(size, stride, kernel=3):
    padding = (kernel - 1) // 2
    return tuple((extent + 2 * padding - kernel) // stride + 1 for extent in size)


def _model(source, c_in, c_out, size, stride=1, kernel=3):
    return network(source, input_shape=("B", c_in, *size), output_shape=("B", c_out, *_out(size, stride, kernel)),
                   device="cpu")


def _compare_training_and_eval(model, block, reference, c_in, size, rename=lambda name: name):
    for _ in range(2):  # two training steps: the running statistics move identically
        x = torch.randn(3, c_in, *size, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(InvertedResidualV1).reference(block)(x))
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
    torch.testing.assert_close(model(x), spec_of(InvertedResidualV1).reference(block)(x))


def test_declaration():
    spec = spec_of(InvertedResidualV1)
    assert spec.alias == "inverted_residual_v1" and spec.qualified == "inverted_residual@1"
    assert spec.category == "block"
    assert spec.positional_args == ("out_channels", "expand_ratio")
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    assert spec.args["expand_ratio"].required and spec.args["expand_ratio"].min == 1
    defaults = {name: spec.args[name].default for name in ("kernel_size", "stride", "activation", "se_ratio",
                                                          "se_activation", "se_gate")}
    assert defaults == {"kernel_size": 3, "stride": 1, "activation": "relu6", "se_ratio": 0.0, "se_activation": "relu",
                        "se_gate": "sigmoid"}
    assert spec.args["stride"].max == 2
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_harness():
    check_operator(InvertedResidualV1)


@pytest.mark.parametrize("expand_ratio, stride, channels", [(1, 1, (4, 4)), (6, 1, (4, 4)), (1, 2, (4, 6)),
                                                             (6, 2, (3, 5)), (6, 1, (3, 5)), (1, 1, (4, 8))])
def test_numerics_against_torchvision_mobilenet_v2_with_copied_weights(expand_ratio, stride, channels):
    c_in, c_out = channels
    size = (6, 5)
    model = _model(f"inverted_residual_v1({c_out}, {expand_ratio}, stride={stride})", c_in, c_out, size, stride)
    block = model.nodes.n_n0
    _randomize(block)
    reference = TorchvisionInvertedResidual(c_in, c_out, stride, expand_ratio)
    assert list(block.state_dict()) == list(reference.state_dict())  # torchvision's keys, so its weights load
    reference.load_state_dict(block.state_dict())
    assert block.residual == reference.use_res_connect == (stride == 1 and c_in == c_out)
    assert block.expand == (expand_ratio != 1)
    _compare_training_and_eval(model, block, reference, c_in, size)


def test_the_hidden_width_rounds_like_torchvision():
    model = _model("inverted_residual_v1(4, 2.5)", 5, 4, (3, 3))
    block = model.nodes.n_n0
    reference = TorchvisionInvertedResidual(5, 4, 1, 2.5)
    assert block.hidden_channels == 12  # round(12.5), as torchvision's int(round(...))
    assert list(block.state_dict()) == list(reference.state_dict())
    assert [t.shape for t in block.state_dict().values()] == [t.shape for t in reference.state_dict().values()]


def _mbconv_namer(expanded):
    """Our state keys in torchvision's MBConv layout: the stages (expansion if any, depthwise)
    as block.0 ..., then the squeeze-and-excitation, then the projection conv and norm."""
    stages = 2 if expanded else 1

    def name(key):
        if key.startswith("se."):
            return f"block.{stages}.{key[3:]}"
        index, rest = key[len("conv."):].split(".", 1)
        index = int(index)
        return f"block.{index}.{rest}" if index < stages else f"block.{stages + 1}.{index - stages}.{rest}"

    return name


@pytest.mark.parametrize("expand_ratio, stride, channels, kernel", [(4, 1, (8, 8), 5), (6, 2, (8, 16), 3),
                                                                     (4, 1, (8, 16), 5), (1, 1, (8, 8), 3)])
def test_numerics_against_torchvision_mbconv_with_copied_weights(expand_ratio, stride, channels, kernel):
    c_in, c_out = channels
    size = (5, 6)
    source = (f'inverted_residual_v1({c_out}, {expand_ratio}, kernel_size={kernel}, stride={stride}, '
              'activation="silu", '
              'se_ratio=0.25, se_activation="silu")')
    model = _model(source, c_in, c_out, size, stride, kernel)
    block = model.nodes.n_n0
    _randomize(block)
    assert block.se.fc1.out_channels == c_in // 4 and block.se.fc1.in_channels == expand_ratio * c_in
    config = MBConvConfig(expand_ratio, kernel, stride, c_in, c_out, 1)
    reference = MBConv(config, stochastic_depth_prob=0.0, norm_layer=nn.BatchNorm2d)
    rename = _mbconv_namer(expand_ratio != 1)
    ours = {rename(key): value for key, value in block.state_dict().items()}
    assert set(ours) == set(reference.state_dict())
    reference.load_state_dict(ours)
    _compare_training_and_eval(model, block, reference, c_in, size, rename)


def test_squeeze_excitation_gate_and_activation_choices():
    model = _model('inverted_residual_v1(4, 3, activation="hardswish", se_ratio=0.5, se_gate="hardsigmoid")', 4, 4,
                   (3, 3))
    block = model.nodes.n_n0
    assert block.se.gate == "hardsigmoid" and block.se.activation == "relu" and block.se.fc1.out_channels == 2
    assert isinstance(block.conv[0][2], nn.Hardswish) and isinstance(block.conv[1][2], nn.Hardswish)
    _randomize(block)
    model.eval()
    x = torch.randn(2, 4, 3, 3)
    torch.testing.assert_close(model(x), spec_of(InvertedResidualV1).reference(block)(x))


@pytest.mark.parametrize("size, stride, kernel", [((7, 9), 2, 3), ((8, 8), 2, 5), ((5, 6), 1, 5), ((6, 6), 1, 4)])
def test_spatial_arithmetic_forward(size, stride, kernel):
    expected = _out(size, stride, kernel)
    source = f"inverted_residual_v1(4, 2, stride={stride}, kernel_size={kernel})"
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 4, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, *expected)
    assert _fails(source, ("B", 3, *size), ("B", 4, expected[0] + 1, expected[1])).code == "E_CONSTRAINT"


def test_spatial_inverse_exact_at_stride_one_and_an_interval_at_stride_two():
    plan = hndl.resolve("linear()\nreshape(4)\ninverted_residual_v1(8, 6)", input_shape=("B", 2),
                        output_shape=("B", 8, 5, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 5, 6) and plan.nodes[0].args["out_features"] == 120
    error = _fails("linear()\nreshape(4)\ninverted_residual_v1(8, 6, stride=2)", ("B", 2), ("B", 8, 4, 4))
    assert error.code == "E_AMBIGUOUS"


def test_channels_infer_in_both_directions():
    plan = hndl.resolve("conv(6, kernel_size=1)\ninverted_residual_v1(expand_ratio=6, stride=2)",
                        input_shape=("B", 3, 8, 8), output_shape=("B", 12, 4, 4))
    node = plan.nodes[1]
    assert node.args["in_channels"] == 6 and node.args["out_channels"] == 12
    assert node.provenance["in_channels"] == node.provenance["out_channels"] == "inferred"
    assert node.args["expand_ratio"] == 6.0 and isinstance(node.args["expand_ratio"], float)
    plan = hndl.resolve("inverted_residual_v1(4, 1)\nconv(kernel_size=1)", input_shape=("B", 2, 3, 3),
                        output_shape=("B", 5, 3, 3))
    assert plan.nodes[1].args["in_channels"] == 4


def test_forward_draws_no_randomness_and_leaves_the_input_alone():
    model = _model("inverted_residual_v1(4, 6)", 4, 4, (4, 4))
    block = model.nodes.n_n0
    model.eval()
    x = torch.randn(2, 4, 4, 4)
    copy = x.clone()
    before = torch.get_rng_state()
    first = model(x)
    assert torch.equal(torch.get_rng_state(), before) and torch.equal(model(x), first) and torch.equal(x, copy)
    buffers = {name: buffer.clone() for name, buffer in block.named_buffers()}
    block.train()
    spec_of(InvertedResidualV1).reference(block)(x)  # the reference never moves the running statistics
    assert all(torch.equal(buffer, buffers[name]) for name, buffer in block.named_buffers())


@pytest.mark.parametrize("source, c_in, c_out", [("inverted_residual_v1(2, 2)", 2, 2),
                                                 ('inverted_residual_v1(3, 2, activation="silu", se_ratio=0.5, '
                                                  'se_activation="silu")', 2, 3)])
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
                                  "0, 6", '4, "6"', "4, True"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"inverted_residual_v1({args})", ("B", 4, 8, 8), ("B", 4, 8, 8)).code == "E_ARGUMENT"


@pytest.mark.parametrize("kernel", [2, 4])
def test_an_even_kernel_changes_the_spatial_size_so_the_block_has_no_skip(kernel):
    """kernel_size=2 with C_in == C_out and stride 1 used to keep the skip and fail on the first call
    (``The size of tensor a (6) must match the size of tensor b (5)``): padding (k - 1) // 2 does
    not keep H and W for an even kernel, so x cannot be added to the branch."""
    model = _model(f"inverted_residual_v1(4, 6, kernel_size={kernel})", 4, 4, (6, 6), kernel=kernel)
    block = model.nodes.n_n0
    assert not block.residual
    x = torch.randn(2, 4, 6, 6)
    out = model(x)
    assert out.shape == (2, 4, *_out((6, 6), 1, kernel))
    torch.testing.assert_close(out, spec_of(InvertedResidualV1).reference(block)(x))


@pytest.mark.parametrize("args, bound", [("4, 6, kernel_size=2147483648", "2147483647"),
                                         ("4, 2147483648.0", "2147483647"), ("4, 1e300", "float32"),
                                         ("4, 6, kernel_size=9223372036854775807", "2147483647")])
def test_extents_and_ratios_beyond_their_bounds_are_argument_errors(args, bound):
    """They used to resolve, then fail in torch (``Storage size calculation overflowed``,
    ``Overflow when unpacking long long``)."""
    error = _fails(f"inverted_residual_v1({args})", ("B", 4, 8, 8), ("B", 4, 8, 8))
    assert error.code == "E_ARGUMENT" and bound in error.message


def test_literal_channels_contradicting_the_contract_are_a_constraint_error():
    assert _fails("inverted_residual_v1(4, 6)", ("B", 4, 8, 8), ("B", 5, 8, 8)).code == "E_CONSTRAINT"


def test_a_kernel_larger_than_the_padded_input_is_a_constraint_error():
    assert _fails("inverted_residual_v1(4, 6, kernel_size=4)", ("B", 4, 1, 1), ("B", 4, 1, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("inverted_residual_v1(4, 6)", shape, ("B", 4, 8, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("inverted_residual_v1(4, 6)", ("B", 4, 4, 4), ("B", 4, 4, 4), input_dtype="int64").code == "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = _model("inverted_residual_v1(4, 6, stride=2)", 4, 4, (2, 2), 2)
    block = model.nodes.n_n0
    before = {name: buffer.clone() for name, buffer in block.named_buffers()}
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 2, 2))
    assert error.value.code == "E_RUNTIME"
    assert all(torch.equal(buffer, before[name]) for name, buffer in block.named_buffers())  # nothing ran
    assert model(torch.randn(2, 4, 2, 2)).shape == (2, 4, 1, 1)
    model.eval()
    assert model(torch.randn(1, 4, 2, 2)).shape == (1, 4, 1, 1)


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    assert [(node.op, node.alias) for node in plan.nodes] == [("inverted_residual@1", "inverted_residual_v1")] * 2
    model = restore(text, device="cpu")
    block = model.nodes.n_mbconv
    assert type(block) is InvertedResidualV1 and block.se.fc1.out_channels == 2
    # version 1's layout: the squeeze-and-excitation is registered after the projection
    keys = list(block.state_dict())
    assert keys[-4:] == ["se.fc1.weight", "se.fc1.bias", "se.fc2.weight", "se.fc2.bias"]
    assert keys[0] == "conv.0.0.weight" and model.nodes.n_block.se is None
    _randomize(model)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    again = restore(text, device="cpu")
    again.load_state_dict(state)  # strict: a saved state dictionary of version 1 loads unchanged
    model.eval()
    again.eval()
    x = torch.randn(2, 8, 6, 6)
    torch.testing.assert_close(again(x), model(x))
    torch.testing.assert_close(block(x), spec_of(InvertedResidualV1).reference(block)(x))


def test_the_version_one_alias_resolves_to_the_saved_nodes():
    saved = ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"))
    source = saved.frontend["source"].replace("inverted_residual(", "inverted_residual_v1(")
    plan = hndl.resolve(source, input_shape=("B", 8, 6, 6), output_shape=("B", 8, 6, 6))
    for node, old in zip(plan.nodes, saved.nodes):
        assert (node.op, node.args, node.provenance) == (old.op, old.args, old.provenance)
