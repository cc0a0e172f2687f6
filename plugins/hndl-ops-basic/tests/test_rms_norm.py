"""rms_norm@1: declaration, the normalized width read from the input, numerics against the
handwritten x / sqrt(mean(x^2) + eps) * weight, F.rms_norm and nn.RMSNorm forward and
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
from hndl_ops_basic.rms_norm import RMSNorm


def _formula(x, weight, eps):
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * weight


def _model(source, shape, output_shape=None, **kwargs):
    return network(source, input_shape=shape, output_shape=output_shape or shape, device="cpu", **kwargs)


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(RMSNorm)
    assert spec.alias == "rms_norm" and spec.qualified == "rms_norm@1"
    assert str(spec.shape) == "x[B, ..., D] -> out[B, ..., D]"
    assert spec.relation is feature_axis_only
    assert spec.positional_args == ("eps",)
    eps = spec.args["eps"]
    assert eps.type is float and eps.default == 1e-6 and eps.min == 0 and eps.exclusive_min and eps.help
    assert set(spec.args) == {"eps"}  # the width is never an argument
    assert spec.category == "normalization"
    assert spec.reference is not None


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_width_is_read_from_the_input_and_the_scale_starts_at_one(shape):
    model = _model("rms_norm()", shape)
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert node.input_shapes["x"] == shape and node.output_shapes["out"] == shape
    assert node.args == {"eps": 1e-6} and node.provenance["eps"] == "default"
    assert module.normalized_shape == (8,) and module.eps == 1e-6
    assert [name for name, _ in module.named_parameters()] == ["weight"]
    assert torch.equal(module.weight, torch.ones(8))


def test_width_propagates_backward_from_the_output_contract():
    plan = hndl.resolve("linear()\nrms_norm()", input_shape=("B", 4, 16), output_shape=("B", 4, 7))
    assert plan.nodes[0].args["out_features"] == 7
    assert plan.nodes[1].input_shapes["x"] == ("B", 4, 7)


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_numerics_forward_and_backward_against_formula_functional_and_module(shape):
    model = _model("rms_norm(eps=1e-4)", shape)
    module = model.nodes.n_n0
    with torch.no_grad():
        module.weight.copy_(torch.randn(8))
    plain = torch.nn.RMSNorm(8, eps=1e-4)
    plain.load_state_dict(module.state_dict())
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, _formula(saved, module.weight, 1e-4))
    torch.testing.assert_close(out, spec_of(RMSNorm).reference(module)(saved))
    torch.testing.assert_close(out, F.rms_norm(saved, (8,), module.weight, 1e-4))
    torch.testing.assert_close(out, plain(saved))
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad((out * upstream).sum(), (x, module.weight))
    formula_x = saved.clone().requires_grad_(True)
    weight = module.weight.detach().clone().requires_grad_(True)
    by_hand = torch.autograd.grad((_formula(formula_x, weight, 1e-4) * upstream).sum(), (formula_x, weight))
    for got, want in zip(grads, by_hand):
        torch.testing.assert_close(got, want)
    torch_x = saved.clone().requires_grad_(True)
    by_torch = torch.autograd.grad((plain(torch_x) * upstream).sum(), (torch_x, plain.weight))
    for got, want in zip(grads, by_torch):
        torch.testing.assert_close(got, want)


def test_the_mean_is_not_subtracted():
    model = _model("rms_norm()", ("B", 4))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = x / torch.sqrt(torch.tensor(7.5) + 1e-6)
    torch.testing.assert_close(model(x), expected)


def test_explicit_eps_is_recorded_and_used():
    model = _model("rms_norm(0.5)", ("B", 3))
    assert model.plan.nodes[0].args["eps"] == 0.5 and model.plan.nodes[0].provenance["eps"] == "explicit"
    x = torch.tensor([[1.0, 1.0, 1.0]])
    torch.testing.assert_close(model(x), x / (1.5 ** 0.5))


@pytest.mark.parametrize("value", [0.0, 3.0, -250.0])
def test_constant_input_stays_finite_forward_and_backward(value):
    model = _model("rms_norm()", ("B", 5, 8))
    module = model.nodes.n_n0
    x = torch.full((2, 5, 8), value, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _formula(x.detach(), module.weight.detach(), 1e-6))
    grads = torch.autograd.grad((out * torch.randn_like(out)).sum(), (x, module.weight))
    assert all(torch.isfinite(grad).all() for grad in grads)


def test_train_and_eval_are_identical_and_draw_nothing():
    model = _model("rms_norm()", ("B", 6))
    x = torch.randn(4, 6)
    before = torch.get_rng_state()
    trained = model(x)
    model.eval()
    assert torch.equal(model(x), trained)
    assert torch.equal(torch.get_rng_state(), before)
    assert list(model.buffers()) == []


def test_gradcheck_and_gradgradcheck_in_float64():
    model = _model("rms_norm(1e-3)", ("B", 3, 4))
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))
    weight = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def with_weight(x, weight):
        return functional_call(module, {"weight": weight}, (x,))

    assert torch.autograd.gradcheck(with_weight, (x, weight))
    assert torch.autograd.gradgradcheck(with_weight, (x, weight))


@pytest.mark.parametrize("source", [
    "rms_norm(0)", "rms_norm(-1e-6)", "rms_norm(True)", 'rms_norm("1e-6")', "rms_norm(None)",
    "rms_norm(1e-6, 1e-5)", "rms_norm(elementwise_affine=False)",
])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8)).code == "E_ARGUMENT"


def test_rank_four_is_rejected_rather_than_normalized():
    error = _fails("rms_norm()", ("B", 3, 4, 4))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"


def test_shape_mismatch_is_a_constraint_error():
    assert _fails("rms_norm()", ("B", 8), ("B", 9)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("rms_norm()", ("B", 8), input_dtype="int32").code == "E_DTYPE"
