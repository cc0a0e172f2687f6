"""flatten@1: every non-batch axis into one, inference both ways, numerics and gradients."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.flatten import Flatten


def test_declaration():
    spec = spec_of(Flatten)
    assert spec.alias == "flatten" and spec.qualified == "flatten@1"
    assert dict(spec.args) == {}
    assert spec.category == "shape"


def test_the_node_is_nn_flatten_with_its_values():
    model = network("flatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 48), device="cpu")
    assert type(model.nodes.n_n0) is torch.nn.Flatten  # torch's own layer, as type-keyed tools expect
    x = torch.randn(2, 3, 4, 4)
    assert torch.equal(model(x), torch.nn.Flatten()(x))


def test_rank_four_flattens_to_features():
    plan = hndl.resolve("flatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 48))
    node = plan.nodes[0]
    assert node.input_shapes["x"] == ("B", 3, 4, 4)
    assert node.output_shapes["out"] == ("B", 48)


def test_rank_three_flattens_to_features():
    plan = hndl.resolve("flatten()", input_shape=("B", 6, 5), output_shape=("B", 30))
    assert plan.nodes[0].output_shapes["out"] == ("B", 30)


def test_rank_two_input_is_identity_like():
    plan = hndl.resolve("flatten()", input_shape=("B", 7), output_shape=("B", 7))
    assert plan.nodes[0].output_shapes["out"] == ("B", 7)


def test_output_width_is_inferred_forward_for_a_following_linear():
    plan = hndl.resolve("flatten()\nlinear(2)", input_shape=("B", 3, 4, 4), output_shape=("B", 2))
    assert plan.nodes[0].output_shapes["out"] == ("B", 48)
    assert plan.nodes[1].args["in_features"] == 48


def test_input_width_is_inferred_backward_from_the_output():
    # linear() width is omitted; flatten of a rank-2 tensor carries the output width back.
    plan = hndl.resolve("linear()\nflatten()", input_shape=("B", 5), output_shape=("B", 48))
    assert plan.nodes[0].args["out_features"] == 48
    assert plan.nodes[1].input_shapes["x"] == ("B", 48)


def test_one_unknown_input_factor_is_solved_backward():
    # conv with omitted channels feeds flatten: C * 4 * 4 = 48 fixes C = 3.
    plan = hndl.resolve("conv(kernel_size=1)\nflatten()", input_shape=("B", 2, 4, 4), output_shape=("B", 48))
    assert plan.nodes[0].args["out_channels"] == 3


def test_element_count_mismatch_is_a_reshape_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("flatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 47))
    assert error.value.code == "E_RESHAPE"


def test_flatten_output_must_be_rank_two():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("flatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 3, 16))
    assert error.value.code == "E_CONSTRAINT"


def test_symbolic_batch_is_preserved():
    plan = hndl.resolve("flatten()", input_shape=("N", 3, 4, 4), output_shape=("N", 48))
    assert plan.nodes[0].output_shapes["out"] == ("N", 48)


def test_numerics_and_gradients():
    model = network("flatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 48), device="cpu")
    assert list(model.parameters()) == []
    x = torch.randn(5, 3, 4, 4, requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, torch.flatten(x, 1))
    assert out.data_ptr() == x.data_ptr()  # contiguous input: a view, no copy
    weights = torch.randn(5, 48)
    (grad,) = torch.autograd.grad((out * weights).sum(), x)
    torch.testing.assert_close(grad, weights.reshape(5, 3, 4, 4))


def test_rank_two_runtime_is_identity():
    model = network("flatten()", input_shape=("B", 7), output_shape=("B", 7), device="cpu")
    x = torch.randn(2, 7)
    assert torch.equal(model(x), x)
