"""avg_pool2d@2 (alias avg_pool): the pooling equation per axis in floor and ceil mode, stride
defaulting to the kernel (recorded as inferred), interval inversion of the input,
count_include_pad (with ceil mode's divisor rule), numerics against nn.AvgPool2d and a
handwritten window mean (forward and input gradient), gradcheck/gradgradcheck in float64,
every error code, and the public harness."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.avg_pool import AvgPool


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _equation(extent, k, s, p):
    return (extent + 2 * p - k) // s + 1


def _window_mean(x, k, s, p, count_include_pad):
    """Average pooling written out with unfold: the sum of each window over its divisor."""
    b, c, h, w = x.shape
    padded = F.pad(x, (p[1], p[1], p[0], p[0]))
    windows = padded.unfold(2, k[0], s[0]).unfold(3, k[1], s[1])  # [B, C, H_out, W_out, k0, k1]
    total = windows.sum(dim=(-2, -1))
    if count_include_pad:
        return total / (k[0] * k[1])
    ones = F.pad(torch.ones(1, 1, h, w, dtype=x.dtype), (p[1], p[1], p[0], p[0]))
    count = ones.unfold(2, k[0], s[0]).unfold(3, k[1], s[1]).sum(dim=(-2, -1))
    return total / count


def test_declaration():
    spec = spec_of(AvgPool)
    assert spec.alias == "avg_pool" and spec.qualified == "avg_pool2d@2"
    assert spec.category == "pooling"
    assert spec.positional_args == ("kernel_size",)
    assert spec.args["stride"].inferable and spec.args["count_include_pad"].default is True
    assert spec.args["ceil_mode"].default is False and not spec.args["ceil_mode"].positional
    assert "dilation" not in spec.args
    assert spec.reference is not None and spec.validate is not None
    assert all(arg.help for arg in spec.args.values())


def test_omitted_stride_equals_the_kernel_and_is_recorded_as_inferred():
    plan = hndl.resolve("avg_pool(2)", input_shape=("B", 4, 8, 9), output_shape=("B", 4, 4, 4))
    node = plan.nodes[0]
    assert node.args["stride"] == (2, 2) and node.provenance["stride"] == "inferred"
    assert node.args["count_include_pad"] is True and node.provenance["count_include_pad"] == "default"


@pytest.mark.parametrize(
    "size, k, s, p",
    [((8, 8), (2, 2), (2, 2), (0, 0)), ((9, 7), (3, 3), (2, 2), (1, 1)), ((11, 10), (3, 2), (1, 3), (1, 0)),
     ((7, 9), (4, 2), (3, 1), (2, 1)), ((5, 6), (1, 1), (1, 2), (0, 0))],
)
def test_equation_per_axis_matches_torch(size, k, s, p):
    expected = tuple(_equation(size[j], k[j], s[j], p[j]) for j in range(2))
    source = f"avg_pool({k}, stride={s}, padding={p})"
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 3, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, *expected)
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 3, *expected), device="cpu")
    assert model(torch.randn(2, 3, *size)).shape == (2, 3, *expected)
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == (1, 1):
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 3, *expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, *size)
    else:
        assert _fails(inverse, ("B", 2), ("B", 3, *expected)).code == "E_AMBIGUOUS"
    for axis in range(2):
        wrong = list(expected)
        wrong[axis] -= 1
        assert _fails(source, ("B", 3, *size), ("B", 3, *wrong)).code == "E_CONSTRAINT"


def test_the_lenet_stage_infers_its_input_from_a_collapsed_interval():
    # stride 1 3x3 average with padding 1 keeps 14 x 14; the projection width follows.
    plan = hndl.resolve("linear()\nreshape(6)\navg_pool(3, stride=1, padding=1)", input_shape=("B", 4),
                        output_shape=("B", 6, 14, 14))
    assert plan.nodes[0].args["out_features"] == 6 * 14 * 14


@pytest.mark.parametrize(
    "source, k, s, p, include",
    [("avg_pool(2)", (2, 2), (2, 2), (0, 0), True),
     ("avg_pool(3, stride=2, padding=1)", (3, 3), (2, 2), (1, 1), True),
     ("avg_pool((3, 2), stride=(1, 2), padding=(1, 1), count_include_pad=False)", (3, 2), (1, 2), (1, 1), False)],
)
def test_numerics_against_nn_avgpool2d_and_the_window_mean(source, k, s, p, include):
    reference = nn.AvgPool2d(k, s, p, count_include_pad=include)
    x = torch.randn(2, 3, 9, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    model = network(source, input_shape=("B", 3, 9, 8), output_shape=("B", 3, *expected.shape[2:]), device="cpu")
    layer = model.nodes.n_n0
    out = model(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _window_mean(x.detach(), k, s, p, include))
    torch.testing.assert_close(out, spec_of(AvgPool).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_count_include_pad_changes_only_border_windows():
    source = "avg_pool(3, stride=1, padding=1, count_include_pad={})"
    contract = dict(input_shape=("B", 1, 3, 3), output_shape=("B", 1, 3, 3), device="cpu")
    x = torch.ones(1, 1, 3, 3)
    included = network(source.format("True"), **contract)(x)
    excluded = network(source.format("False"), **contract)(x)
    torch.testing.assert_close(excluded, torch.ones(1, 1, 3, 3))
    assert included[0, 0, 1, 1] == 1.0 and included[0, 0, 0, 0] == pytest.approx(4 / 9)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("avg_pool(3, stride=2, padding=1, count_include_pad=False)", input_shape=("B", 2, 5, 6),
                    output_shape=("B", 2, 3, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize(
    "args",
    ["0", "-2", "2, stride=0", "2, padding=-1", "(1, 2, 3)", "2.5", "True", "2, count_include_pad=1",
     "2, dilation=2", "2, divisor_override=3", "2, ceil_mode=0"],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"avg_pool({args})", ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_missing_kernel_size_is_an_argument_error():
    assert _fails("avg_pool()", ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


@pytest.mark.parametrize("args", ["3, padding=2", "1, padding=1", "(2, 5), padding=(1, 3)"])
def test_padding_above_half_the_kernel_is_an_argument_error(args):
    error = _fails(f"avg_pool({args})", ("B", 2, 8, 8), ("B", 2, 4, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"


def test_input_smaller_than_the_window_is_a_constraint_error():
    assert _fails("avg_pool(4)", ("B", 2, 8, 3), ("B", 2, 2, 1)).code == "E_CONSTRAINT"


def test_channel_change_and_rank_are_constraint_errors():
    assert _fails("avg_pool(2)", ("B", 4, 8, 8), ("B", 2, 4, 4)).code == "E_CONSTRAINT"
    assert _fails("avg_pool(2)", ("B", 4, 8), ("B", 4, 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("avg_pool(2)", ("B", 2, 8, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"


def test_the_public_harness_passes():
    check_operator(AvgPool, registry=Registry.from_packs("basic", "vision", "transformer"))


def _ceil_equation(extent, k, s, p):
    """torch's ceil-mode steps: round up, then drop a last window that would start in the right padding."""
    size = -(-(extent + 2 * p - k) // s) + 1
    if (size - 1) * s >= extent + p:
        size -= 1
    return size


def _ceil_window_mean(x, k, s, p, count_include_pad):
    """Ceil-mode average pooling written out window by window, with torch's divisor rule: a window
    is clipped to the input plus its padding, so with count_include_pad it divides by the
    positions it covers there (never those past the right padding), without by its real elements."""
    height, width = x.shape[2:]
    out_size = (_ceil_equation(height, k[0], s[0], p[0]), _ceil_equation(width, k[1], s[1], p[1]))
    out = x.new_empty(*x.shape[:2], *out_size)
    for i in range(out_size[0]):
        top = i * s[0] - p[0]
        bottom = min(top + k[0], height + p[0])
        for j in range(out_size[1]):
            left = j * s[1] - p[1]
            right = min(left + k[1], width + p[1])
            real = x[:, :, max(top, 0):min(bottom, height), max(left, 0):min(right, width)]
            divisor = (bottom - top) * (right - left) if count_include_pad else real.shape[2] * real.shape[3]
            out[:, :, i, j] = real.sum(dim=(2, 3)) / divisor
    return out


def test_ceil_mode_is_recorded_and_defaults_to_floor():
    plan = hndl.resolve("avg_pool(2)", input_shape=("B", 4, 9, 9), output_shape=("B", 4, 4, 4))
    assert plan.nodes[0].args["ceil_mode"] is False and plan.nodes[0].provenance["ceil_mode"] == "default"
    plan = hndl.resolve("avg_pool(2, ceil_mode=True)", input_shape=("B", 4, 9, 9), output_shape=("B", 4, 5, 5))
    node = plan.nodes[0]
    assert node.op == "avg_pool2d@2" and node.args["ceil_mode"] is True and node.provenance["ceil_mode"] == "explicit"


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize(
    "k, s, p",
    [((3, 3), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((2, 3), (2, 3), (1, 1)), ((4, 2), (3, 2), (2, 0)),
     ((1, 2), (2, 1), (0, 1))],
)
def test_ceil_mode_matches_torch_over_many_sizes_with_its_divisor_rule(k, s, p, include):
    """Every (H, W) from 1 to 10 against nn.AvgPool2d(ceil_mode=True): the resolved extents (or
    E_CONSTRAINT where torch has no output), the values, and the written-out window mean."""
    reference = nn.AvgPool2d(k, s, p, ceil_mode=True, count_include_pad=include)
    source = f"avg_pool({k}, stride={s}, padding={p}, ceil_mode=True, count_include_pad={include})"
    for height in range(1, 11):
        size = (height, 11 - height)
        x = torch.randn(1, 2, *size)
        try:
            expected = reference(x)
        except RuntimeError:  # torch: output size too small
            assert _fails(source + "\nadaptive_avg_pool(1)", ("B", 2, *size), ("B", 2, 1, 1)).code == "E_CONSTRAINT"
            continue
        plan = hndl.resolve(source + "\nadaptive_avg_pool(1)", input_shape=("B", 2, *size), output_shape=("B", 2, 1, 1))
        assert plan.nodes[0].output_shapes["out"] == ("B", 2, *expected.shape[2:]), size
        model = network(source, input_shape=("B", 2, *size), output_shape=("B", 2, *expected.shape[2:]), device="cpu")
        out = model(x)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, _ceil_window_mean(x, k, s, p, include))
        torch.testing.assert_close(out, spec_of(AvgPool).reference(model.nodes.n_n0)(x))


@pytest.mark.parametrize("include", [True, False])
def test_ceil_mode_gradient_against_nn_avgpool2d(include):
    reference = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=include)
    x = torch.randn(2, 3, 8, 7, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    source = f"avg_pool(3, stride=2, padding=1, ceil_mode=True, count_include_pad={include})"
    model = network(source, input_shape=("B", 3, 8, 7), output_shape=("B", 3, 5, 4), device="cpu")
    out = model(x)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_ceil_mode_divides_the_last_window_as_torch_does():
    # 8 -> 5 with a 3-wide stride-2 window and padding 1: the last window covers one real row,
    # one padding row and one row past the padding, so it divides by 2 per axis, not 3.
    contract = dict(input_shape=("B", 1, 8, 8), output_shape=("B", 1, 5, 5), device="cpu")
    x = torch.ones(1, 1, 8, 8)
    included = network("avg_pool(3, stride=2, padding=1, ceil_mode=True)", **contract)(x)
    excluded = network("avg_pool(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)", **contract)(x)
    assert included[0, 0, 4, 4] == pytest.approx(1 / 4) and included[0, 0, 2, 4] == pytest.approx(1 / 2)
    assert included[0, 0, 0, 0] == pytest.approx(4 / 9) and included[0, 0, 2, 2] == 1.0
    torch.testing.assert_close(excluded, torch.ones(1, 1, 5, 5))


def test_ceil_mode_backward_inference():
    error = _fails("linear()\nreshape(3)\navg_pool(2, ceil_mode=True)", ("B", 2), ("B", 3, 4, 4))
    assert error.code == "E_AMBIGUOUS" and "7..8" in error.message  # floor mode: 8..9
    plan = hndl.resolve("linear()\nr = reshape(3)\na = avg_pool(r, 2, ceil_mode=True)\nb = avg_pool(r, 2)\nadd(a, b)",
                        input_shape=("B", 2), output_shape=("B", 3, 4, 4))
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 8, 8)
    plan = hndl.resolve("linear()\nreshape(3)\navg_pool(3, stride=1, padding=1, ceil_mode=True)", input_shape=("B", 2),
                        output_shape=("B", 3, 6, 9))
    assert plan.nodes[0].args["out_features"] == 3 * 6 * 9


def test_ceil_mode_contract_errors():
    assert _fails("avg_pool(2, ceil_mode=True)", ("B", 2, 9, 9), ("B", 2, 4, 5)).code == "E_CONSTRAINT"
    assert _fails("avg_pool(3, stride=2, ceil_mode=True)", ("B", 2, 1, 5), ("B", 2, 1, 2)).code == "E_CONSTRAINT"


def test_ceil_mode_gradcheck_and_gradgradcheck_in_float64():
    model = network("avg_pool(3, stride=2, padding=1, ceil_mode=True)", input_shape=("B", 2, 6, 5),
                    output_shape=("B", 2, 4, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(1, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
