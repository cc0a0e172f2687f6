"""leaky_relu@1: numerics against F.leaky_relu forward and backward, out-of-place, slope bounds."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.leaky_relu import LeakyReLU


def test_declaration():
    spec = spec_of(LeakyReLU)
    assert spec.alias == "leaky_relu" and spec.qualified == "leaky_relu@1"
    assert spec.args["negative_slope"].default == 0.01
    assert spec.positional_args == ("negative_slope",)
    assert spec.category == "activation"


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_numerics_forward_and_backward_out_of_place(shape):
    model = network("leaky_relu(0.2)", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.negative_slope == 0.2
    assert model.plan.nodes[0].args["negative_slope"] == 0.2
    assert list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)  # the input is never modified
    assert out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, F.leaky_relu(saved, 0.2))
    torch.testing.assert_close(out, spec_of(LeakyReLU).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    torch.testing.assert_close(grad, torch.where(saved > 0, upstream, 0.2 * upstream))


def test_default_slope_and_provenance():
    plan = hndl.resolve("leaky_relu()", input_shape=("B", 4), output_shape=("B", 4))
    node = plan.nodes[0]
    assert node.args["negative_slope"] == 0.01
    assert node.provenance["negative_slope"] == "default"
    model = network("leaky_relu()", input_shape=("B", 4), output_shape=("B", 4), device="cpu")
    x = torch.tensor([[-2.0, -0.5, 0.0, 3.0]])
    torch.testing.assert_close(model(x), F.leaky_relu(x))


def test_keyword_slope_and_integer_literal_normalize_to_float():
    plan = hndl.resolve("leaky_relu(negative_slope=1)", input_shape=("B", 4), output_shape=("B", 4))
    value = plan.nodes[0].args["negative_slope"]
    assert value == 1.0 and isinstance(value, float)


def test_does_not_mutate_a_shared_branch():
    model = network(
        "h = linear(x, 4)\na = leaky_relu(h, 0.1)\nadd(h, a)", input_shape=("B", 3), output_shape=("B", 4), device="cpu"
    )
    layer = model.nodes.n_n0
    x = torch.randn(5, 3)
    h = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(model(x), h + F.leaky_relu(h, 0.1))


def test_shape_propagates_backward():
    plan = hndl.resolve("linear()\nleaky_relu(0.2)", input_shape=("B", 16), output_shape=("B", 3))
    assert plan.nodes[0].args["out_features"] == 3


@pytest.mark.parametrize("source", ["leaky_relu(-0.2)", 'leaky_relu("0.2")', "leaky_relu(True)", "leaky_relu(0.2, 0.3)"])
def test_invalid_slopes_are_argument_errors(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"
