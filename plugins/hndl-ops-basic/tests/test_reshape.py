"""reshape@1: prefix semantics, rank from neighbours, element-count products, error codes,
and a forward that is a gradient-preserving view of its input."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.reshape import Reshape


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def test_declaration():
    spec = spec_of(Reshape)
    assert spec.alias == "reshape" and spec.qualified == "reshape@1"
    assert spec.positional_rest == "shape"
    assert spec.args["shape"].default == ()
    assert spec.category == "shape"


def test_three_entry_prefix_fixes_rank_four():
    plan = hndl.resolve("reshape(64, 4, 4)", input_shape=("B", 1024), output_shape=("B", 64, 4, 4))
    node = plan.nodes[0]
    assert node.args["shape"] == (64, 4, 4)
    assert node.provenance["shape"] == "explicit"
    assert node.input_shapes["x"] == ("B", 1024)
    assert node.output_shapes["out"] == ("B", 64, 4, 4)


def test_three_entry_prefix_cannot_feed_a_lower_rank():
    error = _fails("reshape(64, 4, 4)", ("B", 1024), ("B", 64, 16))
    assert error.code == "E_CONSTRAINT"


def test_bare_reshape_takes_rank_and_width_from_the_following_linear():
    plan = hndl.resolve("reshape()\nlinear()", input_shape=("B", 2, 4, 4), output_shape=("B", 10))
    reshape, linear = plan.nodes
    assert reshape.output_shapes["out"] == ("B", 32)
    assert linear.args["in_features"] == 32
    assert linear.args["out_features"] == 10
    assert linear.provenance["in_features"] == "inferred"


def test_short_prefix_takes_rank_four_from_a_following_deconv():
    # deconv fixes rank 4; its doubling fixes 4x4 from the 8x8 output; 512 comes from the prefix.
    plan = hndl.resolve(
        'reshape(512)\ndeconv(3, policy="up2")', input_shape=("B", 8192), output_shape=("B", 3, 8, 8)
    )
    assert plan.nodes[0].output_shapes["out"] == ("B", 512, 4, 4)
    assert plan.nodes[1].args["in_channels"] == 512


def test_short_prefix_takes_rank_three_from_the_output_contract():
    plan = hndl.resolve("reshape(512)\nrelu()", input_shape=("B", 8192), output_shape=("B", 512, 16))
    assert plan.nodes[0].output_shapes["out"] == ("B", 512, 16)


def test_one_unknown_factor_is_solved_from_the_element_count_backward():
    # The input width is unknown (omitted linear width) and solved from the reshape output.
    plan = hndl.resolve("linear()\nreshape(8, 2, 2)", input_shape=("B", 5), output_shape=("B", 8, 2, 2))
    assert plan.nodes[0].args["out_features"] == 32


def test_two_unknown_factors_are_ambiguous():
    # Rank 4 is fixed by conv, but H * W = 16 has several factorizations and nothing picks one.
    error = _fails("reshape(512)\nconv(3, kernel_size=1)\nflatten()", ("B", 8192), ("B", 48))
    assert error.code == "E_AMBIGUOUS"
    assert error.location.node == "n0"


def test_unknown_rank_is_ambiguous():
    # flatten accepts any rank, so nothing fixes the reshape's output rank.
    error = _fails("reshape(512)\nrelu()\nflatten()", ("B", 8192), ("B", 8192))
    assert error.code == "E_AMBIGUOUS"


def test_element_count_mismatch_is_a_reshape_error():
    error = _fails("reshape(64, 4, 4)", ("B", 1000), ("B", 64, 4, 4))
    assert error.code == "E_RESHAPE"
    assert "1000" in str(error) and "1024" in str(error)


def test_element_count_that_does_not_divide_is_a_reshape_error():
    # 1000 elements cannot hold a leading 64 with an integer remainder.
    error = _fails("reshape(64)", ("B", 1000), ("B", 64, 15))
    assert error.code == "E_RESHAPE"
    error = _fails("reshape(64)\nlinear(3)", ("B", 1000), ("B", 3))
    assert error.code == "E_RESHAPE"


def test_prefix_entry_contradicting_the_contract_fails():
    # The literal 5 is kept: it is never rewritten to the contract's 4.
    error = _fails("reshape(64, 4, 5)", ("B", 1024), ("B", 64, 4, 4))
    assert error.code == "E_CONSTRAINT"
    assert "5" in str(error)


def test_prefix_longer_than_three_is_an_argument_error():
    error = _fails("reshape(2, 2, 2, 2)", ("B", 16), ("B", 16))
    assert error.code == "E_ARGUMENT"
    assert error.location.field == "shape"


@pytest.mark.parametrize("prefix", ["0, 4", "-4, 4", "4, 0", "4, -1", "True, 4", "2.5, 4", "None"])
def test_zero_negative_and_non_integer_entries_are_argument_errors(prefix):
    error = _fails(f"reshape({prefix})", ("B", 16), ("B", 4, 4))
    assert error.code == "E_ARGUMENT"


def test_symbolic_batch_is_preserved_and_the_plan_records_the_complete_shape():
    plan = hndl.resolve("reshape(3)", input_shape=("N", 48), output_shape=("N", 3, 16))
    node = plan.nodes[0]
    assert node.input_shapes["x"][0] == "N" and node.output_shapes["out"][0] == "N"
    assert node.output_shapes["out"] == ("N", 3, 16)


@pytest.mark.parametrize("batch", [1, 5])
def test_forward_is_a_view_with_gradients(batch):
    model = network("reshape(64, 4, 4)", input_shape=("B", 1024), output_shape=("B", 64, 4, 4), device="cpu")
    assert list(model.parameters()) == []
    x = torch.randn(batch, 1024, requires_grad=True)
    out = model(x)
    assert out.shape == (batch, 64, 4, 4)
    torch.testing.assert_close(out, x.reshape(batch, 64, 4, 4))
    assert out.data_ptr() == x.data_ptr()  # a view: no silent copy
    weights = torch.randn(batch, 64, 4, 4)
    (grad,) = torch.autograd.grad((out * weights).sum(), x)
    torch.testing.assert_close(grad, weights.reshape(batch, 1024))


def test_bare_reshape_then_linear_runs_and_differentiates():
    model = network("reshape()\nlinear()", input_shape=("B", 2, 4, 4), output_shape=("B", 10), device="cpu")
    layer = model.nodes.n_n1
    assert layer.weight.shape == (10, 32)
    x = torch.randn(3, 2, 4, 4, requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, torch.nn.functional.linear(x.reshape(3, 32), layer.weight, layer.bias))
    out.sum().backward()
    torch.testing.assert_close(x.grad, layer.weight.sum(0).reshape(2, 4, 4).expand(3, 2, 4, 4))
