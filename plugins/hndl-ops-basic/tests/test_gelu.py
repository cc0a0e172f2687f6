"""gelu@1: declaration, both approximations against the handwritten formulas, F.gelu and
nn.GELU forward and backward, shape propagation, gradcheck in float64, and error codes."""

import math

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.gelu import GELU

SHAPES = [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)]


def _exact(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


FORMULAS = {"none": _exact, "tanh": _tanh}


def test_declaration():
    spec = spec_of(GELU)
    assert spec.alias == "gelu" and spec.qualified == "gelu@1"
    assert spec.positional_args == ("approximate",)
    arg = spec.args["approximate"]
    assert arg.type is str and arg.default == "none" and arg.choices == ("none", "tanh") and arg.help
    assert spec.category == "activation"
    assert spec.summary and spec.docstring and spec.examples and spec.reference is not None


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", SHAPES)
def test_numerics_forward_and_backward_out_of_place(approximate, shape):
    model = network(f'gelu("{approximate}")', input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.approximate == approximate and list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)  # the input is never modified
    torch.testing.assert_close(out, FORMULAS[approximate](saved))
    torch.testing.assert_close(out, F.gelu(saved, approximate=approximate))
    torch.testing.assert_close(out, torch.nn.GELU(approximate=approximate)(saved))
    torch.testing.assert_close(out, spec_of(GELU).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    reference_x = saved.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad((FORMULAS[approximate](reference_x) * upstream).sum(), reference_x)
    torch.testing.assert_close(grad, expected)
    torch_x = saved.clone().requires_grad_(True)
    (torch_grad,) = torch.autograd.grad((torch.nn.GELU(approximate=approximate)(torch_x) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, torch_grad)


def test_the_two_approximations_differ_slightly():
    x = torch.linspace(-4, 4, 101).unsqueeze(0)
    exact = network("gelu()", input_shape=("B", 101), output_shape=("B", 101), device="cpu")(x)
    approx = network('gelu(approximate="tanh")', input_shape=("B", 101), output_shape=("B", 101), device="cpu")(x)
    difference = (exact - approx).abs().max().item()
    assert 0 < difference < 1e-3


def test_default_and_provenance():
    node = hndl.resolve("gelu()", input_shape=("B", 4), output_shape=("B", 4)).nodes[0]
    assert node.args["approximate"] == "none" and node.provenance["approximate"] == "default"
    node = hndl.resolve('gelu(approximate="tanh")', input_shape=("B", 4), output_shape=("B", 4)).nodes[0]
    assert node.args["approximate"] == "tanh" and node.provenance["approximate"] == "explicit"


def test_width_propagates_backward_through_the_activation():
    plan = hndl.resolve("linear(16)\ngelu()\nlinear()", input_shape=("B", 8), output_shape=("B", 3))
    assert plan.nodes[2].args["out_features"] == 3
    assert plan.nodes[1].input_shapes["x"] == ("B", 16)
    plan = hndl.resolve("linear()\ngelu()", input_shape=("B", 8, 4), output_shape=("B", 8, 5))
    assert plan.nodes[0].args["out_features"] == 5


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gradcheck_and_gradgradcheck_in_float64(approximate):
    model = network(f'gelu("{approximate}")', input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("source", ['gelu("exact")', 'gelu("TANH")', "gelu(1)", "gelu(True)", "gelu(None)",
                                    'gelu("none", "tanh")', "gelu(inplace=True)"])
def test_invalid_arguments_are_argument_errors(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"


def test_shape_mismatch_is_a_constraint_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("gelu()", input_shape=("B", 4), output_shape=("B", 5))
    assert error.value.code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("gelu()", input_shape=("B", 4), output_shape=("B", 4), input_dtype="int64")
    assert error.value.code == "E_DTYPE"
