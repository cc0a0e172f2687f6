"""sigmoid@1: declaration, numerics against the logistic formula, torch.sigmoid and
nn.Sigmoid forward and backward, shape propagation, gradcheck in float64, and error codes."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.sigmoid import Sigmoid


def _formula(x):
    return 1 / (1 + torch.exp(-x))


def test_declaration():
    spec = spec_of(Sigmoid)
    assert spec.alias == "sigmoid" and spec.qualified == "sigmoid@1"
    assert dict(spec.args) == {}
    assert spec.category == "activation"
    assert spec.reference(Sigmoid()) is torch.sigmoid
    assert spec.summary and spec.docstring and spec.examples


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_out_of_place(shape):
    model = network("sigmoid()", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, _formula(saved))
    torch.testing.assert_close(out, torch.nn.Sigmoid()(saved))
    torch.testing.assert_close(out, spec_of(Sigmoid).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    s = _formula(saved)
    torch.testing.assert_close(grad, upstream * s * (1 - s))
    torch_x = saved.clone().requires_grad_(True)
    (torch_grad,) = torch.autograd.grad((torch.nn.Sigmoid()(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, torch_grad)


def test_saturates_without_overflow():
    model = network("sigmoid()", input_shape=("B", 4), output_shape=("B", 4), device="cpu")
    x = torch.tensor([[-1000.0, -20.0, 20.0, 1000.0]], requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all() and out[0, 0] == 0 and out[0, 3] == 1
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_width_propagates_backward_through_the_activation():
    plan = hndl.resolve("linear()\nsigmoid()", input_shape=("B", 16), output_shape=("B", 1))
    assert plan.nodes[0].args["out_features"] == 1
    assert plan.nodes[1].input_shapes["x"] == ("B", 1)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("sigmoid()", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("source", ["sigmoid(1)", "sigmoid(dim=1)", 'sigmoid("x")'])
def test_takes_no_arguments(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"


def test_shape_mismatch_is_a_constraint_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("sigmoid()", input_shape=("B", 4), output_shape=("B", 4, 1))
    assert error.value.code == "E_CONSTRAINT"


@pytest.mark.parametrize("input_dtype", ["int64", "int32", "bool"])
def test_integer_input_is_a_dtype_error(input_dtype):
    with pytest.raises(HNDLError) as error:
        hndl.resolve("sigmoid()", input_shape=("B", 4), output_shape=("B", 4), input_dtype=input_dtype)
    assert error.value.code == "E_DTYPE"
