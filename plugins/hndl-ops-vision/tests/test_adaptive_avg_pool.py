"""adaptive_avg_pool2d@1 (alias adaptive_avg_pool): output_size fixes the output extents or,
omitted, is inferred from them; the input extents are never inferred from the output;
numerics against nn.AdaptiveAvgPool2d and the handwritten window formula (forward and input
gradient), gradcheck/gradgradcheck in float64, and every error code."""

import math

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.adaptive_avg_pool import AdaptiveAvgPool


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _windows(x, out_h, out_w):
    """Row i averages rows floor(i * H / H_out) .. ceil((i + 1) * H / H_out) - 1; the same for columns."""
    h, w = x.shape[2:]
    rows = []
    for i in range(out_h):
        top, bottom = (i * h) // out_h, math.ceil((i + 1) * h / out_h)
        cols = []
        for j in range(out_w):
            left, right = (j * w) // out_w, math.ceil((j + 1) * w / out_w)
            cols.append(x[:, :, top:bottom, left:right].mean(dim=(2, 3)))
        rows.append(torch.stack(cols, dim=-1))
    return torch.stack(rows, dim=-2)


def test_declaration():
    spec = spec_of(AdaptiveAvgPool)
    assert spec.alias == "adaptive_avg_pool" and spec.qualified == "adaptive_avg_pool2d@1"
    assert spec.category == "pooling"
    assert spec.positional_args == ("output_size",)
    assert spec.args["output_size"].inferable and spec.args["output_size"].type == "pair"
    assert spec.reference is not None and spec.relation is not None
    assert all(arg.help for arg in spec.args.values())


def test_explicit_output_size_fixes_the_output_for_any_input():
    for size in ((7, 7), (4, 9), (2, 2)):
        plan = hndl.resolve("adaptive_avg_pool((3, 2))\nflatten()", input_shape=("B", 5, *size), output_shape=("B", 30))
        assert plan.nodes[0].output_shapes["out"] == ("B", 5, 3, 2)
        assert plan.nodes[0].provenance["output_size"] == "explicit"


def test_global_average_pooling_feeds_a_classifier():
    plan = hndl.resolve("adaptive_avg_pool(1)\nflatten()\nlinear()", input_shape=("B", 8, 7, 7), output_shape=("B", 10))
    assert plan.nodes[0].args["output_size"] == (1, 1)
    assert plan.nodes[2].args["in_features"] == 8


def test_omitted_output_size_is_inferred_from_the_output():
    plan = hndl.resolve("adaptive_avg_pool()", input_shape=("B", 4, 9, 7), output_shape=("B", 4, 3, 2))
    node = plan.nodes[0]
    assert node.args["output_size"] == (3, 2) and node.provenance["output_size"] == "inferred"
    # through a consumer: a kernel-3 conv with padding 1 keeps 5 x 5
    plan = hndl.resolve("adaptive_avg_pool()\nconv(2, kernel_size=3, padding=1)", input_shape=("B", 4, 9, 9),
                        output_shape=("B", 2, 5, 5))
    assert plan.nodes[0].args["output_size"] == (5, 5)


def test_omitted_output_size_with_an_undetermined_output_is_ambiguous():
    # 4 channels and 16 features leave H_out * W_out = 4 with two unknown factors
    assert _fails("adaptive_avg_pool()\nflatten()", ("B", 4, 9, 9), ("B", 16)).code == "E_AMBIGUOUS"


def test_the_input_extent_is_never_inferred_from_the_output():
    error = _fails("linear()\nreshape(4)\nadaptive_avg_pool(2)", ("B", 8), ("B", 4, 2, 2))
    assert error.code == "E_AMBIGUOUS"
    assert "n2 (adaptive_avg_pool) x is [B, 4, ?, ?]" in error.chain


def test_explicit_output_size_contradicting_the_output_is_a_constraint_error():
    assert _fails("adaptive_avg_pool(2)", ("B", 4, 8, 8), ("B", 4, 2, 3)).code == "E_CONSTRAINT"
    assert _fails("adaptive_avg_pool(2)", ("B", 4, 8, 8), ("B", 3, 2, 2)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("in_size, out_size", [((9, 7), (3, 2)), ((8, 8), (1, 1)), ((10, 7), (4, 3)),
                                                ((3, 3), (5, 4))])
def test_numerics_against_nn_adaptiveavgpool2d_and_the_window_formula(in_size, out_size):
    model = network(f"adaptive_avg_pool({out_size})", input_shape=("B", 3, *in_size),
                    output_shape=("B", 3, *out_size), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.AdaptiveAvgPool2d(out_size)
    x = torch.randn(2, 3, *in_size, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _windows(x.detach(), *out_size))
    torch.testing.assert_close(out, spec_of(AdaptiveAvgPool).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("adaptive_avg_pool((2, 3))", input_shape=("B", 2, 5, 7), output_shape=("B", 2, 2, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize("args", ["0", "-1", "(2, 0)", "(1, 2, 3)", "1.0", "True", "output_size=(2, 2), mode=1"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"adaptive_avg_pool({args})", ("B", 2, 8, 8), ("B", 2, 2, 2)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("adaptive_avg_pool(1)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("adaptive_avg_pool(1)", ("B", 2, 4, 4), ("B", 2, 1, 1), input_dtype="int64").code == "E_DTYPE"
