"""squeeze_excitation@1: the declaration, the squeeze width from reduction or squeeze_channels,
channels inferred in both directions, numerics against torchvision.ops.SqueezeExcitation with
copied weights (forward, input and parameter gradients), the declared reference,
gradcheck/gradgradcheck in float64, the harness, and every error code."""

import pytest
import torch
from torch import nn
from torchvision.ops import SqueezeExcitation as TorchvisionSE

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.squeeze_excitation import SqueezeExcitation

TORCHVISION_ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish}
TORCHVISION_GATES = {"sigmoid": nn.Sigmoid, "hardsigmoid": nn.Hardsigmoid}


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _block(source, channels, size=(4, 3)):
    shape = ("B", channels, *size)
    return network(source, input_shape=shape, output_shape=shape, device="cpu").nodes.n_n0


def test_declaration():
    spec = spec_of(SqueezeExcitation)
    assert spec.alias == "squeeze_excitation" and spec.qualified == "squeeze_excitation@1"
    assert spec.category == "block"
    assert spec.positional_args == ()
    assert spec.args["reduction"].default is None and spec.args["squeeze_channels"].inferable
    assert spec.args["activation"].default == "relu" and spec.args["gate"].default == "sigmoid"
    assert set(spec.args["activation"].choices) == {"relu", "relu6", "silu", "hardswish"}
    assert set(spec.args["gate"].choices) == {"sigmoid", "hardsigmoid"}
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())
    assert "broadcast" in spec.docstring


def test_the_harness():
    check_operator(SqueezeExcitation)


@pytest.mark.parametrize("channels, reduction, expected", [(16, 4, 4), (16, 16, 1), (6, 4, 1), (3, 16, 1), (10, 3, 3)])
def test_squeeze_width_from_reduction(channels, reduction, expected):
    plan = hndl.resolve(f"squeeze_excitation(reduction={reduction})", input_shape=("B", channels, 2, 2),
                        output_shape=("B", channels, 2, 2))
    node = plan.nodes[0]
    assert node.args["squeeze_channels"] == expected and node.provenance["squeeze_channels"] == "inferred"
    assert node.args["reduction"] == reduction and node.provenance["reduction"] == "explicit"


def test_explicit_squeeze_channels_and_agreeing_reduction():
    plan = hndl.resolve("squeeze_excitation(squeeze_channels=5)", input_shape=("B", 8, 2, 2),
                        output_shape=("B", 8, 2, 2))
    assert plan.nodes[0].args["squeeze_channels"] == 5 and plan.nodes[0].args["reduction"] is None
    plan = hndl.resolve("squeeze_excitation(reduction=2, squeeze_channels=4)", input_shape=("B", 8, 2, 2),
                        output_shape=("B", 8, 2, 2))
    assert plan.nodes[0].provenance["squeeze_channels"] == "explicit"


def test_channels_infer_backward_from_the_output_contract():
    plan = hndl.resolve("conv(kernel_size=1)\nsqueeze_excitation(reduction=4)", input_shape=("B", 3, 5, 5),
                        output_shape=("B", 16, 5, 5))
    assert plan.nodes[0].args["out_channels"] == 16 and plan.nodes[0].provenance["out_channels"] == "inferred"
    assert plan.nodes[1].args["squeeze_channels"] == 4
    # and forward, from the producer into a consumer that infers its own input width
    plan = hndl.resolve("squeeze_excitation(reduction=2)\nconv(kernel_size=1)", input_shape=("B", 6, 3, 3),
                        output_shape=("B", 2, 3, 3))
    assert plan.nodes[1].args["in_channels"] == 6 and plan.nodes[0].args["squeeze_channels"] == 3


def test_state_matches_torchvision():
    block = _block("squeeze_excitation(reduction=4)", 8)
    reference = TorchvisionSE(8, 2)
    assert list(block.state_dict()) == list(reference.state_dict()) == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                                        "fc2.bias"]
    assert [tuple(t.shape) for t in block.state_dict().values()] == \
        [tuple(t.shape) for t in reference.state_dict().values()]


def test_printing_names_the_activation_and_the_gate():
    block = _block('squeeze_excitation(squeeze_channels=8, gate="hardsigmoid")', 16)
    assert "activation='relu', gate='hardsigmoid'" in repr(block)


@pytest.mark.parametrize("activation, gate", [("relu", "sigmoid"), ("silu", "sigmoid"), ("relu", "hardsigmoid"),
                                              ("hardswish", "hardsigmoid"), ("relu6", "sigmoid")])
def test_numerics_against_torchvision_with_copied_weights(activation, gate):
    block = _block(f'squeeze_excitation(squeeze_channels=3, activation="{activation}", gate="{gate}")', 6, (5, 4))
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(0, 0.7)  # wide enough that the hard gate saturates somewhere
    reference = TorchvisionSE(6, 3, activation=TORCHVISION_ACTIVATIONS[activation],
                              scale_activation=TORCHVISION_GATES[gate])
    reference.load_state_dict(block.state_dict())
    for training in (False, True):
        block.train(training)
        reference.train(training)
        x = torch.randn(3, 6, 5, 4, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = block(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, spec_of(SqueezeExcitation).reference(block)(x))
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        for (name, ours), theirs in zip(block.named_parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, msg=name)
            ours.grad, theirs.grad = None, None


def test_examples_stay_independent_and_the_input_is_untouched():
    block = _block("squeeze_excitation(reduction=2)", 4)
    x = torch.randn(3, 4, 4, 3)
    copy = x.clone()
    out = block(x)
    assert torch.equal(x, copy)
    torch.testing.assert_close(out[1:2], block(x[1:2]))  # one example's gate depends on that example only
    before = torch.get_rng_state()
    assert torch.equal(block(x), out)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("activation, gate", [("silu", "sigmoid"), ("relu", "hardsigmoid")])
def test_gradcheck_and_gradgradcheck_in_float64(activation, gate):
    torch.manual_seed(0)
    block = _block(f'squeeze_excitation(squeeze_channels=2, activation="{activation}", gate="{gate}")', 3,
                   (3, 2)).double()
    x = torch.randn(2, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    assert torch.autograd.gradgradcheck(block, (x,))
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in block.named_parameters())

    def through(*values):
        return torch.func.functional_call(block, dict(zip(names, values)), (x.detach(),))

    assert torch.autograd.gradcheck(through, params)


@pytest.mark.parametrize("args", ["", "4", "reduction=0", "squeeze_channels=0", "reduction=1.5", "reduction=True",
                                  'activation="tanh"', 'gate="relu"', "reduction=4, gate=1", "reduction=None",
                                  "squeeze_channels=None"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"squeeze_excitation({args})", ("B", 8, 4, 4), ("B", 8, 4, 4)).code == "E_ARGUMENT"


def test_disagreeing_reduction_and_squeeze_channels_are_a_constraint_error():
    error = _fails("squeeze_excitation(reduction=4, squeeze_channels=3)", ("B", 16, 4, 4), ("B", 16, 4, 4))
    assert error.code == "E_CONSTRAINT" and "squeeze_channels" in error.message


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("squeeze_excitation(reduction=2)", shape, shape).code == "E_CONSTRAINT"


def test_changing_the_channels_is_a_constraint_error():
    assert _fails("squeeze_excitation(reduction=2)", ("B", 8, 4, 4), ("B", 4, 4, 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("squeeze_excitation(reduction=2)", ("B", 4, 4, 4), ("B", 4, 4, 4), input_dtype="int64").code == \
        "E_DTYPE"


def test_runtime_channel_mismatch_is_a_runtime_error():
    model = network("squeeze_excitation(reduction=2)", input_shape=("B", 4, 3, 3), output_shape=("B", 4, 3, 3),
                    device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 5, 3, 3))
    assert error.value.code == "E_RUNTIME"
