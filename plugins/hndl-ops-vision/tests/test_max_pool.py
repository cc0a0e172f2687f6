"""max_pool2d@1 (alias max_pool): the pooling equation per axis, stride defaulting to the
kernel (recorded as inferred), interval inversion of the input, numerics against
nn.MaxPool2d and F.max_pool2d (forward and input gradient), gradcheck/gradgradcheck in
float64 on inputs without ties, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.max_pool import MaxPool


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _equation(extent, k, s, p, d):
    return (extent + 2 * p - d * (k - 1) - 1) // s + 1


def _distinct(*shape, dtype=torch.float32):
    """Values at least 0.1 apart, in random order: no window has a tie, even under gradcheck's perturbation."""
    count = 1
    for extent in shape:
        count *= extent
    return (torch.randperm(count).to(dtype) * 0.1 - count * 0.05).reshape(shape)


def test_declaration():
    spec = spec_of(MaxPool)
    assert spec.alias == "max_pool" and spec.qualified == "max_pool2d@1"
    assert spec.category == "pooling"
    assert spec.positional_args == ("kernel_size",)
    assert spec.args["kernel_size"].required
    assert spec.args["stride"].inferable and not spec.args["stride"].positional
    assert spec.args["padding"].default == (0, 0) and spec.args["dilation"].default == (1, 1)
    assert spec.reference is not None and spec.validate is not None and spec.relation is not None
    assert all(arg.help for arg in spec.args.values())


def test_omitted_stride_equals_the_kernel_and_is_recorded_as_inferred():
    plan = hndl.resolve("max_pool((2, 3))", input_shape=("B", 4, 8, 9), output_shape=("B", 4, 4, 3))
    node = plan.nodes[0]
    assert node.args["stride"] == (2, 3) and node.provenance["stride"] == "inferred"
    assert node.args["kernel_size"] == (2, 3) and node.provenance["kernel_size"] == "explicit"
    plan = hndl.resolve("max_pool(2, stride=1)", input_shape=("B", 4, 8, 8), output_shape=("B", 4, 7, 7))
    assert plan.nodes[0].args["stride"] == (1, 1) and plan.nodes[0].provenance["stride"] == "explicit"


@pytest.mark.parametrize(
    "size, k, s, p, d",
    [
        ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1)),
        ((9, 7), (3, 3), (2, 2), (1, 1), (1, 1)),
        ((11, 10), (3, 2), (1, 3), (1, 0), (2, 1)),
        ((7, 9), (2, 4), (3, 1), (1, 2), (1, 2)),
        ((6, 5), (1, 1), (2, 1), (0, 0), (1, 1)),
    ],
)
def test_equation_per_axis_matches_torch(size, k, s, p, d):
    expected = tuple(_equation(size[j], k[j], s[j], p[j], d[j]) for j in range(2))
    source = f"max_pool({k}, stride={s}, padding={p}, dilation={d})"
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 3, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, *expected)
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 3, *expected), device="cpu")
    x = torch.randn(2, 3, *size)
    out = model(x)
    assert out.shape == (2, 3, *expected)
    torch.testing.assert_close(out, F.max_pool2d(x, k, s, p, d))
    # Backward: stride 1 on both axes fixes an omitted input; larger strides leave an interval.
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == (1, 1):
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 3, *expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, *size)
    else:
        assert _fails(inverse, ("B", 2), ("B", 3, *expected)).code == "E_AMBIGUOUS"
    for axis in range(2):
        wrong = list(expected)
        wrong[axis] += 1
        assert _fails(source, ("B", 3, *size), ("B", 3, *wrong)).code == "E_CONSTRAINT"


def test_the_inverse_interval_is_reported_and_intersected():
    error = _fails("linear()\nreshape(3)\nmax_pool(2)", ("B", 2), ("B", 3, 4, 4))
    assert error.code == "E_AMBIGUOUS" and "8..9" in error.message
    # [8, 9] from max_pool(2) and [7, 8] from a kernel-3 stride-2 padding-1 conv leave 8.
    plan = hndl.resolve(
        "linear()\nr = reshape(3)\na = max_pool(r, 2)\nb = conv(r, 3, kernel_size=3, stride=2, padding=1)\nadd(a, b)",
        input_shape=("B", 2), output_shape=("B", 3, 4, 4),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 8, 8)


def test_channels_pass_through():
    plan = hndl.resolve("conv(kernel_size=1)\nmax_pool(2)", input_shape=("B", 2, 4, 4), output_shape=("B", 5, 2, 2))
    assert plan.nodes[0].args["out_channels"] == 5
    assert _fails("max_pool(2)", ("B", 4, 8, 8), ("B", 3, 4, 4)).code == "E_CONSTRAINT"


@pytest.mark.parametrize(
    "source, kwargs",
    [("max_pool(2)", dict(kernel_size=2)),
     ("max_pool(3, stride=2, padding=1)", dict(kernel_size=3, stride=2, padding=1)),
     ("max_pool((2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1))",
      dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1)))],
)
def test_numerics_against_nn_maxpool2d_forward_and_backward(source, kwargs):
    reference = nn.MaxPool2d(**kwargs)
    x = _distinct(2, 3, 9, 8).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    model = network(source, input_shape=("B", 3, 9, 8), output_shape=("B", 3, *expected.shape[2:]), device="cpu")
    layer = model.nodes.n_n0
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(MaxPool).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_padding_never_wins_the_maximum():
    model = network("max_pool(3, stride=1, padding=1)", input_shape=("B", 1, 3, 3), output_shape=("B", 1, 3, 3),
                    device="cpu")
    x = -torch.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    out = model(x)
    assert (out < 0).all()
    assert out[0, 0, 0, 0] == -1.0 and out[0, 0, 2, 2] == -5.0


def test_gradcheck_and_gradgradcheck_in_float64_without_ties():
    model = network("max_pool(3, stride=2, padding=1)", input_shape=("B", 2, 5, 6), output_shape=("B", 2, 3, 3),
                    device="cpu")
    layer = model.nodes.n_n0.double()
    x = _distinct(2, 2, 5, 6, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize(
    "args",
    ["0", "-2", "2, stride=0", "2, stride=-1", "2, padding=-1", "2, dilation=0", "(1, 2, 3)", "2.0", "True",
     "2, stride=(2, 0)", "2, ceil_mode=True"],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"max_pool({args})", ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_missing_kernel_size_is_an_argument_error():
    error = _fails("max_pool()", ("B", 2, 8, 8), ("B", 2, 4, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "kernel_size"


@pytest.mark.parametrize("args", ["3, padding=2", "1, padding=1", "(4, 2), padding=(2, 2)"])
def test_padding_above_half_the_kernel_is_an_argument_error(args):
    error = _fails(f"max_pool({args})", ("B", 2, 8, 8), ("B", 2, 4, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"


def test_input_smaller_than_the_window_is_a_constraint_error():
    assert _fails("max_pool(5)", ("B", 2, 3, 8), ("B", 2, 1, 1)).code == "E_CONSTRAINT"
    assert _fails("max_pool(2, dilation=4)", ("B", 2, 4, 4), ("B", 2, 1, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("max_pool(2)", shape, shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('max_pool(2, policy="down2")', ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("max_pool(2)", ("B", 2, 8, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"
