"""linear@1: declaration, inference both ways, numerics against F.linear, error codes."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.linear import Linear


def test_declaration():
    spec = spec_of(Linear)
    assert spec.alias == "linear" and spec.qualified == "linear@1"
    assert spec.positional_args == ("out_features",)
    assert spec.args["bias"].default is True
    assert spec.args["out_features"].inferable and spec.args["in_features"].inferable


def test_width_is_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("linear()", input_shape=("B", 12), output_shape=("B", 5))
    node = plan.nodes[0]
    assert (node.args["in_features"], node.args["out_features"]) == (12, 5)
    assert node.provenance["out_features"] == "inferred"


def test_sequence_rank_three_is_mapped_position_by_position():
    model = network("linear(32)", input_shape=("B", 16, 8), output_shape=("B", 16, 32), device="cpu")
    x = torch.randn(2, 16, 8)
    layer = model.nodes.n_n0
    torch.testing.assert_close(model(x), F.linear(x, layer.weight, layer.bias))


def test_numerics_match_the_declared_reference_forward_and_backward():
    model = network("linear(7, bias=False)", input_shape=("B", 3), output_shape=("B", 7), device="cpu")
    layer = model.nodes.n_n0
    assert layer.bias is None
    reference = spec_of(Linear).reference(layer)
    x = torch.randn(4, 3, requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, reference(x))
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, layer.weight.sum(0).expand(4, 3))


def test_rank_four_is_rejected_rather_than_flattened():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear(4)", input_shape=("B", 3, 8, 8), output_shape=("B", 3, 8, 4))
    assert error.value.code == "E_CONSTRAINT"
    assert error.value.location.node == "n0"


@pytest.mark.parametrize("source", ["linear(0)", "linear(True)", "linear(2.5)", "linear(-3)", "linear(None)"])
def test_invalid_widths_are_argument_errors(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 3), output_shape=("B", 3))
    assert error.value.code == "E_ARGUMENT"


def test_no_activation_shorthand():
    with pytest.raises(HNDLError) as error:
        hndl.resolve('linear(4, activation="relu")', input_shape=("B", 3), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"


def test_literal_width_contradicting_the_contract_is_kept_and_fails():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear(64)", input_shape=("B", 3), output_shape=("B", 10))
    assert error.value.code == "E_CONSTRAINT"
    assert any("64" in fact for fact in error.value.chain)


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear()", input_shape=("B", 3), output_shape=("B", 4), input_dtype="int64")
    assert error.value.code == "E_DTYPE"


# -- issue 30: remedies that name the fix, and torch's positional order ------------------------------
def test_a_literal_width_before_the_output_names_the_literal_and_says_omit_it():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear(100)\nrelu()\nlinear(100)", input_shape=("B", 64), output_shape=("B", 10))
    assert error.value.code == "E_CONSTRAINT" and error.value.location.node == "n2"
    assert error.value.remedies == (
        "Omit out_features=100 at node n2 (linear, line 3): the rest of the graph requires out_features 10 there, "
        "and an omitted out_features is inferred from what consumes the result.",)
    plan = hndl.resolve("linear(100)\nrelu()\nlinear()", input_shape=("B", 64), output_shape=("B", 10))
    assert plan.nodes[2].args["out_features"] == 10


def test_an_image_names_the_one_by_one_conv_and_flatten():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear(16)", input_shape=("B", 8, 4, 4), output_shape=("B", 16, 4, 4))
    assert error.value.code == "E_CONSTRAINT"
    assert error.value.remedies == (
        "To act on the channels of [B, C, H, W] at every position, write conv(16, kernel_size=1) instead of linear: "
        "it applies one learned C_in -> C_out map at each position of [B, C, H, W] (a 1x1 convolution).",
        "To act on all C*H*W features of each example, insert flatten() before linear.")
    assert hndl.resolve("conv(16, kernel_size=1)", input_shape=("B", 8, 4, 4), output_shape=("B", 16, 4, 4))


def test_torch_positional_order_is_refused_not_read_another_way():
    """torch's Linear(128, 64) is linear(64) here (in_features is inferred); linear(128, 64) is refused."""
    with pytest.raises(HNDLError) as error:
        hndl.resolve("linear(128, 64)", input_shape=("B", 128), output_shape=("B", 64))
    assert error.value.code == "E_ARGUMENT" and "positional" in error.value.message
    assert "in_features" in " ".join(error.value.remedies)
    assert hndl.resolve("linear(64)", input_shape=("B", 128), output_shape=("B", 64))
    assert hndl.resolve("linear(64, in_features=128)", input_shape=("B", 128), output_shape=("B", 64))
    with pytest.raises(HNDLError) as checked:  # torch's in_features, given by keyword, is checked
        hndl.resolve("linear(64, in_features=100)", input_shape=("B", 128), output_shape=("B", 64))
    assert checked.value.code == "E_CONSTRAINT"


def test_the_public_harness_passes():
    check_operator(Linear)
