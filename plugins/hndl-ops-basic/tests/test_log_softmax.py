"""log_softmax@1: the explicit, required dim (batch axis rejected with E_ARGUMENT, an axis past
the rank with E_CONSTRAINT, exactly as softmax), numerics against F.log_softmax and nn.LogSoftmax
forward and backward on every rank, stability, gradcheck and gradgradcheck in float64, shape
inference both ways, error codes, harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.log_softmax import LogSoftmax


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(LogSoftmax)
    assert spec.alias == "log_softmax" and spec.qualified == "log_softmax@1" and spec.version == 1
    assert spec.positional_args == ("dim",)
    dim = spec.args["dim"]
    assert dim.type is int and dim.required and dim.help
    assert spec.category == "activation" and str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring and "E_CONSTRAINT" in spec.docstring
    assert issubclass(LogSoftmax, torch.nn.LogSoftmax)


def test_passes_the_harness():
    check_operator(LogSoftmax, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dim", [
    (("B", 6), 1), (("B", 6), -1),
    (("B", 4, 6), 1), (("B", 4, 6), 2), (("B", 4, 6), -2),
    (("B", 2, 3, 3), 1), (("B", 2, 3, 3), -1), (("B", 2, 3, 3), -3),
])
def test_numerics_forward_and_backward_on_every_rank(shape, dim):
    model = network(f"log_softmax({dim})", input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    assert module.dim == dim and model.plan.nodes[0].args["dim"] == dim  # kept as written
    assert list(model.parameters()) == []
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    torch.testing.assert_close(out, F.log_softmax(saved, dim=dim))
    torch.testing.assert_close(out, torch.nn.LogSoftmax(dim=dim)(saved))
    torch.testing.assert_close(out, torch.log(F.softmax(saved, dim=dim)))
    torch.testing.assert_close(out, spec_of(LogSoftmax).reference(module)(saved))
    torch.testing.assert_close(out.exp().sum(dim=dim), torch.ones_like(out.sum(dim=dim)))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    # d log_softmax: g - softmax * sum(g)
    torch.testing.assert_close(grad, upstream - out.detach().exp() * upstream.sum(dim=dim, keepdim=True))
    torch_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.log_softmax(torch_x, dim=dim) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected)


def test_normalizes_along_the_named_axis_only():
    model = network("log_softmax(dim=1)", input_shape=("B", 4, 6), output_shape=("B", 4, 6), device="cpu")
    out = model(torch.randn(2, 4, 6))
    torch.testing.assert_close(out.exp().sum(dim=1), torch.ones(2, 6))
    assert not torch.allclose(out.exp().sum(dim=2), torch.ones(2, 4))


def test_large_logits_stay_finite():
    model = network("log_softmax(-1)", input_shape=("B", 3), output_shape=("B", 3), device="cpu")
    x = torch.tensor([[1000.0, 1000.0, -1000.0]], requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, torch.tensor([[-0.69314718, -0.69314718, -2000.69314718]]))
    out[0, 2].backward()
    assert torch.isfinite(x.grad).all()


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("log_softmax(-2)", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_shape_infers_in_both_directions():
    backward = hndl.resolve("linear()\nlog_softmax(-1)", input_shape=("B", 32), output_shape=("B", 10))
    assert backward.nodes[0].args["out_features"] == 10
    forward = hndl.resolve("linear(7)\nlog_softmax(1)\nlinear()", input_shape=("B", 5, 3), output_shape=("B", 5, 2))
    assert forward.nodes[1].output_shapes["out"] == ("B", 5, 7)


def test_dim_is_required():
    error = _fails("log_softmax()", ("B", 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "dim"


@pytest.mark.parametrize("shape", [("B", 4), ("B", 4, 6), ("B", 2, 3, 3)])
def test_dim_zero_is_the_batch_axis_and_an_argument_error(shape):
    error = _fails("log_softmax(0)", shape)
    assert error.code == "E_ARGUMENT" and error.location.field == "dim" and "batch" in error.message


@pytest.mark.parametrize("shape, dim", [(("B", 4), -2), (("B", 4, 6), -3), (("B", 2, 3, 3), -4)])
def test_a_negative_dim_naming_the_batch_axis_is_an_argument_error(shape, dim):
    error = _fails(f"log_softmax({dim})", shape)
    assert error.code == "E_ARGUMENT" and error.location.node == "n0" and "batch" in error.message


@pytest.mark.parametrize("shape, dim", [(("B", 4), 2), (("B", 4), -3), (("B", 4, 6), 3), (("B", 2, 3, 3), -5)])
def test_a_dim_beyond_the_rank_is_a_constraint_error(shape, dim):
    error = _fails(f"log_softmax(dim={dim})", shape)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0" and "out of range" in error.message


def test_out_of_range_is_detected_when_the_rank_comes_from_downstream():
    error = _fails("linear(x, 8)\nlog_softmax(2)", ("B", 4), ("B", 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


@pytest.mark.parametrize("source", ["log_softmax(1.0)", "log_softmax(True)", 'log_softmax("last")',
                                    "log_softmax(None)", "log_softmax(1, 2)", "log_softmax(dim=1, dtype=1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4)).code == "E_ARGUMENT"


def test_shape_and_dtype_errors():
    assert _fails("log_softmax(-1)", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails("log_softmax(-1)", ("B", 4), input_dtype="int64").code == "E_DTYPE"
