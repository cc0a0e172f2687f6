"""matmul@1: the batched product of two activations. Declaration, numerics forward and backward
against torch.matmul at rank 3 and 4 (and the attention scores/values it composes), gradcheck and
gradgradcheck in float64, every extent inferred in both directions, every error code, harness."""

import math

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.matmul import MatMul


@pytest.fixture(scope="module")
def registry():
    return Registry.from_packs("basic")


def _resolve(registry, source, input_shape, output_shape, **kwargs):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry, **kwargs)


def _fails(registry, source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        _resolve(registry, source, input_shape, output_shape, **kwargs)
    assert error.value.remedies
    return error.value


def test_declaration():
    spec = spec_of(MatMul)
    assert spec.alias == "matmul" and spec.qualified == "matmul@1" and spec.version == 1
    assert spec.input_ports() == ("x", "y") and spec.args == {}
    assert str(spec.shape) == "x[B, ..., T, K], y[B, ..., K, S] -> out[B, ..., T, S]"
    assert spec.category == "attention" and spec.shape_text and spec.summary
    assert spec.reference(MatMul()) is torch.matmul
    assert "E_CONSTRAINT" in spec.docstring and "[B, H, T, D]" in spec.docstring


def test_passes_the_harness(registry):
    check_operator(MatMul, registry=registry)


@pytest.mark.parametrize("x_shape, y_shape, out_shape", [
    (("B", 5, 4), ("B", 4, 3), ("B", 5, 3)),
    (("B", 2, 5, 4), ("B", 2, 4, 3), ("B", 2, 5, 3)),
    (("B", 1, 1, 7), ("B", 1, 7, 1), ("B", 1, 1, 1)),
])
def test_numerics_forward_and_backward(registry, x_shape, y_shape, out_shape):
    model = network("matmul(x, y)", input_shape={"x": x_shape, "y": y_shape}, output_shape=out_shape,
                    device="cpu", registry=registry)
    assert list(model.parameters()) == [] and list(model.buffers()) == []
    x = torch.randn(3, *x_shape[1:], requires_grad=True)
    y = torch.randn(3, *y_shape[1:], requires_grad=True)
    out = model(x=x, y=y)
    expected = torch.matmul(x.detach(), y.detach())
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of(MatMul).reference(model.nodes.n_n0)(x.detach(), y.detach()))
    upstream = torch.randn_like(out)
    grad_x, grad_y = torch.autograd.grad((out * upstream).sum(), (x, y))
    torch.testing.assert_close(grad_x, upstream @ y.detach().transpose(-1, -2))
    torch.testing.assert_close(grad_y, x.detach().transpose(-1, -2) @ upstream)


def test_attention_written_with_two_matmuls_matches_torch(registry):
    # scores = q @ k^T / sqrt(E), weights = softmax(scores, dim=-1), out = weights @ v, per head.
    source = ("k_t = transpose(k, -1, -2)\nscores = matmul(q, k_t)\nweights = softmax(scores, dim=-1)\n"
              "matmul(weights, v)")
    shapes = {"q": ("B", 2, 5, 4), "k": ("B", 2, 6, 4), "v": ("B", 2, 6, 3)}
    model = network(source, input_shape=shapes, output_shape=("B", 2, 5, 3), device="cpu", registry=registry)
    q, k, v = (torch.randn(2, *shapes[name][1:]) for name in ("q", "k", "v"))
    out = model(q=q, k=k, v=v)
    weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    torch.testing.assert_close(out, weights @ v)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0))
    assert math.isclose(float(weights.sum(-1).mean()), 1.0, rel_tol=1e-6)


def test_gradcheck_and_gradgradcheck_in_float64(registry):
    model = network("matmul(x, y)", input_shape={"x": ("B", 2, 3, 4), "y": ("B", 2, 4, 2)},
                    output_shape=("B", 2, 3, 2), device="cpu", registry=registry)
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 2, 4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x, y))
    assert torch.autograd.gradgradcheck(module, (x, y))


def test_shapes_infer_forward_from_the_inputs(registry):
    plan = _resolve(registry, "t = transpose(x, 1, 2)\nm = matmul(x, t)\nlinear(m)", ("B", 6, 8), ("B", 6, 2))
    assert plan.node("n1").output_shapes["out"] == ("B", 6, 6)
    assert plan.node("n2").args["in_features"] == 6


def test_t_and_s_infer_backward_from_the_output_contract(registry):
    # S reaches the linear that makes y, T the linear that makes x, both from the output [B, 6, 5].
    source = "t = transpose(x, 1, 2)\ny = linear(t)\na = linear(t)\nl = transpose(a, 1, 2)\nmatmul(l, y)"
    plan = _resolve(registry, source, ("B", 6, 8), ("B", 7, 5))
    assert plan.node("n1").args["out_features"] == 5  # S, from out
    assert plan.node("n2").args["out_features"] == 7  # T, from out through the transpose
    assert plan.node("n4").input_shapes == {"x": ("B", 7, 8), "y": ("B", 8, 5)}


def test_k_infers_from_either_input_to_the_other(registry):
    plan = _resolve(registry, "a = linear(x)\nmatmul(a, y)", {"x": ("B", 5, 3), "y": ("B", 4, 6)}, ("B", 5, 6))
    assert plan.node("n0").args["out_features"] == 4
    plan = _resolve(registry, "t = transpose(y, -1, -2)\nb = linear(t)\nc = transpose(b, -1, -2)\nmatmul(x, c)",
                    {"x": ("B", 5, 4), "y": ("B", 6, 3)}, ("B", 5, 3))
    assert plan.node("n1").args["out_features"] == 4


@pytest.mark.parametrize("x_shape, y_shape, out_shape, text", [
    (("B", 4), ("B", 4), ("B", 4), "needs at least rank 3"),
    (("B", 5, 4), ("B", 3, 2), ("B", 5, 2), "but must equal"),
    (("B", 2, 5, 4), ("B", 3, 4, 2), ("B", 2, 5, 2), "but must equal"),
    (("B", 5, 4), ("B", 2, 4, 3), ("B", 5, 3), "'...' run"),
    (("B", 5, 4), ("B", 4, 3), ("B", 5, 4), "but must equal"),
])
def test_shape_disagreements_are_constraint_errors(registry, x_shape, y_shape, out_shape, text):
    error = _fails(registry, "matmul(x, y)", {"x": x_shape, "y": y_shape}, out_shape)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0" and text in error.message


def test_other_errors(registry):
    shapes = {"x": ("B", 5, 4), "y": ("B", 4, 3)}
    assert _fails(registry, "matmul(x, y, 2)", shapes, ("B", 5, 3)).code == "E_ARGUMENT"
    assert _fails(registry, "matmul(x)", {"x": ("B", 4, 4)}, ("B", 4, 4)).code == "E_BINDING"
    error = _fails(registry, "matmul(x, y)", shapes, ("B", 5, 3), input_dtype={"x": "int64"})
    assert error.code == "E_DTYPE"
