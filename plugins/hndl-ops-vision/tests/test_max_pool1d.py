"""max_pool1d@2: the [B, C, L] axis order, the pooling equation on the length axis in floor
mode (shared with max_pool and conv1d) and ceil mode (shared with max_pool), stride defaulting
to the kernel (recorded as inferred), interval inversion of the input length, numerics against
nn.MaxPool1d and F.max_pool1d (forward and input gradient, ceil_mode included),
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
from hndl_ops_vision.max_pool1d import MaxPool1d
from hndl_ops_vision.pooling1d import pool1d_relation, validate_padding1d


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


def test_declaration_documents_the_axis_order():
    spec = spec_of(MaxPool1d)
    assert spec.alias == "max_pool1d" and spec.qualified == "max_pool1d@2"
    assert spec.category == "pooling"
    assert str(spec.shape) == "x[B, C, L] -> out[B, C, L_out]"
    assert "[B, C, L]" in spec.docstring and "[B, T, D]" in spec.docstring and "[B, C, L]" in spec.shape_text
    assert spec.positional_args == ("kernel_size",)
    assert spec.args["kernel_size"].required
    for name in ("kernel_size", "stride", "padding", "dilation"):
        assert spec.args[name].type is int
    assert spec.args["stride"].inferable and not spec.args["stride"].positional
    assert spec.args["padding"].default == 0 and spec.args["dilation"].default == 1
    assert spec.args["ceil_mode"].default is False and not spec.args["ceil_mode"].positional
    assert spec.relation is pool1d_relation and spec.validate is validate_padding1d
    assert spec.reference is not None and not spec.policies
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(MaxPool1d, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_omitted_stride_equals_the_kernel_and_is_recorded_as_inferred():
    plan = hndl.resolve("max_pool1d(3)", input_shape=("B", 4, 10), output_shape=("B", 4, 3))
    node = plan.nodes[0]
    assert node.args == {"kernel_size": 3, "stride": 3, "padding": 0, "dilation": 1, "ceil_mode": False}
    assert node.provenance["stride"] == "inferred" and node.provenance["kernel_size"] == "explicit"
    plan = hndl.resolve("max_pool1d(2, stride=1)", input_shape=("B", 4, 8), output_shape=("B", 4, 7))
    assert plan.nodes[0].args["stride"] == 1 and plan.nodes[0].provenance["stride"] == "explicit"


@pytest.mark.parametrize(
    "length, k, s, p, d",
    [(16, 2, 2, 0, 1), (9, 3, 2, 1, 1), (11, 3, 1, 1, 2), (10, 4, 3, 2, 1), (7, 1, 2, 0, 1), (13, 2, 1, 0, 3)],
)
def test_the_length_axis_follows_the_pooling_equation(length, k, s, p, d):
    expected = _equation(length, k, s, p, d)
    source = f"max_pool1d({k}, stride={s}, padding={p}, dilation={d})"
    plan = hndl.resolve(source, input_shape=("B", 3, length), output_shape=("B", 3, expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, expected)
    model = network(source, input_shape=("B", 3, length), output_shape=("B", 3, expected), device="cpu")
    x = torch.randn(2, 3, length)
    out = model(x)
    assert out.shape == (2, 3, expected)
    torch.testing.assert_close(out, F.max_pool1d(x, k, s, p, d))
    # Backward: stride 1 collapses the inverse interval and fixes an omitted input length;
    # a larger stride leaves s candidate lengths and stays ambiguous.
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == 1:
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 3, expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, length)
        assert plan.nodes[0].args["out_features"] == 3 * length
    else:
        assert _fails(inverse, ("B", 2), ("B", 3, expected)).code == "E_AMBIGUOUS"
    assert _fails(source, ("B", 3, length), ("B", 3, expected + 1)).code == "E_CONSTRAINT"


def test_the_inverse_interval_is_reported_and_intersected():
    error = _fails("linear()\nreshape(3)\nmax_pool1d(2)", ("B", 2), ("B", 3, 4))
    assert error.code == "E_AMBIGUOUS" and "8..9" in error.message
    # [8, 9] from max_pool1d(2) and [7, 8] from a kernel-3 stride-2 padding-1 conv1d leave 8.
    plan = hndl.resolve(
        "linear()\nr = reshape(3)\na = max_pool1d(r, 2)\nb = conv1d(r, 3, kernel_size=3, stride=2, padding=1)\n"
        "add(a, b)",
        input_shape=("B", 2), output_shape=("B", 3, 4),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 8)
    assert plan.nodes[0].args["out_features"] == 24


def test_channels_pass_through_in_both_directions():
    plan = hndl.resolve("conv1d(kernel_size=1)\nmax_pool1d(2)", input_shape=("B", 2, 8), output_shape=("B", 5, 4))
    assert plan.nodes[0].args["out_channels"] == 5
    plan = hndl.resolve("max_pool1d(2)\nflatten()", input_shape=("B", 6, 8), output_shape=("B", 24))
    assert plan.nodes[0].output_shapes["out"] == ("B", 6, 4)
    assert _fails("max_pool1d(2)", ("B", 4, 8), ("B", 3, 4)).code == "E_CONSTRAINT"


@pytest.mark.parametrize(
    "source, kwargs",
    [("max_pool1d(2)", dict(kernel_size=2)),
     ("max_pool1d(3, stride=2, padding=1)", dict(kernel_size=3, stride=2, padding=1)),
     ("max_pool1d(4, stride=1, padding=2, dilation=2)", dict(kernel_size=4, stride=1, padding=2, dilation=2))],
)
def test_numerics_against_nn_maxpool1d_forward_and_backward(source, kwargs):
    reference = nn.MaxPool1d(**kwargs)
    x = _distinct(2, 3, 13).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    model = network(source, input_shape=("B", 3, 13), output_shape=("B", 3, expected.shape[2]), device="cpu")
    layer = model.nodes.n_n0
    before = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), before)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(MaxPool1d).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_padding_never_wins_the_maximum():
    model = network("max_pool1d(3, stride=1, padding=1)", input_shape=("B", 1, 4), output_shape=("B", 1, 4),
                    device="cpu")
    x = -torch.arange(1.0, 5.0).reshape(1, 1, 4)
    out = model(x)
    torch.testing.assert_close(out, torch.tensor([[[-1.0, -1.0, -2.0, -3.0]]]))


def test_gradcheck_and_gradgradcheck_in_float64_without_ties():
    model = network("max_pool1d(3, stride=2, padding=1)", input_shape=("B", 2, 9), output_shape=("B", 2, 5),
                    device="cpu")
    layer = model.nodes.n_n0.double()
    x = _distinct(2, 2, 9, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize(
    "args",
    ["0", "-2", "2, stride=0", "2, stride=-1", "2, padding=-1", "2, dilation=0", "(2, 2)", "2.0", "True",
     "2, stride=(1, 1)", "2, ceil_mode=1", "2, 1"],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"max_pool1d({args})", ("B", 2, 8), ("B", 2, 4)).code == "E_ARGUMENT"


def test_missing_kernel_size_is_an_argument_error():
    error = _fails("max_pool1d()", ("B", 2, 8), ("B", 2, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "kernel_size"


@pytest.mark.parametrize("args", ["3, padding=2", "1, padding=1", "4, padding=3"])
def test_padding_above_half_the_kernel_is_an_argument_error(args):
    error = _fails(f"max_pool1d({args})", ("B", 2, 8), ("B", 2, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"
    assert error.remedies


def test_input_shorter_than_the_window_is_a_constraint_error():
    assert _fails("max_pool1d(5)", ("B", 2, 3), ("B", 2, 1)).code == "E_CONSTRAINT"
    assert _fails("max_pool1d(2, dilation=4)", ("B", 2, 4), ("B", 2, 1)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8, 8)])
def test_ranks_other_than_three_are_constraint_errors(shape):
    assert _fails("max_pool1d(2)", shape, shape).code == "E_CONSTRAINT"


def test_no_policy_is_declared():
    assert _fails('max_pool1d(2, policy="down2")', ("B", 2, 8), ("B", 2, 4)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    assert _fails("max_pool1d(2)", ("B", 2, 8), ("B", 2, 4), input_dtype="int64").code == "E_DTYPE"


def test_runtime_length_mismatch_is_a_runtime_error():
    model = network("max_pool1d(2)", input_shape=("B", 2, 8), output_shape=("B", 2, 4), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 2, 10))
    assert error.value.code == "E_RUNTIME"


def test_ceil_mode_lengths_match_torch_and_invert_as_intervals():
    """Every length from 1 to 16 against nn.MaxPool1d(ceil_mode=True) (E_CONSTRAINT where torch
    has no output), then the inverse: the lengths an omitted input may take are exactly those
    that produce the output, one when the stride is 1."""
    for k, s, p, d in [(3, 2, 0, 1), (3, 2, 1, 1), (2, 3, 1, 2), (4, 3, 2, 1), (3, 1, 1, 2)]:
        layer = nn.MaxPool1d(k, s, p, d, ceil_mode=True)
        source = f"max_pool1d({k}, stride={s}, padding={p}, dilation={d}, ceil_mode=True)"
        produced = {}
        for length in range(1, 17):
            try:
                expected = layer(torch.zeros(1, 1, length)).shape[2]
            except RuntimeError:  # torch: output size too small
                assert _fails(source + "\nadaptive_avg_pool1d(1)", ("B", 1, length), ("B", 1, 1)).code == "E_CONSTRAINT"
                continue
            plan = hndl.resolve(source, input_shape=("B", 1, length), output_shape=("B", 1, expected))
            assert plan.nodes[0].output_shapes["out"] == ("B", 1, expected)
            produced.setdefault(expected, []).append(length)
        for out, lengths in list(produced.items())[:-1]:  # the last output's lengths continue past 16
            inverse = f"linear()\nreshape(1)\n{source}"
            if len(lengths) == 1:
                plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 1, out))
                assert plan.nodes[1].output_shapes["out"] == ("B", 1, lengths[0])
            else:
                error = _fails(inverse, ("B", 2), ("B", 1, out))
                assert error.code == "E_AMBIGUOUS" and f"{lengths[0]}..{lengths[-1]}" in error.message


@pytest.mark.parametrize("length, kwargs", [(16, dict(kernel_size=3, stride=2)), (10, dict(kernel_size=2)),
                                            (11, dict(kernel_size=4, stride=3, padding=2, dilation=1)),
                                            (9, dict(kernel_size=2, stride=3, padding=1, dilation=2))])
def test_ceil_mode_numerics_against_nn_maxpool1d_forward_and_backward(length, kwargs):
    reference = nn.MaxPool1d(**kwargs, ceil_mode=True)
    x = _distinct(2, 3, length).requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    expected = reference(x_ref)
    source = "max_pool1d(" + ", ".join(f"{name}={value}" for name, value in kwargs.items()) + ", ceil_mode=True)"
    model = network(source, input_shape=("B", 3, length), output_shape=("B", 3, expected.shape[2]), device="cpu")
    layer = model.nodes.n_n0
    assert layer.ceil_mode is True
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(MaxPool1d).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_ceil_mode_contract_errors_and_gradients():
    assert _fails("max_pool1d(3, stride=2, ceil_mode=True)", ("B", 2, 16), ("B", 2, 7)).code == "E_CONSTRAINT"
    assert _fails("max_pool1d(3, stride=2, ceil_mode=True)", ("B", 2, 1), ("B", 2, 1)).code == "E_CONSTRAINT"
    model = network("max_pool1d(3, stride=2, ceil_mode=True)", input_shape=("B", 2, 8), output_shape=("B", 2, 4),
                    device="cpu")
    layer = model.nodes.n_n0.double()
    x = _distinct(1, 2, 8, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
