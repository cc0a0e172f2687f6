"""channel_shuffle@1: the channel permutation of ShuffleNet on [B, C, H, W]. Declaration, shape
inference in both directions, the divisibility constraint, numerics against torch.nn.ChannelShuffle,
torchvision's channel_shuffle and the written-out index gather (forward and input gradient),
float64 gradcheck and gradgradcheck, every error code, and the public harness."""

import pytest
import torch
from torch import nn
from torchvision.models.shufflenetv2 import channel_shuffle as torchvision_channel_shuffle

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.channel_shuffle import ChannelShuffle, shuffled_order


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(ChannelShuffle)
    assert spec.alias == "channel_shuffle" and spec.qualified == "channel_shuffle@1"
    assert spec.category == "shape" and spec.summary and spec.docstring.strip() and spec.examples
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H, W]"
    assert spec.positional_args == ("groups",) and spec.args["groups"].required
    assert spec.reference is not None and spec.relation is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(ChannelShuffle, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_the_order_interleaves_the_groups():
    assert shuffled_order(6, 2) == [0, 3, 1, 4, 2, 5]
    assert shuffled_order(6, 3) == [0, 2, 4, 1, 3, 5]
    assert shuffled_order(4, 1) == [0, 1, 2, 3] and shuffled_order(4, 4) == [0, 1, 2, 3]
    model = network("channel_shuffle(2)", input_shape=("B", 6, 1, 1), output_shape=("B", 6, 1, 1), device="cpu")
    x = torch.arange(6.0).reshape(1, 6, 1, 1)
    torch.testing.assert_close(model(x).flatten(), torch.tensor([0.0, 3.0, 1.0, 4.0, 2.0, 5.0]))


def test_shapes_infer_in_both_directions():
    plan = hndl.resolve("channel_shuffle(4)", input_shape=("B", 8, 5, 3), output_shape=("B", 8, 5, 3))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 5, 3) and plan.nodes[0].args == {"groups": 4}
    # backward: the producer's channels, and the reshape's spatial extents, come from the output contract
    plan = hndl.resolve("conv(kernel_size=1, groups=3)\nchannel_shuffle(3)", input_shape=("B", 6, 4, 4),
                        output_shape=("B", 12, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 12
    plan = hndl.resolve("linear()\nreshape(6)\nchannel_shuffle(2)", input_shape=("B", 3), output_shape=("B", 6, 2, 5))
    assert plan.nodes[1].output_shapes["out"] == ("B", 6, 2, 5) and plan.nodes[0].args["out_features"] == 60


@pytest.mark.parametrize("shape, groups", [((2, 6, 4, 5), 2), ((2, 6, 4, 5), 3), ((1, 12, 3, 3), 4),
                                           ((3, 8, 1, 7), 8), ((2, 5, 2, 2), 1)])
def test_numerics_against_torch_and_torchvision_forward_and_backward(shape, groups):
    source = f"channel_shuffle({groups})"
    contract = ("B", *shape[1:])
    model = network(source, input_shape=contract, output_shape=contract, device="cpu")
    layer = model.nodes.n_n0
    x = torch.randn(*shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = nn.ChannelShuffle(groups)(x_ref)
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, torchvision_channel_shuffle(x.detach(), groups), rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(ChannelShuffle).reference(layer)(x), rtol=0, atol=0)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=0, atol=0)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []
    assert dict(layer.state_dict()) == {}


def test_the_gradient_is_the_inverse_permutation():
    model = network("channel_shuffle(3)", input_shape=("B", 6, 1, 1), output_shape=("B", 6, 1, 1), device="cpu")
    x = torch.zeros(1, 6, 1, 1, requires_grad=True)
    upstream = torch.arange(6.0).reshape(1, 6, 1, 1)
    (model(x) * upstream).sum().backward()
    order = shuffled_order(6, 3)
    expected = torch.empty(6)
    expected[order] = torch.arange(6.0)
    torch.testing.assert_close(x.grad.flatten(), expected)


def test_float64_gradcheck_and_gradgradcheck():
    model = network("channel_shuffle(2)", input_shape=("B", 4, 2, 3), output_shape=("B", 4, 2, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 4, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize("args", ["", "0", "-2", "2.0", "True", "'2'", "2, 3", "groups=2, dim=1"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"channel_shuffle({args})", ("B", 4, 2, 2), ("B", 4, 2, 2)).code == "E_ARGUMENT"


def test_channels_not_divisible_by_groups_are_constraint_errors():
    error = _fails("channel_shuffle(3)", ("B", 8, 2, 2), ("B", 8, 2, 2))
    assert error.code == "E_CONSTRAINT" and "8 channels are not divisible by groups=3" in error.message
    # the channel count read off the output contract is checked too
    assert _fails("conv(kernel_size=1)\nchannel_shuffle(3)", ("B", 6, 2, 2), ("B", 8, 2, 2)).code == "E_CONSTRAINT"


def test_shape_changes_and_other_ranks_are_constraint_errors():
    assert _fails("channel_shuffle(2)", ("B", 4, 2, 2), ("B", 4, 2, 3)).code == "E_CONSTRAINT"
    assert _fails("channel_shuffle(2)", ("B", 4, 2, 2), ("B", 8, 2, 2)).code == "E_CONSTRAINT"
    for shape in (("B", 4), ("B", 4, 6)):
        assert _fails("channel_shuffle(2)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("channel_shuffle(2)", ("B", 4, 2, 2), ("B", 4, 2, 2), input_dtype="int64").code == "E_DTYPE"
