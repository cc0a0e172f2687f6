"""merge_heads@1: declaration, D = H * E inferred from any two of the three in both directions,
the layout against transformers' transpose(1, 2).reshape(B, T, H * E), the round trip with
split_heads, float64 gradcheck and gradgradcheck, the harness, and every error code it raises."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.merge_heads import MergeHeads


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(MergeHeads)
    assert spec.alias == "merge_heads" and spec.qualified == "merge_heads@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.args == {} and spec.positional_args == ()
    assert str(spec.shape) == "x[B, H, T, E] -> out[B, T, D]"
    assert "[B, H, T, E]" in spec.docstring


def test_check_operator():
    check_operator(MergeHeads)


def test_width_is_inferred_forward():
    node = hndl.resolve("merge_heads()\nlinear(5)", input_shape=("B", 3, 7, 4), output_shape=("B", 7, 5)).nodes[0]
    assert node.output_shapes["out"] == ("B", 7, 12)


def test_per_head_width_is_inferred_backward_from_the_width_and_the_heads():
    # H = 4 comes from split_heads, D = 32 from the output contract: E = 8, and the projection width 32.
    plan = hndl.resolve("linear()\nsplit_heads(4)\nmerge_heads()", input_shape=("B", 5, 3), output_shape=("B", 5, 32))
    assert plan.nodes[0].args["out_features"] == 32
    assert plan.nodes[2].input_shapes["x"] == ("B", 4, 5, 8)


def _heads_of_five():
    """A registry with a test producer of [B, H, T, 5] whose head count H nothing but its consumer fixes."""
    registry = Registry.builtins()

    @registry.operator("test_heads_of_five", summary="Test producer of five-wide heads.",
                       shape="x[B, T, D] -> out[B, H, T, 5]", args={}, examples=())
    class HeadsOfFive(nn.Module):
        """Five-wide heads, for inference tests only."""

        def forward(self, x):
            raise AssertionError("never run")

    return registry


def test_head_count_is_inferred_backward_from_the_width_and_the_per_head_width():
    plan = hndl.resolve("test_heads_of_five()\nmerge_heads()", input_shape=("B", 6, 3), output_shape=("B", 6, 15),
                        registry=_heads_of_five())
    assert plan.nodes[1].input_shapes["x"] == ("B", 3, 6, 5)
    error = _fails("test_heads_of_five()\nmerge_heads()", ("B", 6, 3), ("B", 6, 16), registry=_heads_of_five())
    assert error.code == "E_CONSTRAINT" and "E=5" in error.message


def test_matches_the_transformers_layout_and_undoes_split_heads():
    model = network("merge_heads()", input_shape=("B", 4, 6, 8), output_shape=("B", 6, 32), device="cpu")
    x = torch.randn(3, 4, 6, 8, requires_grad=True)
    out = model(x)
    assert torch.equal(out, x.transpose(1, 2).reshape(3, 6, 32))
    assert torch.equal(out, spec_of(MergeHeads).reference(model.nodes.n_n0)(x))
    round_trip = network("split_heads(4)\nmerge_heads()", input_shape=("B", 6, 32), output_shape=("B", 6, 32),
                         device="cpu")
    y = torch.randn(2, 6, 32)
    assert torch.equal(round_trip(y), y)


def test_float64_gradcheck_and_gradgradcheck():
    layer = network("merge_heads()", input_shape=("B", 2, 3, 2), output_shape=("B", 3, 4), device="cpu").nodes.n_n0
    x = torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


# -- errors ---------------------------------------------------------------------------------------------
def test_a_width_that_is_not_heads_times_head_width_is_a_constraint_error():
    error = _fails("merge_heads()", ("B", 2, 4, 3), ("B", 4, 7))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert _fails("merge_heads()", ("B", 2, 4, 3), ("B", 4, 8)).code == "E_CONSTRAINT"


def test_positions_must_agree():
    assert _fails("merge_heads()", ("B", 2, 4, 3), ("B", 5, 6)).code == "E_CONSTRAINT"


def test_unknown_arguments_are_argument_errors():
    assert _fails("merge_heads(2)", ("B", 2, 4, 3), ("B", 4, 6)).code == "E_ARGUMENT"
    assert _fails("merge_heads(heads=2)", ("B", 2, 4, 3), ("B", 4, 6)).code == "E_ARGUMENT"


def test_wrong_ranks_are_constraint_errors():
    assert _fails("merge_heads()", ("B", 4, 6), ("B", 4, 6)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("merge_heads()", ("B", 2, 4, 3), ("B", 4, 6), input_dtype="int64").code == "E_DTYPE"
