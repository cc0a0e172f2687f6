"""window_partition@1: Swin's window partition of [B, C, H, W] into [B, nW, N, C]. Numerics
against the view/permute torchvision's shifted_window_attention performs (padding and cyclic
shift included) and against the declared loop reference, the round trip through window_merge,
torchvision's shift rule, gradcheck/gradgradcheck in float64, inference in both directions,
every error code, and the public harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.window_partition import WindowPartition
from hndl_ops_vision.windows import merge, partition


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _torchvision_partition(x, window, shift):
    """The lines of torchvision's shifted_window_attention that pad, roll and partition [B, H, W, C]."""
    x = x.permute(0, 2, 3, 1)
    B, H, W, C = x.shape
    pad_r = (window[1] - W % window[1]) % window[1]
    pad_b = (window[0] - H % window[0]) % window[0]
    x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    _, pad_H, pad_W, _ = x.shape
    shift = list(shift)
    if window[0] >= pad_H:
        shift[0] = 0
    if window[1] >= pad_W:
        shift[1] = 0
    if sum(shift) > 0:
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    num_windows = (pad_H // window[0]) * (pad_W // window[1])
    x = x.view(B, pad_H // window[0], window[0], pad_W // window[1], window[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(B, num_windows, window[0] * window[1], C)


def test_declaration():
    spec = spec_of(WindowPartition)
    assert spec.alias == "window_partition" and spec.qualified == "window_partition@1"
    assert spec.category == "shape"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, nW, N, C]"
    assert list(spec.args) == ["window", "shift"]
    assert spec.args["shift"].default == (0, 0) and spec.args["window"].default is hndl.declaration.MISSING
    assert spec.positional_args == ("window", "shift")
    assert spec.reference is not None and spec.relation is not None and spec.validate is not None
    assert "torchvision" in spec.docstring and "[B, nW, N, C]" in spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(WindowPartition, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_arguments_are_recorded_as_pairs():
    plan = hndl.resolve("window_partition(4)", input_shape=("B", 8, 8, 8), output_shape=("B", 4, 16, 8))
    assert plan.nodes[0].args == {"window": (4, 4), "shift": (0, 0)}
    assert plan.nodes[0].provenance == {"window": "explicit", "shift": "default"}


@pytest.mark.parametrize("size, window, windows", [((12, 12), 4, 9), ((6, 6), 4, 4), ((5, 11), (2, 3), 12),
                                                   ((3, 3), 7, 1)])
def test_the_window_count_is_inferred_forward(size, window, windows):
    count = windows * (window * window if isinstance(window, int) else window[0] * window[1])
    plan = hndl.resolve(f"window_partition({window})\nflatten()", input_shape=("B", 8, *size),
                        output_shape=("B", count * 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", windows, count // windows, 8)


def test_channels_are_inferred_backward():
    plan = hndl.resolve("conv(kernel_size=1)\nwindow_partition(4)", input_shape=("B", 3, 12, 12),
                        output_shape=("B", 9, 16, 5))
    assert plan.nodes[0].args["out_channels"] == 5
    # the map a merge recovers from height= and the window count feeds the partition's input
    plan = hndl.resolve("window_merge((4, 1), height=12)\nwindow_partition(2)\nflatten()",
                        input_shape=("B", 15, 4, 8), output_shape=("B", 6 * 3 * 4 * 8))
    assert plan.nodes[1].input_shapes["x"] == ("B", 8, 12, 5)
    assert plan.nodes[1].output_shapes["out"] == ("B", 18, 4, 8)


@pytest.mark.parametrize("size, window, shift", [((8, 8), (4, 4), (0, 0)), ((8, 8), (4, 4), (2, 2)),
                                                 ((6, 7), (4, 4), (2, 2)), ((5, 9), (2, 3), (1, 2)),
                                                 ((4, 4), (4, 4), (2, 2)), ((3, 10), (7, 3), (3, 1))])
def test_numerics_against_torchvision_and_the_reference(size, window, shift):
    module = WindowPartition(window, shift)
    x = torch.randn(2, 5, *size, requires_grad=True)
    out = module(x)
    expected = _torchvision_partition(x, window, shift)
    assert torch.equal(out, expected)
    assert torch.equal(out, spec_of(WindowPartition).reference(module)(x))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, upstream)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    assert torch.equal(grad, expected_grad)
    assert torch.equal(merge(out, window, shift, *size), x)  # the merge with the same arguments undoes it


def test_torchvision_shift_rule():
    x = torch.randn(1, 2, 4, 9)
    # the padded height 4 fits one window of 4: no roll along H; W is padded to 12 and rolled by 2
    out = partition(x, (4, 4), (2, 2))
    assert torch.equal(out, partition(torch.roll(F.pad(x, (0, 3)), (-2,), (3,)), (4, 4), (0, 0)))


def test_padding_is_zero_and_at_the_end():
    x = torch.ones(1, 1, 3, 3)
    out = partition(x, (2, 2), (0, 0))
    assert out.shape == (1, 4, 4, 1)
    assert out[0, :, :, 0].tolist() == [[1, 1, 1, 1], [1, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]


def test_the_built_node_runs_and_keeps_no_state():
    model = network("window_partition(4, 2)", input_shape=("B", 8, 6, 6), output_shape=("B", 4, 16, 8), device="cpu")
    assert list(model.state_dict()) == []
    x = torch.randn(3, 8, 6, 6)
    assert torch.equal(model(x), _torchvision_partition(x, (4, 4), (2, 2)))


def test_gradcheck_and_gradgradcheck_in_float64():
    module = WindowPartition((2, 3), (1, 1))
    x = torch.randn(2, 2, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_reduced_precision_is_a_pure_rearrangement():
    model = network("window_partition(2)", input_shape=("B", 3, 4, 4), output_shape=("B", 4, 4, 3),
                    device="cpu", dtype="bfloat16")
    x = torch.randn(2, 3, 4, 4).to(torch.bfloat16)
    assert torch.equal(model(x), partition(x.float(), (2, 2), (0, 0)).to(torch.bfloat16))


@pytest.mark.parametrize("args", ["0", "-1", "(4, 0)", "4, 4", "4, (1, 4)", "4, -1", "window=4, shift=5",
                                  '"4"', "4.0", "True", "4, heads=2", "4, 1, 2"])
def test_invalid_arguments_are_argument_errors(args):
    error = _fails(f"window_partition({args})", ("B", 8, 8, 8), ("B", 4, 16, 8))
    assert error.code == "E_ARGUMENT"


def test_a_shift_not_below_the_window_names_the_remedy():
    error = _fails("window_partition(4, 4)", ("B", 8, 8, 8), ("B", 4, 16, 8))
    assert error.code == "E_ARGUMENT" and "shift" in str(error) and error.remedies


def test_a_missing_window_is_an_argument_error():
    assert _fails("window_partition()", ("B", 8, 8, 8), ("B", 4, 16, 8)).code == "E_ARGUMENT"


@pytest.mark.parametrize("output_shape", [("B", 8, 16, 8), ("B", 4, 9, 8), ("B", 4, 16, 7)])
def test_contradicting_outputs_are_constraint_errors(output_shape):
    assert _fails("window_partition(4)", ("B", 8, 8, 8), output_shape).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_ranks_other_than_four_are_constraint_errors(shape):
    assert _fails("window_partition(4)", shape, ("B", 4, 16, 8)).code == "E_CONSTRAINT"


def test_an_undetermined_map_is_ambiguous():
    # nothing fixes the map before the partition: the resolver does not guess H and W from nW
    error = _fails("adaptive_avg_pool()\nwindow_partition(4)", ("B", 8, 9, 9), ("B", 6, 16, 8))
    assert error.code == "E_AMBIGUOUS"


def test_no_policy_is_declared():
    assert _fails('window_partition(4, policy="up2")', ("B", 8, 8, 8), ("B", 4, 16, 8)).code == "E_POLICY_CONFLICT"


def test_integer_input_is_a_dtype_error():
    error = _fails("window_partition(4)", ("B", 8, 8, 8), ("B", 4, 16, 8), input_dtype="int64")
    assert error.code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model = network("window_partition(4)", input_shape=("B", 8, 8, 8), output_shape=("B", 4, 16, 8), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 8, 12, 8))
    assert error.value.code == "E_RUNTIME"
