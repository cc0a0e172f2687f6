"""add@1: exact shape agreement in both directions, no broadcasting, explicit operands,
numerics against torch.add, and fan-out that runs every producer once."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.add import Add


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def test_declaration():
    spec = spec_of(Add)
    assert spec.alias == "add" and spec.qualified == "add@1"
    assert spec.input_ports() == ("x", "y")
    assert spec.category == "join"
    assert spec.reference(Add()) is torch.add


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_shapes_agree_exactly_on_every_rank(shape):
    plan = hndl.resolve("add(x, x)", input_shape=shape, output_shape=shape)
    node = plan.nodes[0]
    assert node.input_shapes == {"x": shape, "y": shape}
    assert node.output_shapes["out"] == shape


def test_omitted_width_is_inferred_from_the_other_operand():
    plan = hndl.resolve("a = linear(x)\nadd(x, a)", input_shape=("B", 5), output_shape=("B", 5))
    assert plan.nodes[0].args["out_features"] == 5


def test_both_widths_are_inferred_backward_from_the_output():
    plan = hndl.resolve("a = linear(x)\nb = linear(x)\nadd(a, b)", input_shape=("B", 5), output_shape=("B", 7))
    assert plan.nodes[0].args["out_features"] == 7 and plan.nodes[1].args["out_features"] == 7


def test_width_mismatch_is_a_constraint_error():
    error = _fails("a = linear(x, 3)\nadd(x, a)", ("B", 5), ("B", 5))
    assert error.code == "E_CONSTRAINT"


def test_no_broadcasting_of_a_unit_axis():
    error = _fails("a = linear(x, 1)\nadd(x, a)", ("B", 5), ("B", 5))
    assert error.code == "E_CONSTRAINT"


def test_rank_mismatch_is_a_constraint_error():
    error = _fails("add(x, y)", {"x": ("B", 4), "y": ("B", 2, 2)}, ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_output_contract_mismatch_is_a_constraint_error():
    error = _fails("add(x, x)", ("B", 4), ("B", 5))
    assert error.code == "E_CONSTRAINT"


def test_missing_operand_is_a_binding_error_not_current():
    error = _fails("a = linear(x, 5)\nadd(a)", ("B", 5), ("B", 5))
    assert error.code == "E_BINDING"


def test_no_operands_is_a_binding_error():
    error = _fails("linear(5)\nadd()", ("B", 5), ("B", 5))
    assert error.code == "E_BINDING"


def test_numerics_and_gradients():
    model = network("a = linear(x, 4)\nadd(x, a)", input_shape=("B", 4), output_shape=("B", 4), device="cpu")
    layer = model.nodes.n_n0
    reference = spec_of(Add).reference(model.nodes.n_n1)
    x = torch.randn(3, 4, requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, reference(x, F.linear(x, layer.weight, layer.bias)))
    out.sum().backward()
    torch.testing.assert_close(x.grad, (torch.ones(4) + layer.weight.sum(0)).expand(3, 4))
    assert layer.weight.grad is not None


def test_fan_out_runs_each_producer_once():
    model = network(
        'h = linear(x, 8, name="shared")\na = relu(h, name="left")\nb = tanh(h, name="right")\nadd(a, b)',
        input_shape=("B", 4),
        output_shape=("B", 8),
        device="cpu",
    )
    calls = {"shared": 0, "left": 0, "right": 0}
    for name in calls:
        getattr(model.nodes, f"n_{name}").register_forward_hook(
            lambda module, args, output, name=name: calls.__setitem__(name, calls[name] + 1)
        )
    layer = model.nodes.n_shared
    x = torch.randn(2, 4)
    out = model(x)
    assert calls == {"shared": 1, "left": 1, "right": 1}
    h = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(out, torch.relu(h) + torch.tanh(h))


@pytest.mark.parametrize("narrow", [("B", 8), ("B", 8, 1, 1)])
def test_a_per_channel_operand_is_refused_with_channel_add_as_the_remedy(narrow):
    error = _fails("add(x, y)", {"x": ("B", 8, 4, 4), "y": narrow}, ("B", 8, 4, 4))
    assert error.code == "E_CONSTRAINT" and "joins never broadcast" in error.message
    assert "channel_add(feature_map, vector)" in error.remedies[0]
