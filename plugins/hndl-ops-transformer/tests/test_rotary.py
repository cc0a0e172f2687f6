"""rotary@1: declaration, R = E inferred both ways (full rotary) and R <= E (partial), numerics
against transformers' apply_rotary_pos_emb (LLaMA) and GPT-NeoX's partial rotary, the relative-
position property, float64 gradcheck and gradgradcheck in x and in the table, the harness, and
every error code it raises."""

import pytest
import torch
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.rotary_op import Rotary


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _model(heads, length, width, rotated, partial=False):
    source = "rotary(x, rope, partial=True)" if partial else "rotary(x, rope)"
    model = network(source, input_shape={"x": ("B", heads, length, width), "rope": ("B", 2, length, rotated)},
                    output_shape=("B", heads, length, width), device="cpu")
    return model, model.nodes.n_n0


def _rope(length, rotated, batch=2, theta=10000.0):
    positions = torch.arange(length, dtype=torch.float32)
    inv_freq = 1.0 / theta ** (torch.arange(0, rotated, 2, dtype=torch.float32) / rotated)
    angles = torch.cat([positions[:, None] * inv_freq] * 2, dim=-1)
    return torch.stack((angles.cos(), angles.sin())).expand(batch, 2, length, rotated).clone()


def test_declaration():
    spec = spec_of(Rotary)
    assert spec.alias == "rotary" and spec.qualified == "rotary@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == () and spec.args["partial"].default is False
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, H, T, E], rope[B, 2, T, R] -> out[B, H, T, E]"
    assert "[B, H, T, E]" in spec.docstring


def test_check_operator():
    check_operator(Rotary)


# -- inference ----------------------------------------------------------------------------------------
def test_full_rotary_infers_the_head_width_from_the_table():
    source = "q = split_heads(linear(x), 4)\nrope = rotary_embedding(x, 6)\nout = merge_heads(rotary(q, rope))\n"
    plan = hndl.resolve(source + "out = linear(out, 5)", input_shape=("B", 3, 2), output_shape=("B", 3, 5))
    assert plan.nodes[0].args["out_features"] == 24  # E = R = 6, D = 4 * 6


def test_full_rotary_infers_the_table_width_from_the_heads():
    node = hndl.resolve("rope = rotary_embedding(x)\nq = split_heads(x, 2)\nout = merge_heads(rotary(q, rope))",
                        input_shape=("B", 3, 12), output_shape=("B", 3, 12)).nodes[0]
    assert node.args["dims"] == 6


def test_partial_rotary_keeps_the_table_width_given():
    plan = hndl.resolve("rope = rotary_embedding(x, 2)\nq = split_heads(x, 2)\n"
                        "out = merge_heads(rotary(q, rope, partial=True))",
                        input_shape=("B", 3, 12), output_shape=("B", 3, 12))
    assert plan.nodes[2].input_shapes == {"x": ("B", 2, 3, 6), "rope": ("B", 2, 3, 2)}
    assert plan.nodes[2].args == {"partial": True}


# -- numerics -----------------------------------------------------------------------------------------
def test_matches_llamas_apply_rotary_pos_emb():
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
                         num_hidden_layers=1, vocab_size=10)
    embedding = LlamaRotaryEmbedding(config)
    model, layer = _model(4, 6, 16, 16)
    x = torch.randn(2, 4, 6, 16, requires_grad=True)
    cos, sin = embedding(x, torch.arange(6)[None].expand(2, 6))
    rope = torch.stack((cos, sin), dim=1)
    ours = model(x=x, rope=rope)
    expected, _ = apply_rotary_pos_emb(x, x, cos, sin)
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    torch.testing.assert_close(ours, spec_of(Rotary).reference(layer)(x, rope), rtol=0, atol=0)
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(torch.autograd.grad(ours, x, upstream)[0],
                               torch.autograd.grad(expected, x, upstream)[0])


def test_partial_rotary_matches_gpt_neox():
    config = GPTNeoXConfig(hidden_size=32, num_attention_heads=2, rotary_pct=0.25, num_hidden_layers=1,
                           intermediate_size=8, vocab_size=10)
    embedding = GPTNeoXRotaryEmbedding(config)
    model, layer = _model(2, 5, 16, 4, partial=True)
    x = torch.randn(2, 2, 5, 16)
    cos, sin = embedding(x, torch.arange(5)[None].expand(2, 5))
    expected, _ = neox_apply(x, x, cos, sin)
    ours = model(x=x, rope=torch.stack((cos, sin), dim=1))
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    assert torch.equal(ours[..., 4:], x[..., 4:])


def test_scores_depend_on_the_relative_position_only():
    torch.manual_seed(0)
    model, _ = _model(1, 8, 8, 8)
    rope = _rope(8, 8, batch=1)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    turned_q = model(x=q.expand(1, 1, 8, 8).contiguous(), rope=rope)[0, 0]
    turned_k = model(x=k.expand(1, 1, 8, 8).contiguous(), rope=rope)[0, 0]
    scores = turned_q @ turned_k.T
    for offset in range(-3, 4):
        diagonal = torch.diagonal(scores, offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=1e-5, atol=1e-5)


def test_rotation_preserves_each_pairs_norm():
    model, _ = _model(2, 5, 8, 8)
    x = torch.randn(3, 2, 5, 8)
    out = model(x=x, rope=_rope(5, 8, batch=3))
    pairs = lambda t: t[..., :4].pow(2) + t[..., 4:].pow(2)  # noqa: E731
    torch.testing.assert_close(pairs(out), pairs(x))


@pytest.mark.parametrize("partial", [False, True])
def test_float64_gradcheck_and_gradgradcheck(partial):
    _, layer = _model(2, 3, 4, 2 if partial else 4, partial=partial)
    x = torch.randn(2, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    rope = _rope(3, 2 if partial else 4).double().requires_grad_()
    assert torch.autograd.gradcheck(layer, (x, rope))
    assert torch.autograd.gradgradcheck(layer, (x, rope))


def test_forward_is_deterministic():
    model, _ = _model(2, 5, 8, 8)
    x, rope = torch.randn(2, 2, 5, 8), _rope(5, 8)
    model.train()
    first = model(x=x, rope=rope)
    model.eval()
    assert torch.equal(first, model(x=x, rope=rope))


# -- errors ---------------------------------------------------------------------------------------------
def _contracts(width, rotated, length=4, table_length=None):
    return {"x": ("B", 2, length, width), "rope": ("B", 2, table_length or length, rotated)}, ("B", 2, length, width)


def test_full_rotary_with_another_table_width_is_a_constraint_error():
    inputs, output = _contracts(8, 4)
    assert _fails("rotary(x, rope)", inputs, output).code == "E_CONSTRAINT"


def test_a_table_wider_than_the_heads_is_a_constraint_error():
    inputs, output = _contracts(8, 10)
    error = _fails("rotary(x, rope, partial=True)", inputs, output)
    assert error.code == "E_CONSTRAINT" and "R=10" in error.message


def test_an_odd_table_width_is_a_constraint_error():
    inputs, output = _contracts(8, 3)
    error = _fails("rotary(x, rope, partial=True)", inputs, output)
    assert error.code == "E_CONSTRAINT" and "odd" in error.message


def test_other_positions_or_a_wrong_pair_axis_are_constraint_errors():
    inputs, output = _contracts(8, 8, table_length=5)
    assert _fails("rotary(x, rope)", inputs, output).code == "E_CONSTRAINT"
    inputs, output = _contracts(8, 8)
    inputs["rope"] = ("B", 3, 4, 8)
    assert _fails("rotary(x, rope)", inputs, output).code == "E_CONSTRAINT"


def test_direct_construction_checks_the_widths():
    for kwargs in ({"E": 8, "R": 4}, {"E": 8, "R": 3, "partial": True}, {"E": 4, "R": 6, "partial": True}):
        with pytest.raises(HNDLError) as error:
            Rotary(**kwargs)
        assert error.value.code == "E_CONSTRAINT"
    assert Rotary(partial=True, E=8, R=4).partial


@pytest.mark.parametrize("args", ["partial=1", "dims=4", "True"])
def test_invalid_arguments_are_argument_errors(args):
    inputs, output = _contracts(8, 8)
    assert _fails(f"rotary(x, rope, {args})", inputs, output).code == "E_ARGUMENT"


def test_a_missing_table_is_a_binding_error():
    assert _fails("rotary(x)", ("B", 2, 4, 8), ("B", 2, 4, 8)).code == "E_BINDING"


def test_integer_inputs_are_dtype_errors():
    inputs, output = _contracts(8, 8)
    assert _fails("rotary(x, rope)", inputs, output, input_dtype={"rope": "int64"}).code == "E_DTYPE"


# -- composition ------------------------------------------------------------------------------------
def test_llama_attention_written_from_primitives_matches_transformers():
    """LlamaAttention (GQA with 2 of 4 heads, RoPE, no biases) as a researcher writes it: projections,
    split_heads, rotary on queries and keys, grouped causal attention, merge_heads, output projection."""
    from transformers.models.llama.modeling_llama import LlamaAttention

    torch.manual_seed(3)
    config = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=16,
                         num_hidden_layers=1, vocab_size=10, rope_theta=500000.0, attn_implementation="eager")
    theirs = LlamaAttention(config, layer_idx=0).eval()
    source = ("rope = rotary_embedding(x, theta=500000.0)\n"
              "q = rotary(split_heads(linear(x, 32, bias=False, name='q_proj'), 4), rope)\n"
              "k = rotary(split_heads(linear(x, 16, bias=False, name='k_proj'), 2), rope)\n"
              "v = split_heads(linear(x, 16, bias=False, name='v_proj'), 2)\n"
              "mixed = merge_heads(scaled_dot_product_attention(q, k, v, causal=True))\n"
              "out = linear(mixed, bias=False, name='o_proj')")
    model = network(source, input_shape=("B", 7, 32), output_shape=("B", 7, 32), device="cpu").eval()
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(model.nodes, f"n_{name}").weight.copy_(getattr(theirs, name).weight)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in theirs.parameters())
    x = torch.randn(2, 7, 32, requires_grad=True)
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(7)[None].expand(2, 7))
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)
    mask = torch.zeros(2, 1, 7, 7).masked_fill(future, float("-inf"))
    expected, _ = theirs(x, (cos, sin), mask)
    ours = model(x)
    torch.testing.assert_close(ours, expected)
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(torch.autograd.grad(ours, x, upstream)[0], torch.autograd.grad(expected, x, upstream)[0])
