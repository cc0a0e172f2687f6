"""avg_pool1d@2: the [B, C, L] axis order, the pooling equation on the length axis (floor and
ceil mode), stride defaulting to the kernel (recorded as inferred), interval inversion of the
input length, count_include_pad (with ceil mode's divisor rule), numerics against nn.AvgPool1d
and a handwritten window mean (forward and input gradient), gradcheck/gradgradcheck in float64,
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
from hndl_ops_vision.avg_pool1d import AvgPool1d
from hndl_ops_vision.pooling1d import pool1d_relation, validate_padding1d


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _equation(extent, k, s, p):
    return (extent + 2 * p - k) // s + 1


def _window_mean(x, k, s, p, count_include_pad):
    """Average pooling written out with unfold: the sum of each window over its divisor."""
    windows = F.pad(x, (p, p)).unfold(2, k, s)  # [B, C, L_out, k]
    total = windows.sum(dim=-1)
    if count_include_pad:
        return total / k
    count = F.pad(torch.ones(1, 1, x.shape[2], dtype=x.dtype), (p, p)).unfold(2, k, s).sum(dim=-1)
    return total / count


def test_declaration_documents_the_axis_order():
    spec = spec_of(AvgPool1d)
    assert spec.alias == "avg_pool1d" and spec.qualified == "avg_pool1d@2"
    assert spec.category == "pooling"
    assert str(spec.shape) == "x[B, C, L] -> out[B, C, L_out]"
    assert "[B, C, L]" in spec.docstring and "[B, T, D]" in spec.docstring
    assert spec.positional_args == ("kernel_size",)
    for name in ("kernel_size", "stride", "padding"):
        assert spec.args[name].type is int
    assert spec.args["stride"].inferable and not spec.args["stride"].positional
    assert spec.args["padding"].default == 0 and spec.args["count_include_pad"].default is True
    assert spec.args["ceil_mode"].default is False and not spec.args["ceil_mode"].positional
    assert "dilation" not in spec.args
    assert spec.relation is pool1d_relation and spec.validate is validate_padding1d
    assert spec.reference is not None and not spec.policies
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(AvgPool1d, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_omitted_stride_equals_the_kernel_and_is_recorded_as_inferred():
    plan = hndl.resolve("avg_pool1d(2)", input_shape=("B", 4, 9), output_shape=("B", 4, 4))
    node = plan.nodes[0]
    assert node.args == {"kernel_size": 2, "stride": 2, "padding": 0, "ceil_mode": False, "count_include_pad": True}
    assert node.provenance["stride"] == "inferred" and node.provenance["count_include_pad"] == "default"


@pytest.mark.parametrize("length, k, s, p", [(16, 2, 2, 0), (9, 3, 2, 1), (11, 3, 1, 1), (10, 4, 3, 2), (6, 1, 2, 0)])
def test_the_length_axis_follows_the_pooling_equation(length, k, s, p):
    expected = _equation(length, k, s, p)
    source = f"avg_pool1d({k}, stride={s}, padding={p})"
    plan = hndl.resolve(source, input_shape=("B", 3, length), output_shape=("B", 3, expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, expected)
    model = network(source, input_shape=("B", 3, length), output_shape=("B", 3, expected), device="cpu")
    x = torch.randn(2, 3, length)
    torch.testing.assert_close(model(x), F.avg_pool1d(x, k, s, p))
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == 1:
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 3, expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, length)
    else:
        assert _fails(inverse, ("B", 2), ("B", 3, expected)).code == "E_AMBIGUOUS"
    assert _fails(source, ("B", 3, length), ("B", 3, expected + 1)).code == "E_CONSTRAINT"


def test_a_stride_one_window_fixes_the_projection_width_backward():
    plan = hndl.resolve("linear()\nreshape(6)\navg_pool1d(3, stride=1, padding=1)", input_shape=("B", 4),
                        output_shape=("B", 6, 14))
    assert plan.nodes[0].args["out_features"] == 6 * 14


def test_channels_pass_through_in_both_directions():
    plan = hndl.resolve("conv1d(kernel_size=1)\navg_pool1d(2)", input_shape=("B", 2, 8), output_shape=("B", 7, 4))
    assert plan.nodes[0].args["out_channels"] == 7
    assert _fails("avg_pool1d(2)", ("B", 4, 8), ("B", 2, 4)).code == "E_CONSTRAINT"


@pytest.mark.parametrize(
    "source, k, s, p, include",
    [("avg_pool1d(2)", 2, 2, 0, True),
     ("avg_pool1d(3, stride=2, padding=1)", 3, 2, 1, True),
     ("avg_pool1d(4, stride=1, padding=2, count_include_pad=False)", 4, 1, 2, False)],
)
def test_numerics_against_nn_avgpool1d_and_the_window_mean(source, k, s, p, include):
    reference = nn.AvgPool1d(k, s, p, count_include_pad=include)
    x = torch.randn(2, 3, 11, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    model = network(source, input_shape=("B", 3, 11), output_shape=("B", 3, expected.shape[2]), device="cpu")
    layer = model.nodes.n_n0
    out = model(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _window_mean(x.detach(), k, s, p, include))
    torch.testing.assert_close(out, spec_of(AvgPool1d).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_count_include_pad_changes_only_border_windows():
    source = "avg_pool1d(3, stride=1, padding=1, count_include_pad={})"
    contract = dict(input_shape=("B", 1, 4), output_shape=("B", 1, 4), device="cpu")
    x = torch.ones(1, 1, 4)
    included = network(source.format("True"), **contract)(x)
    excluded = network(source.format("False"), **contract)(x)
    torch.testing.assert_close(excluded, torch.ones(1, 1, 4))
    torch.testing.assert_close(included, torch.tensor([[[2 / 3, 1.0, 1.0, 2 / 3]]]))


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("avg_pool1d(3, stride=2, padding=1, count_include_pad=False)", input_shape=("B", 2, 9),
                    output_shape=("B", 2, 5), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize(
    "args",
    ["0", "-2", "2, stride=0", "2, padding=-1", "(2, 2)", "2.5", "True", "2, count_include_pad=1",
     "2, dilation=2", "2, divisor_override=3", "2, stride=(2, 2)"],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"avg_pool1d({args})", ("B", 2, 8), ("B", 2, 4)).code == "E_ARGUMENT"


def test_missing_kernel_size_is_an_argument_error():
    error = _fails("avg_pool1d()", ("B", 2, 8), ("B", 2, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "kernel_size"


@pytest.mark.parametrize("args", ["3, padding=2", "1, padding=1", "5, padding=3"])
def test_padding_above_half_the_kernel_is_an_argument_error(args):
    error = _fails(f"avg_pool1d({args})", ("B", 2, 8), ("B", 2, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"


def test_input_shorter_than_the_window_is_a_constraint_error():
    assert _fails("avg_pool1d(4)", ("B", 2, 3), ("B", 2, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8, 8)])
def test_ranks_other_than_three_are_constraint_errors(shape):
    assert _fails("avg_pool1d(2)", shape, shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('avg_pool1d(2, policy="down2")', ("B", 2, 8), ("B", 2, 4)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("avg_pool1d(2)", ("B", 2, 8), ("B", 2, 4), input_dtype="int64").code == "E_DTYPE"


def test_runtime_length_mismatch_is_a_runtime_error():
    model = network("avg_pool1d(2)", input_shape=("B", 2, 8), output_shape=("B", 2, 4), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 2, 9))
    assert error.value.code == "E_RUNTIME"


def _ceil_window_mean(x, k, s, p, count_include_pad):
    """Ceil-mode average pooling written out window by window with torch's divisor rule: each
    window is clipped to the signal plus its padding (count_include_pad divides by what remains),
    or to the signal alone (without)."""
    length = x.shape[2]
    size = -(-(length + 2 * p - k) // s) + 1
    if (size - 1) * s >= length + p:
        size -= 1
    windows = []
    for j in range(size):
        start = j * s - p
        end = min(start + k, length + p)
        real = x[:, :, max(start, 0):min(end, length)]
        windows.append(real.sum(dim=2) / ((end - start) if count_include_pad else real.shape[2]))
    return torch.stack(windows, dim=2)


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("k, s, p", [(2, 2, 0), (3, 2, 1), (3, 2, 0), (4, 3, 2), (5, 3, 1)])
def test_ceil_mode_matches_torch_over_many_lengths_with_its_divisor_rule(k, s, p, include):
    reference = nn.AvgPool1d(k, s, p, ceil_mode=True, count_include_pad=include)
    source = f"avg_pool1d({k}, stride={s}, padding={p}, ceil_mode=True, count_include_pad={include})"
    for length in range(1, 14):
        x = torch.randn(2, 3, length, requires_grad=True)
        try:
            expected = reference(x)
        except RuntimeError:  # torch: output size too small
            assert _fails(source, ("B", 3, length), ("B", 3, 1)).code == "E_CONSTRAINT"
            continue
        model = network(source, input_shape=("B", 3, length), output_shape=("B", 3, expected.shape[2]), device="cpu")
        out = model(x)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(out, _ceil_window_mean(x.detach(), k, s, p, include))
        torch.testing.assert_close(out, spec_of(AvgPool1d).reference(model.nodes.n_n0)(x))
        upstream = torch.randn_like(out)
        (grad,) = torch.autograd.grad(out, x, upstream)
        (grad_ref,) = torch.autograd.grad(expected, x, upstream)
        torch.testing.assert_close(grad, grad_ref)


def test_ceil_mode_inference_both_ways():
    plan = hndl.resolve("avg_pool1d(2, ceil_mode=True)", input_shape=("B", 4, 15), output_shape=("B", 4, 8))
    assert plan.nodes[0].args["ceil_mode"] is True and plan.nodes[0].op == "avg_pool1d@2"
    error = _fails("linear()\nreshape(4)\navg_pool1d(2, ceil_mode=True)", ("B", 2), ("B", 4, 8))
    assert error.code == "E_AMBIGUOUS" and "15..16" in error.message
    plan = hndl.resolve("linear()\nreshape(4)\navg_pool1d(3, stride=1, padding=1, ceil_mode=True)",
                        input_shape=("B", 2), output_shape=("B", 4, 8))
    assert plan.nodes[0].args["out_features"] == 32
    assert _fails("avg_pool1d(2, ceil_mode=True)", ("B", 4, 15), ("B", 4, 7)).code == "E_CONSTRAINT"


def test_ceil_mode_gradcheck_and_gradgradcheck_in_float64():
    model = network("avg_pool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)",
                    input_shape=("B", 2, 8), output_shape=("B", 2, 5), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
