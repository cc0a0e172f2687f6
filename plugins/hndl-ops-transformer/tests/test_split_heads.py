"""split_heads@1: declaration, D and E inferred from each other in both directions, the layout
against transformers' view(B, T, H, E).transpose(1, 2) and torch.nn.MultiheadAttention's split,
float64 gradcheck and gradgradcheck, the harness, and every error code it raises."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.split_heads import SplitHeads


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(SplitHeads)
    assert spec.alias == "split_heads" and spec.qualified == "split_heads@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required and spec.args["heads"].min == 1 and spec.args["heads"].dim == "H"
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, H, T, E]"
    assert "[B, H, T, E]" in spec.docstring  # the rank-4 layout rule is documented


def test_check_operator():
    check_operator(SplitHeads)


def test_per_head_width_is_inferred_forward():
    plan = hndl.resolve("linear(64)\nsplit_heads(4)\nmerge_heads()\nlinear()", input_shape=("B", 5, 8),
                        output_shape=("B", 5, 8))
    node = plan.nodes[1]
    assert node.args == {"heads": 4} and node.provenance == {"heads": "explicit"}
    assert node.input_shapes["x"] == ("B", 5, 64) and node.output_shapes["out"] == ("B", 4, 5, 16)


def test_width_is_inferred_backward_from_the_heads():
    plan = hndl.resolve("linear()\nsplit_heads(3)", input_shape=("B", 5, 8), output_shape=("B", 3, 5, 7))
    assert plan.nodes[0].args["out_features"] == 21
    assert plan.nodes[1].input_shapes["x"] == ("B", 5, 21)


def test_matches_the_transformers_layout_and_multihead_attentions_split():
    model = network("split_heads(4)", input_shape=("B", 6, 32), output_shape=("B", 4, 6, 8), device="cpu")
    x = torch.randn(3, 6, 32, requires_grad=True)
    out = model(x)
    assert torch.equal(out, x.view(3, 6, 4, 8).transpose(1, 2))  # transformers' LLaMA/T5 attention
    assert torch.equal(out, spec_of(SplitHeads).reference(model.nodes.n_n0)(x))
    for b, h, t, e in [(0, 0, 0, 0), (2, 3, 5, 7), (1, 2, 4, 1)]:
        assert out[b, h, t, e] == x[b, t, h * 8 + e]
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, upstream)
    assert torch.equal(grad, upstream.transpose(1, 2).reshape(3, 6, 32))


def test_the_result_is_a_view():
    model = network("split_heads(2)", input_shape=("B", 3, 4), output_shape=("B", 2, 3, 2), device="cpu")
    x = torch.randn(2, 3, 4)
    assert model.nodes.n_n0(x).data_ptr() == x.data_ptr()


def test_float64_gradcheck_and_gradgradcheck():
    layer = network("split_heads(2)", input_shape=("B", 3, 4), output_shape=("B", 2, 3, 2),
                    device="cpu").nodes.n_n0
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


# -- errors ---------------------------------------------------------------------------------------------
def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    error = _fails("split_heads(3)", ("B", 4, 16), ("B", 3, 4, 5))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "16" in error.message and "3" in error.message


def test_divisibility_is_checked_on_an_inferred_width_too():
    error = _fails("linear(10)\nsplit_heads(4, name='heads')\nmerge_heads()", ("B", 4, 5), ("B", 4, 10))
    assert error.code == "E_CONSTRAINT" and error.location.node == "heads"


def test_a_head_count_contradicting_the_output_is_a_constraint_error():
    assert _fails("split_heads(2)", ("B", 4, 16), ("B", 4, 4, 4)).code == "E_CONSTRAINT"
    assert _fails("split_heads(2)", ("B", 4, 16), ("B", 2, 4, 4)).code == "E_CONSTRAINT"


def test_direct_construction_checks_divisibility():
    with pytest.raises(HNDLError) as error:
        SplitHeads(3, D=8)
    assert error.value.code == "E_CONSTRAINT"
    assert SplitHeads(2, D=8).head_dim == 4


@pytest.mark.parametrize("source", ["split_heads()", "split_heads(0)", "split_heads(True)", "split_heads(2.0)",
                                    "split_heads(2, dims=4)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_wrong_ranks_are_constraint_errors():
    assert _fails("split_heads(2)", ("B", 8), ("B", 2, 4)).code == "E_CONSTRAINT"
    assert _fails("split_heads(2)", ("B", 4, 8), ("B", 4, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("split_heads(2)", ("B", 4, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"
