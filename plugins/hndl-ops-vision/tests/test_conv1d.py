"""conv1d@2: the [B, C, L] axis order, the §6 equation on the length axis, interval
inversion, channel inference, numerics against nn.Conv1d and F.conv1d (forward and
backward), gradcheck/gradgradcheck in float64, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.conv1d import Conv1d


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _equation(extent, k, s, p, d):
    return (extent + 2 * p - d * (k - 1) - 1) // s + 1


def test_declaration_documents_the_axis_order():
    spec = spec_of(Conv1d)
    assert spec.alias == "conv1d" and spec.qualified == "conv1d@2"
    assert spec.category == "convolution"
    assert str(spec.shape) == "x[B, C_in, L] -> out[B, C_out, L_out]"
    assert "[B, C, L]" in spec.docstring and "[B, T, D]" in spec.docstring
    assert spec.positional_args == ("out_channels",)
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    assert not spec.args["kernel_size"].inferable and spec.args["kernel_size"].required
    for name in ("kernel_size", "stride", "padding", "dilation", "groups"):
        assert spec.args[name].type is int
    defaults = {name: spec.args[name].default for name in ("stride", "padding", "dilation", "groups", "bias")}
    assert defaults == {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "bias": True}
    assert not spec.policies
    assert spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


@pytest.mark.parametrize(
    "length, k, s, p, d",
    [(32, 3, 1, 1, 1), (21, 5, 2, 0, 1), (17, 3, 3, 2, 2), (9, 1, 4, 0, 1), (16, 4, 2, 1, 1), (12, 2, 1, 0, 3)],
)
def test_the_length_axis_follows_the_conv_equation(length, k, s, p, d):
    expected = _equation(length, k, s, p, d)
    source = f"conv1d(4, kernel_size={k}, stride={s}, padding={p}, dilation={d})"
    plan = hndl.resolve(source, input_shape=("B", 3, length), output_shape=("B", 4, expected))
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 4, expected)
    assert (node.args["kernel_size"], node.args["stride"], node.args["padding"], node.args["dilation"]) == (k, s, p, d)
    model = network(source, input_shape=("B", 3, length), output_shape=("B", 4, expected), device="cpu")
    assert model(torch.randn(2, 3, length)).shape == (2, 4, expected)
    # Backward: stride 1 collapses the inverse interval and fixes an omitted input length; a
    # larger stride leaves s candidate lengths and stays ambiguous.
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == 1:
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 4, expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, length)
        assert plan.nodes[0].args["out_features"] == 3 * length
    else:
        assert _fails(inverse, ("B", 2), ("B", 4, expected)).code == "E_AMBIGUOUS"
    assert _fails(source, ("B", 3, length), ("B", 4, expected + 1)).code == "E_CONSTRAINT"


def test_two_intervals_intersect_to_one_length():
    # kernel 3 / stride 2 / padding 1 admits 15 or 16 for an output of 8; kernel 2 / stride 2 admits 16 or 17.
    plan = hndl.resolve(
        "linear()\nr = reshape(3)\na = conv1d(r, 5, kernel_size=3, stride=2, padding=1)\n"
        "b = conv1d(r, 5, kernel_size=2, stride=2)\nadd(a, b)",
        input_shape=("B", 10), output_shape=("B", 5, 8),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 16)


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("conv1d(kernel_size=3)", input_shape=("B", 4, 10), output_shape=("B", 7, 8))
    node = plan.nodes[0]
    assert node.args["out_channels"] == 7 and node.provenance["out_channels"] == "inferred"
    assert node.args["in_channels"] == 4 and node.provenance["in_channels"] == "inferred"
    plan = hndl.resolve("conv1d(kernel_size=3)\nflatten()", input_shape=("B", 4, 10), output_shape=("B", 40))
    assert plan.nodes[0].args["out_channels"] == 5


@pytest.mark.parametrize(
    "source, in_shape, out_shape, kwargs",
    [
        ("conv1d(6, kernel_size=3, padding=1)", (3, 11), (6, 11), dict(kernel_size=3, padding=1)),
        ("conv1d(6, kernel_size=4, stride=2, dilation=2, groups=3, bias=False)", (3, 15), (6, 5),
         dict(kernel_size=4, stride=2, dilation=2, groups=3, bias=False)),
    ],
)
def test_numerics_against_nn_conv1d_forward_and_backward(source, in_shape, out_shape, kwargs):
    model = network(source, input_shape=("B", *in_shape), output_shape=("B", *out_shape), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.Conv1d(in_shape[0], out_shape[0], **kwargs)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(2, *in_shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(Conv1d).reference(layer)(x))
    torch.testing.assert_close(
        out, F.conv1d(x, layer.weight, layer.bias, kwargs.get("stride", 1), kwargs.get("padding", 0),
                      kwargs.get("dilation", 1), kwargs.get("groups", 1)))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
    assert (layer.bias is None) == (reference.bias is None)
    if reference.bias is not None:
        torch.testing.assert_close(layer.bias.grad, reference.bias.grad)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("conv1d(3, kernel_size=3, stride=2, padding=1)", input_shape=("B", 2, 7),
                    output_shape=("B", 3, 4), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
    weight, bias = layer.weight, layer.bias
    assert torch.autograd.gradcheck(lambda w, b: F.conv1d(x.detach(), w, b, 2, 1), (weight, bias))


@pytest.mark.parametrize(
    "args",
    ["kernel_size=0", "kernel_size=-1", "kernel_size=3, stride=0", "kernel_size=3, padding=-1",
     "kernel_size=3, dilation=0", "kernel_size=3, groups=0", "kernel_size=(3, 3)", "kernel_size=3, stride=(1, 1)",
     "kernel_size=True", "kernel_size=3, bias=1", "kernel_size=3, activation=\"relu\""],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"conv1d(4, {args})", ("B", 2, 10), ("B", 4, 8)).code == "E_ARGUMENT"


def test_missing_kernel_size_is_an_argument_error():
    error = _fails("conv1d(4)", ("B", 2, 10), ("B", 4, 10))
    assert error.code == "E_ARGUMENT" and error.location.field == "kernel_size"


def test_no_policy_is_declared():
    assert _fails('conv1d(4, policy="down2")', ("B", 2, 10), ("B", 4, 5)).code == "E_POLICY_CONFLICT"


def test_group_divisibility_of_both_channel_counts():
    assert _fails("conv1d(8, kernel_size=3, groups=2)", ("B", 3, 8), ("B", 8, 6)).code == "E_CONSTRAINT"
    assert _fails("conv1d(3, kernel_size=3, groups=2)", ("B", 4, 8), ("B", 3, 6)).code == "E_CONSTRAINT"


def test_input_shorter_than_the_kernel_is_a_constraint_error():
    assert _fails("conv1d(4, kernel_size=5)", ("B", 2, 3), ("B", 4, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8, 8)])
def test_ranks_other_than_three_are_constraint_errors(shape):
    assert _fails("conv1d(4, kernel_size=1)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    error = _fails("conv1d(3, kernel_size=1)", ("B", 2, 4), ("B", 3, 4), input_dtype="int64")
    assert error.code == "E_DTYPE"


def test_runtime_length_mismatch_is_a_runtime_error():
    model = network("conv1d(3, kernel_size=3)", input_shape=("B", 2, 8), output_shape=("B", 3, 6), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 2, 9))
    assert error.value.code == "E_RUNTIME"


# -- conv1d@2: torch's padding strings and remedies that name the fix (issue 30 item 2) ---------------
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("k, d", [(3, 1), (4, 1), (3, 3), (2, 2)])
def test_same_padding_keeps_the_length_and_computes_what_torch_computes(k, d):
    source = f'conv1d(6, kernel_size={k}, dilation={d}, padding="same")'
    model = network(source, input_shape=("B", 3, 11), output_shape=("B", 6, 11), device="cpu")
    assert model.plan.nodes[0].args["padding"] == "same"
    layer = model.nodes.n_n0
    twin = nn.Conv1d(3, 6, k, dilation=d, padding="same")
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(2, 3, 11, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    out, expected = model(x), twin(x_twin)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_twin.grad)
    torch.testing.assert_close(spec_of(Conv1d).reference(layer)(x), expected)


def test_same_padding_infers_the_length_backward_and_passes_gradcheck():
    plan = hndl.resolve('linear()\nreshape(3)\nconv1d(4, kernel_size=3, padding="same")', input_shape=("B", 2),
                        output_shape=("B", 4, 9))
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 9)
    torch.manual_seed(0)
    layer = network('conv1d(2, kernel_size=3, padding="same")', input_shape=("B", 2, 5), output_shape=("B", 2, 5),
                    device="cpu").nodes.n_n0.double()
    x = torch.randn(2, 2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,), fast_mode=True)


def test_same_padding_with_a_stride_is_an_argument_error():
    error = _fails('conv1d(4, kernel_size=5, stride=2, padding="same")', ("B", 2, 10), ("B", 4, 5))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"
    assert error.remedies[0].startswith("Give the padding as a number: padding=2 ")
    assert _fails('conv1d(4, kernel_size=3, padding="half")', ("B", 2, 10), ("B", 4, 10)).code == "E_ARGUMENT"


def test_valid_padding_is_no_padding():
    plan = hndl.resolve('conv1d(4, kernel_size=3, padding="valid")', input_shape=("B", 2, 10),
                        output_shape=("B", 4, 8))
    assert plan.nodes[0].args["padding"] == 0


def test_two_unpadded_convolutions_name_same_padding_and_the_equation():
    error = _fails("conv1d(16, kernel_size=3)\nconv1d(kernel_size=3)", ("B", 3, 32), ("B", 16, 32))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"
    assert error.message == ("conv1d: L_out = floor((30 + 2*0 - 1*(3 - 1) - 1) / 1 + 1) = 28 from input extent 30 "
                             "(kernel_size 3, stride 1, padding 0, dilation 1), but out[2] must be 32")
    assert 'padding="same"' in error.remedies[0] and "already 30, not 32" in error.remedies[0]
    assert error.remedies[1] == "Give padding=2: L_out = floor((30 + 2*2 - 1*(3 - 1) - 1) / 1 + 1) = 32."
    assert error.chain == ("node n0 (conv1d) relation: out[2] = 30", "output contract 'output' axis 2 is 32")
    fixed = 'conv1d(16, kernel_size=3, padding="same")\nconv1d(kernel_size=3, padding="same")'
    assert hndl.resolve(fixed, input_shape=("B", 3, 32), output_shape=("B", 16, 32))


def test_torch_positional_order_is_refused():
    """torch's Conv1d(4, 16, 3) is conv1d(16, kernel_size=3); conv1d(4, 16, 3) never means another thing."""
    error = _fails("conv1d(4, 16, 3)", ("B", 4, 10), ("B", 16, 8))
    assert error.code == "E_ARGUMENT" and any("kernel_size=" in remedy for remedy in error.remedies)


def test_the_public_harness_passes():
    check_operator(Conv1d)
