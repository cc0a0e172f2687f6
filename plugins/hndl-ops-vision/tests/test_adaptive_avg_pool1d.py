"""adaptive_avg_pool1d@1: the [B, C, L] axis order; output_size fixes the output length or,
omitted, is inferred from it; the input length is never inferred from the output; numerics
against nn.AdaptiveAvgPool1d and the handwritten window formula (forward and input gradient),
gradcheck/gradgradcheck in float64, every error code, and the public harness."""

import math

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.adaptive_avg_pool1d import AdaptiveAvgPool1d


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _windows(x, out_length):
    """Element i averages elements floor(i * L / L_out) .. ceil((i + 1) * L / L_out) - 1."""
    length = x.shape[2]
    return torch.stack([x[:, :, (i * length) // out_length:math.ceil((i + 1) * length / out_length)].mean(dim=2)
                        for i in range(out_length)], dim=-1)


def test_declaration_documents_the_axis_order():
    spec = spec_of(AdaptiveAvgPool1d)
    assert spec.alias == "adaptive_avg_pool1d" and spec.qualified == "adaptive_avg_pool1d@1"
    assert spec.category == "pooling"
    assert str(spec.shape) == "x[B, C, L] -> out[B, C, L_out]"
    assert "[B, C, L]" in spec.docstring and "[B, T, D]" in spec.docstring
    assert spec.positional_args == ("output_size",)
    assert spec.args["output_size"].inferable and spec.args["output_size"].type is int
    assert spec.reference is not None and spec.relation is not None
    assert all(arg.help for arg in spec.args.values())


def test_the_public_harness_passes():
    check_operator(AdaptiveAvgPool1d, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_explicit_output_size_fixes_the_output_for_any_input():
    for length in (7, 12, 3, 1):
        plan = hndl.resolve("adaptive_avg_pool1d(3)\nflatten()", input_shape=("B", 5, length), output_shape=("B", 15))
        assert plan.nodes[0].output_shapes["out"] == ("B", 5, 3)
        assert plan.nodes[0].args["output_size"] == 3 and plan.nodes[0].provenance["output_size"] == "explicit"


def test_global_average_pooling_feeds_a_classifier():
    plan = hndl.resolve("conv1d(8, kernel_size=3)\nadaptive_avg_pool1d(1)\nflatten()\nlinear()",
                        input_shape=("B", 2, 20), output_shape=("B", 10))
    assert plan.nodes[1].output_shapes["out"] == ("B", 8, 1)
    assert plan.nodes[3].args["in_features"] == 8


def test_omitted_output_size_is_inferred_from_the_output():
    plan = hndl.resolve("adaptive_avg_pool1d()", input_shape=("B", 4, 9), output_shape=("B", 4, 4))
    node = plan.nodes[0]
    assert node.args["output_size"] == 4 and node.provenance["output_size"] == "inferred"
    # through consumers: flatten's element count, then a kernel-3 conv1d with padding 1 keeping the length
    plan = hndl.resolve("adaptive_avg_pool1d()\nflatten()", input_shape=("B", 4, 9), output_shape=("B", 12))
    assert plan.nodes[0].args["output_size"] == 3
    plan = hndl.resolve("adaptive_avg_pool1d()\nconv1d(2, kernel_size=3, padding=1)", input_shape=("B", 4, 9),
                        output_shape=("B", 2, 5))
    assert plan.nodes[0].args["output_size"] == 5


def test_omitted_output_size_with_an_undetermined_output_is_ambiguous():
    # linear infers its in_features, so nothing fixes the pooled length
    assert _fails("adaptive_avg_pool1d()\nflatten()\nlinear(10)", ("B", 4, 9), ("B", 10)).code == "E_AMBIGUOUS"


def test_the_input_length_is_never_inferred_from_the_output():
    error = _fails("linear()\nreshape(4)\nadaptive_avg_pool1d(2)", ("B", 8), ("B", 4, 2))
    assert error.code == "E_AMBIGUOUS"
    assert "n2 (adaptive_avg_pool1d) x is [B, 4, ?]" in error.chain


def test_explicit_output_size_contradicting_the_output_is_a_constraint_error():
    assert _fails("adaptive_avg_pool1d(2)", ("B", 4, 8), ("B", 4, 3)).code == "E_CONSTRAINT"
    assert _fails("adaptive_avg_pool1d(2)", ("B", 4, 8), ("B", 3, 2)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("in_length, out_length", [(9, 4), (8, 1), (10, 3), (3, 5), (7, 7)])
def test_numerics_against_nn_adaptiveavgpool1d_and_the_window_formula(in_length, out_length):
    model = network(f"adaptive_avg_pool1d({out_length})", input_shape=("B", 3, in_length),
                    output_shape=("B", 3, out_length), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.AdaptiveAvgPool1d(out_length)
    x = torch.randn(2, 3, in_length, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, _windows(x.detach(), out_length))
    torch.testing.assert_close(out, spec_of(AdaptiveAvgPool1d).reference(layer)(x))
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("adaptive_avg_pool1d(3)", input_shape=("B", 2, 7), output_shape=("B", 2, 3), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize("args", ["0", "-1", "(2, 2)", "1.0", "True", "output_size=2, mode=1", "2, 3"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"adaptive_avg_pool1d({args})", ("B", 2, 8), ("B", 2, 2)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8, 8)])
def test_ranks_other_than_three_are_constraint_errors(shape):
    assert _fails("adaptive_avg_pool1d(1)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("adaptive_avg_pool1d(1)", ("B", 2, 4), ("B", 2, 1), input_dtype="int64").code == "E_DTYPE"


def test_runtime_length_mismatch_is_a_runtime_error():
    model = network("adaptive_avg_pool1d(2)", input_shape=("B", 2, 8), output_shape=("B", 2, 2), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 2, 9))
    assert error.value.code == "E_RUNTIME"
