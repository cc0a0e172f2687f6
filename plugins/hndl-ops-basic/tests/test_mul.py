"""mul@1: exact shape agreement in both directions, no broadcasting, explicit operands,
numerics against torch.mul forward and backward, gradcheck in float64, and error codes."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.add import Add
from hndl_ops_basic.mul import Mul


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Mul)
    assert spec.alias == "mul" and spec.qualified == "mul@1"
    assert spec.input_ports() == ("x", "y")
    assert dict(spec.args) == {}
    assert str(spec.shape) == str(spec_of(Add).shape)  # the same exact-agreement rule as add
    assert spec.category == spec_of(Add).category == "join"
    assert spec.reference(Mul()) is torch.mul
    assert spec.summary and spec.docstring and spec.examples


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_shapes_agree_exactly_on_every_rank(shape):
    plan = hndl.resolve("mul(x, x)", input_shape=shape, output_shape=shape)
    node = plan.nodes[0]
    assert node.input_shapes == {"x": shape, "y": shape}
    assert node.output_shapes["out"] == shape


def test_omitted_width_is_inferred_from_the_other_operand():
    plan = hndl.resolve("a = linear(x)\nmul(x, a)", input_shape=("B", 5), output_shape=("B", 5))
    assert plan.nodes[0].args["out_features"] == 5
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_both_widths_are_inferred_backward_from_the_output():
    plan = hndl.resolve("a = linear(x)\nb = linear(x)\nmul(a, b)", input_shape=("B", 5), output_shape=("B", 7))
    assert plan.nodes[0].args["out_features"] == 7 and plan.nodes[1].args["out_features"] == 7


def test_numerics_forward_and_backward():
    model = network("g = linear(x, 4)\ns = sigmoid(g)\nmul(x, s)", input_shape=("B", 4), output_shape=("B", 4),
                    device="cpu")
    layer = model.nodes.n_n0
    x = torch.randn(3, 4, requires_grad=True)
    out = model(x)
    gate = torch.sigmoid(F.linear(x, layer.weight, layer.bias))
    torch.testing.assert_close(out, x * gate)
    torch.testing.assert_close(out, spec_of(Mul).reference(model.nodes.n_n2)(x, gate))
    torch.testing.assert_close(out, torch.mul(x, gate))
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad((out * upstream).sum(), (x, layer.weight))
    reference_x = x.detach().clone().requires_grad_(True)
    weight = layer.weight.detach().clone().requires_grad_(True)
    expected = reference_x * torch.sigmoid(F.linear(reference_x, weight, layer.bias.detach()))
    by_hand = torch.autograd.grad((expected * upstream).sum(), (reference_x, weight))
    for got, want in zip(grads, by_hand):
        torch.testing.assert_close(got, want)


def test_module_gradients_are_the_other_operand():
    module = network("mul(x, y)", input_shape={"x": ("B", 3), "y": ("B", 3)}, output_shape=("B", 3),
                     device="cpu").nodes.n_n0
    x = torch.randn(2, 3, requires_grad=True)
    y = torch.randn(2, 3, requires_grad=True)
    upstream = torch.randn(2, 3)
    gx, gy = torch.autograd.grad((module(x, y) * upstream).sum(), (x, y))
    torch.testing.assert_close(gx, upstream * y.detach())
    torch.testing.assert_close(gy, upstream * x.detach())


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("mul(x, y)", input_shape={"x": ("B", 2, 3), "y": ("B", 2, 3)}, output_shape=("B", 2, 3),
                    device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x, y))
    assert torch.autograd.gradgradcheck(module, (x, y))


def test_out_of_place_squaring_a_shared_tensor():
    model = network("h = linear(x, 3)\nmul(h, h)", input_shape=("B", 2), output_shape=("B", 3), device="cpu")
    layer = model.nodes.n_n0
    x = torch.randn(4, 2)
    h = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(model(x), h * h)


def test_width_mismatch_is_a_constraint_error():
    assert _fails("a = linear(x, 3)\nmul(x, a)", ("B", 5), ("B", 5)).code == "E_CONSTRAINT"


def test_no_broadcasting_of_a_unit_axis():
    assert _fails("a = linear(x, 1)\nmul(x, a)", ("B", 5), ("B", 5)).code == "E_CONSTRAINT"


def test_rank_mismatch_is_a_constraint_error():
    assert _fails("mul(x, y)", {"x": ("B", 4), "y": ("B", 2, 2)}, ("B", 4)).code == "E_CONSTRAINT"


def test_output_contract_mismatch_is_a_constraint_error():
    assert _fails("mul(x, x)", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"


def test_missing_operand_is_a_binding_error_not_current():
    assert _fails("a = linear(x, 5)\nmul(a)", ("B", 5), ("B", 5)).code == "E_BINDING"


def test_arguments_are_rejected():
    assert _fails("mul(x, x, 2)", ("B", 5), ("B", 5)).code == "E_ARGUMENT"
    assert _fails("mul(x, x, scale=2)", ("B", 5), ("B", 5)).code == "E_ARGUMENT"


def test_integer_operand_is_a_dtype_error():
    error = _fails("mul(x, y)", {"x": ("B", 4), "y": ("B", 4)}, ("B", 4), input_dtype={"y": "int64"})
    assert error.code == "E_DTYPE" and error.location.field == "y"


@pytest.mark.parametrize("narrow", [("B", 8), ("B", 8, 1, 1)])
def test_a_per_channel_operand_is_refused_with_channel_scale_shift_as_the_remedy(narrow):
    error = _fails("mul(x, y)", {"x": ("B", 8, 4, 4), "y": narrow}, ("B", 8, 4, 4))
    assert error.code == "E_CONSTRAINT" and "joins never broadcast" in error.message
    assert "channel_scale_shift(feature_map, params)" in error.remedies[0]
