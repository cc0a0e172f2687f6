"""max_pool2d@2 (alias max_pool): the pooling equation per axis in floor and ceil mode, stride
defaulting to the kernel (recorded as inferred), interval inversion of the input, numerics
against nn.MaxPool2d and F.max_pool2d (forward and input gradient, ceil_mode included),
gradcheck/gradgradcheck in float64 on inputs without ties, every error code, and the public
harness."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
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
    assert spec.alias == "max_pool" and spec.qualified == "max_pool2d@2"
    assert spec.category == "pooling"
    assert spec.positional_args == ("kernel_size",)
    assert spec.args["kernel_size"].required
    assert spec.args["stride"].inferable and not spec.args["stride"].positional
    assert spec.args["padding"].default == (0, 0) and spec.args["dilation"].default == (1, 1)
    assert spec.args["ceil_mode"].default is False and not spec.args["ceil_mode"].positional
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
     "2, stride=(2, 0)", "2, ceil_mode=1", "2, ceil_mode='yes'", "2, return_indices=True"],
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


def test_the_public_harness_passes():
    check_operator(MaxPool, registry=Registry.from_packs("basic", "vision", "transformer"))


def _ceil_equation(extent, k, s, p, d):
    """torch's ceil-mode steps, as pooling_output_shape writes them: round up, then drop a last
    window that would start in the right padding."""
    size = -(-(extent + 2 * p - d * (k - 1) - 1) // s) + 1
    if (size - 1) * s >= extent + p:
        size -= 1
    return size


def test_ceil_mode_is_recorded_and_defaults_to_floor():
    plan = hndl.resolve("max_pool(3, stride=2)", input_shape=("B", 4, 112, 112), output_shape=("B", 4, 55, 55))
    node = plan.nodes[0]
    assert node.args["ceil_mode"] is False and node.provenance["ceil_mode"] == "default"
    plan = hndl.resolve("max_pool(3, stride=2, ceil_mode=True)", input_shape=("B", 4, 112, 112),
                        output_shape=("B", 4, 56, 56))
    assert plan.nodes[0].args["ceil_mode"] is True and plan.nodes[0].provenance["ceil_mode"] == "explicit"
    assert plan.nodes[0].op == "max_pool2d@2"


def test_ceil_mode_extents_match_torch_over_many_sizes():
    """Every (H, W) from 1 to 13 against torch's own output size, with per-axis windows that
    include GoogLeNet's 3x3 stride 2 and windows hanging past the padding."""
    windows = [((3, 3), (2, 2), (0, 0), (1, 1)), ((3, 2), (2, 3), (1, 1), (1, 1)), ((2, 4), (3, 2), (1, 2), (1, 2)),
               ((1, 3), (2, 1), (0, 1), (1, 2)), ((4, 3), (3, 3), (2, 0), (2, 1))]
    checked = 0
    for k, s, p, d in windows:
        layer = nn.MaxPool2d(k, s, p, d, ceil_mode=True)
        for size in [(h, w) for h in range(1, 14) for w in (h, 14 - h)]:
            try:
                expected = tuple(layer(torch.zeros(1, 1, *size)).shape[2:])
            except RuntimeError:  # torch: output size too small
                expected = None
            source = f"max_pool({k}, stride={s}, padding={p}, dilation={d}, ceil_mode=True)\nadaptive_avg_pool(1)"
            if expected is None:
                assert _fails(source, ("B", 1, *size), ("B", 1, 1, 1)).code == "E_CONSTRAINT", (k, s, p, d, size)
                continue
            assert expected == tuple(_ceil_equation(size[j], k[j], s[j], p[j], d[j]) for j in range(2))
            plan = hndl.resolve(source, input_shape=("B", 1, *size), output_shape=("B", 1, 1, 1))
            assert plan.nodes[0].output_shapes["out"] == ("B", 1, *expected), (k, s, p, d, size)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "size, kwargs",
    [((54, 27), dict(kernel_size=3, stride=2)),  # SqueezeNet 1.0's second pool: 54 -> 27 (floor mode: 26)
     ((14, 9), dict(kernel_size=3, stride=2)),
     ((10, 11), dict(kernel_size=3, stride=2, padding=1)),
     ((9, 8), dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 1), dilation=(2, 1))),
     ((5, 7), dict(kernel_size=2, stride=2))],
)
def test_ceil_mode_numerics_against_nn_maxpool2d_forward_and_backward(size, kwargs):
    reference = nn.MaxPool2d(**kwargs, ceil_mode=True)
    x = _distinct(2, 3, *size).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    source = "max_pool(" + ", ".join(f"{name}={value}" for name, value in kwargs.items()) + ", ceil_mode=True)"
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 3, *expected.shape[2:]), device="cpu")
    layer = model.nodes.n_n0
    assert layer.ceil_mode is True
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(MaxPool).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_ceil_mode_keeps_the_last_partial_window():
    model = network("max_pool(2, ceil_mode=True)", input_shape=("B", 1, 3, 3), output_shape=("B", 1, 2, 2),
                    device="cpu")
    x = torch.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    torch.testing.assert_close(model(x), torch.tensor([[[[5.0, 6.0], [8.0, 9.0]]]]))
    # an input smaller than the kernel still gives one window, which starts inside it
    one = network("max_pool(2, ceil_mode=True)", input_shape=("B", 1, 1, 1), output_shape=("B", 1, 1, 1), device="cpu")
    torch.testing.assert_close(one(torch.full((2, 1, 1, 1), -3.0)), torch.full((2, 1, 1, 1), -3.0))


def test_ceil_mode_backward_inference():
    # GoogLeNet's 3x3 stride-2 ceil pool: 56 comes from 112 or 113 (floor mode: 113 or 114).
    error = _fails("linear()\nreshape(3)\nmax_pool(3, stride=2, ceil_mode=True)", ("B", 2), ("B", 3, 56, 56))
    assert error.code == "E_AMBIGUOUS" and "112..113" in error.message
    error = _fails("linear()\nreshape(3)\nmax_pool(3, stride=2)", ("B", 2), ("B", 3, 56, 56))
    assert error.code == "E_AMBIGUOUS" and "113..114" in error.message
    # both branches together leave one input: 113
    plan = hndl.resolve(
        "linear()\nr = reshape(3)\na = max_pool(r, 3, stride=2, ceil_mode=True)\n"
        "b = max_pool(r, 3, stride=2)\nadd(a, b)",
        input_shape=("B", 2), output_shape=("B", 3, 56, 56),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 113, 113)
    # stride 1: ceil and floor agree, and the output fixes the input
    plan = hndl.resolve("linear()\nreshape(3)\nmax_pool(3, stride=1, padding=1, ceil_mode=True)", input_shape=("B", 2),
                        output_shape=("B", 3, 7, 5))
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 7, 5)


def test_ceil_mode_contract_errors():
    # 112 gives 56 in ceil mode: 55 and 57 contradict
    for wrong in (55, 57):
        assert _fails("max_pool(3, stride=2, ceil_mode=True)", ("B", 2, 112, 112),
                      ("B", 2, 56, wrong)).code == "E_CONSTRAINT"
    # a 1x1 input: no 3-wide stride-2 window starts inside it with a valid output in torch
    error = _fails("max_pool(3, stride=2, ceil_mode=True)", ("B", 2, 1, 1), ("B", 2, 1, 1))
    assert error.code == "E_CONSTRAINT" and "ceil mode" in error.message
    # no positive input gives output 1 through a stride-1, padding-1 window of 2
    assert _fails("linear()\nreshape(3)\nmax_pool(2, stride=1, padding=1, ceil_mode=True)", ("B", 2),
                  ("B", 3, 1, 1)).code == "E_CONSTRAINT"


def test_ceil_mode_gradcheck_and_gradgradcheck_in_float64_without_ties():
    model = network("max_pool(3, stride=2, ceil_mode=True)", input_shape=("B", 2, 6, 5), output_shape=("B", 2, 3, 2),
                    device="cpu")
    layer = model.nodes.n_n0.double()
    x = _distinct(1, 2, 6, 5, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
