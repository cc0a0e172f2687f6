"""layer_norm@1: declaration, the normalized width read from the input (never an argument),
numerics against the population-variance formula, F.layer_norm and nn.LayerNorm forward and
backward, finiteness on constant inputs, gradcheck in float64, and error codes."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.feature_axis import feature_axis_only
from hndl_ops_basic.layer_norm import LayerNorm


def _formula(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    normalized = (x - mean) / torch.sqrt(variance + eps)
    return normalized if weight is None else normalized * weight + bias


def _model(source, shape, output_shape=None, **kwargs):
    return network(source, input_shape=shape, output_shape=output_shape or shape, device="cpu", **kwargs)


def _randomize(module):
    with torch.no_grad():
        module.weight.copy_(torch.randn_like(module.weight))
        module.bias.copy_(torch.randn_like(module.bias))


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(LayerNorm)
    assert spec.alias == "layer_norm" and spec.qualified == "layer_norm@1"
    assert str(spec.shape) == "x[B, ..., D] -> out[B, ..., D]"
    assert spec.relation is feature_axis_only
    assert spec.positional_args == ("eps",)
    eps = spec.args["eps"]
    assert eps.type is float and eps.default == 1e-5 and eps.min == 0 and eps.exclusive_min
    affine = spec.args["elementwise_affine"]
    assert affine.type is bool and affine.default is True and not affine.positional
    assert set(spec.args) == {"eps", "elementwise_affine"}  # the width is never an argument
    assert spec.category == "normalization"
    assert all(arg.help for arg in spec.args.values()) and spec.reference is not None


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_width_is_read_from_the_input_and_parameters_start_at_identity(shape):
    model = _model("layer_norm()", shape)
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert node.input_shapes["x"] == shape and node.output_shapes["out"] == shape
    assert node.args == {"eps": 1e-5, "elementwise_affine": True}
    assert node.provenance["eps"] == "default" and node.provenance["elementwise_affine"] == "default"
    assert module.normalized_shape == (8,)
    assert torch.equal(module.weight, torch.ones(8)) and torch.equal(module.bias, torch.zeros(8))


def test_width_propagates_backward_from_the_output_contract():
    plan = hndl.resolve("linear()\nlayer_norm()", input_shape=("B", 16), output_shape=("B", 7))
    assert plan.nodes[0].args["out_features"] == 7
    assert plan.nodes[1].input_shapes["x"] == ("B", 7)
    plan = hndl.resolve("linear()\nlayer_norm()", input_shape=("B", 4, 16), output_shape=("B", 4, 7))
    assert plan.nodes[0].args["out_features"] == 7


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_numerics_forward_and_backward_against_formula_functional_and_module(shape):
    model = _model("layer_norm(1e-3)", shape)
    module = model.nodes.n_n0
    _randomize(module)
    plain = torch.nn.LayerNorm(8, eps=1e-3)
    plain.load_state_dict(module.state_dict())
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, _formula(saved, module.weight, module.bias, 1e-3))
    torch.testing.assert_close(out, F.layer_norm(saved, (8,), module.weight, module.bias, 1e-3))
    torch.testing.assert_close(out, plain(saved))
    torch.testing.assert_close(out, spec_of(LayerNorm).reference(module)(saved))
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad((out * upstream).sum(), (x, module.weight, module.bias))
    reference_x = saved.clone().requires_grad_(True)
    expected = torch.autograd.grad((plain(reference_x) * upstream).sum(), (reference_x, plain.weight, plain.bias))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)
    formula_x = saved.clone().requires_grad_(True)
    weight = module.weight.detach().clone().requires_grad_(True)
    bias = module.bias.detach().clone().requires_grad_(True)
    by_hand = torch.autograd.grad((_formula(formula_x, weight, bias, 1e-3) * upstream).sum(), (formula_x, weight, bias))
    for got, want in zip(grads, by_hand):
        torch.testing.assert_close(got, want)


def test_without_affine_there_are_no_parameters():
    model = _model("layer_norm(elementwise_affine=False)", ("B", 4, 6))
    module = model.nodes.n_n0
    assert list(model.parameters()) == [] and module.weight is None and module.bias is None
    x = torch.randn(2, 4, 6)
    out = model(x)
    torch.testing.assert_close(out, _formula(x, None, None, 1e-5))
    torch.testing.assert_close(out, F.layer_norm(x, (6,)))
    torch.testing.assert_close(out, spec_of(LayerNorm).reference(module)(x))
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 4), atol=1e-6, rtol=0)


@pytest.mark.parametrize("value", [0.0, 3.0, -250.0])
def test_constant_input_stays_finite_forward_and_backward(value):
    model = _model("layer_norm()", ("B", 5, 8))
    module = model.nodes.n_n0
    _randomize(module)
    x = torch.full((2, 5, 8), value, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, module.bias.detach().expand(2, 5, 8))  # zero variance: only the shift
    grads = torch.autograd.grad((out * torch.randn_like(out)).sum(), (x, module.weight, module.bias))
    assert all(torch.isfinite(grad).all() for grad in grads)


def test_train_and_eval_are_identical_and_draw_nothing():
    model = _model("layer_norm()", ("B", 6))
    x = torch.randn(4, 6)
    before = torch.get_rng_state()
    trained = model(x)
    model.eval()
    assert torch.equal(model(x), trained)
    assert torch.equal(torch.get_rng_state(), before)
    assert list(model.buffers()) == []


def test_gradcheck_and_gradgradcheck_in_float64():
    model = _model("layer_norm(1e-3)", ("B", 3, 4))
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))
    weight = torch.randn(4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def with_parameters(x, weight, bias):
        return functional_call(module, {"weight": weight, "bias": bias}, (x,))

    assert torch.autograd.gradcheck(with_parameters, (x, weight, bias))
    assert torch.autograd.gradgradcheck(with_parameters, (x, weight, bias))


@pytest.mark.parametrize("source", [
    "layer_norm(0)", "layer_norm(-1e-5)", "layer_norm(True)", 'layer_norm("1e-5")', "layer_norm(None)",
    "layer_norm(elementwise_affine=1)", "layer_norm(1e-5, False)", "layer_norm(normalized_shape=8)",
])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8)).code == "E_ARGUMENT"


def test_rank_four_is_rejected_rather_than_normalized():
    error = _fails("layer_norm()", ("B", 3, 4, 4))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"


def test_shape_mismatch_is_a_constraint_error():
    assert _fails("layer_norm()", ("B", 8), ("B", 9)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("layer_norm()", ("B", 8), input_dtype="int64").code == "E_DTYPE"
