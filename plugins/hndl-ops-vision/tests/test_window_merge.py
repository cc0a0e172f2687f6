"""window_merge@1: [B, nW, N, C] windows back into [B, C, H, W], window_partition's inverse.
Numerics against the reverse steps of torchvision's shifted_window_attention (merge, roll back,
crop) and the declared loop reference, exact round trips, the map size from the output, from
height=/width= and from nW with one known side (bounded, never guessed), gradcheck/gradgradcheck
in float64, every error code, and the public harness."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.window_merge import WindowMerge
from hndl_ops_vision.windows import effective_shift, partition


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _torchvision_merge(x, window, shift, H, W):
    """The lines of torchvision's shifted_window_attention that reverse the windows, the shift and the padding."""
    B, _, _, C = x.shape
    pad_H, pad_W = -(-H // window[0]) * window[0], -(-W // window[1]) * window[1]
    shift = list(shift)
    if window[0] >= pad_H:
        shift[0] = 0
    if window[1] >= pad_W:
        shift[1] = 0
    x = x.reshape(B, pad_H // window[0], pad_W // window[1], window[0], window[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, pad_H, pad_W, C)
    if sum(shift) > 0:
        x = torch.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
    return x[:, :H, :W, :].permute(0, 3, 1, 2)


def test_declaration():
    spec = spec_of(WindowMerge)
    assert spec.alias == "window_merge" and spec.qualified == "window_merge@1"
    assert spec.category == "shape"
    assert str(spec.shape) == "x[B, nW, N, C] -> out[B, C, H, W]"
    assert list(spec.args) == ["window", "shift", "height", "width"]
    assert spec.args["height"].inferable and spec.args["height"].dim == "H" and not spec.args["height"].positional
    assert spec.args["width"].inferable and spec.args["width"].dim == "W"
    assert spec.positional_args == ("window", "shift")
    assert spec.reference is not None and spec.relation is not None and spec.validate is not None
    assert "window_partition" in spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(WindowMerge, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_the_map_size_is_read_from_the_output_and_recorded():
    plan = hndl.resolve("window_merge(4)", input_shape=("B", 4, 16, 8), output_shape=("B", 8, 6, 7))
    node = plan.nodes[0]
    assert node.args == {"window": (4, 4), "shift": (0, 0), "height": 6, "width": 7}
    assert node.provenance["height"] == "inferred" and node.provenance["width"] == "inferred"


def test_the_map_size_comes_from_a_consumer_or_from_the_arguments():
    plan = hndl.resolve("window_merge(4)\nconv(kernel_size=3)", input_shape=("B", 4, 16, 8),
                        output_shape=("B", 2, 4, 5))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 6, 7)
    plan = hndl.resolve("window_merge(4, height=5, width=8)\nadaptive_avg_pool(1)", input_shape=("B", 4, 16, 8),
                        output_shape=("B", 8, 1, 1))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 5, 8)
    assert plan.nodes[0].provenance["height"] == "explicit"


def test_the_window_count_and_one_side_bound_the_other():
    # 15 windows of 4 x 1 over 12 rows (3 windows): 5 window columns of width 1, so W = 5
    plan = hndl.resolve("window_merge((4, 1), height=12)\nadaptive_avg_pool(1)", input_shape=("B", 15, 4, 8),
                        output_shape=("B", 8, 1, 1))
    assert plan.nodes[0].args["width"] == 5
    # with 4 x 4 windows W lies in 5..8: reported as ambiguous, not guessed
    error = _fails("window_merge(4, height=12)\nadaptive_avg_pool(1)", ("B", 6, 16, 8), ("B", 8, 1, 1))
    assert error.code == "E_AMBIGUOUS" and "5..8" in str(error)


def test_channels_are_inferred_in_both_directions():
    plan = hndl.resolve("window_partition(2)\nwindow_merge(2)\nconv(kernel_size=1)", input_shape=("B", 3, 4, 4),
                        output_shape=("B", 6, 4, 4))
    assert plan.nodes[1].input_shapes["x"] == ("B", 4, 4, 3)
    plan = hndl.resolve("linear()\nreshape(4, 4, 3)\nwindow_merge(2)", input_shape=("B", 10),
                        output_shape=("B", 3, 4, 4))
    assert plan.nodes[0].args["out_features"] == 48


@pytest.mark.parametrize("size, window, shift", [((8, 8), (4, 4), (0, 0)), ((8, 8), (4, 4), (2, 2)),
                                                 ((6, 7), (4, 4), (2, 2)), ((5, 9), (2, 3), (1, 2)),
                                                 ((4, 4), (4, 4), (2, 2)), ((3, 10), (7, 3), (3, 1))])
def test_numerics_against_torchvision_and_the_reference(size, window, shift):
    module = WindowMerge(window, shift, height=size[0], width=size[1])
    count = -(-size[0] // window[0]) * -(-size[1] // window[1])
    x = torch.randn(2, count, window[0] * window[1], 5, requires_grad=True)
    out = module(x)
    expected = _torchvision_merge(x, window, shift, *size)
    assert out.shape == (2, 5, *size)
    assert torch.equal(out, expected)
    assert torch.equal(out, spec_of(WindowMerge).reference(module)(x))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, upstream)
    (expected_grad,) = torch.autograd.grad(expected, x, upstream)
    assert torch.equal(grad, expected_grad)
    image = torch.randn(2, 5, *size)
    assert torch.equal(module(partition(image, window, shift)), image)


def test_the_round_trip_through_a_built_network_is_exact():
    model = network("window_partition(3, 1)\nwindow_merge(3, 1)", input_shape=("B", 2, 5, 7),
                    output_shape=("B", 2, 5, 7), device="cpu")
    x = torch.randn(3, 2, 5, 7)
    assert torch.equal(model(x), x)
    assert list(model.state_dict()) == []


def test_the_shift_follows_the_partition_rule():
    assert effective_shift(4, 9, (4, 4), (2, 2)) == (0, 2)
    assert effective_shift(5, 9, (4, 4), (2, 2)) == (2, 2)  # 5 is padded to 8: two windows, shifted
    assert effective_shift(3, 3, (7, 7), (3, 3)) == (0, 0)


def test_gradcheck_and_gradgradcheck_in_float64():
    module = WindowMerge((2, 3), (1, 1), height=3, width=5)
    x = torch.randn(2, 4, 6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("args", ["0", "4, 4", "4, -1", "(4, 2), (1, 2)", "4, height=0", "4, width=-3",
                                  "4, height=6.0", "4, 2, 6", '"4"', "4, nW=4"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"window_merge({args})", ("B", 4, 16, 8), ("B", 8, 6, 7)).code == "E_ARGUMENT"


@pytest.mark.parametrize("input_shape, output_shape", [
    (("B", 4, 16, 8), ("B", 8, 9, 8)),    # 9 x 8 needs 6 windows
    (("B", 4, 9, 8), ("B", 8, 8, 8)),     # a 4 x 4 window holds 16 positions
    (("B", 4, 16, 8), ("B", 7, 8, 8)),    # channels are kept
])
def test_contradictions_are_constraint_errors(input_shape, output_shape):
    assert _fails("window_merge(4)", input_shape, output_shape).code == "E_CONSTRAINT"


def test_stated_sizes_contradicting_the_output_are_constraint_errors():
    assert _fails("window_merge(4, height=6, width=6)", ("B", 4, 16, 8), ("B", 8, 6, 7)).code == "E_CONSTRAINT"
    error = _fails("window_merge(4, height=12)\nadaptive_avg_pool(1)", ("B", 7, 16, 8), ("B", 8, 1, 1))
    assert error.code == "E_CONSTRAINT" and "7 windows" in str(error)


def test_an_undetermined_map_is_ambiguous():
    assert _fails("window_merge(4)\nadaptive_avg_pool(1)", ("B", 4, 16, 8), ("B", 8, 1, 1)).code == "E_AMBIGUOUS"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 16, 8)])
def test_ranks_other_than_four_are_constraint_errors(shape):
    assert _fails("window_merge(4)", shape, ("B", 8, 6, 7)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("window_merge(4)", ("B", 4, 16, 8), ("B", 8, 8, 8), input_dtype="int64").code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model = network("window_merge(4)", input_shape=("B", 4, 16, 8), output_shape=("B", 8, 8, 8), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 6, 16, 8))
    assert error.value.code == "E_RUNTIME"
