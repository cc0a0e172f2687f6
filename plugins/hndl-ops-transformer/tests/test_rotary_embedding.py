"""rotary_embedding@1: declaration, R inferred from the consumer, the output contract or given,
tables bit for bit against transformers' LlamaRotaryEmbedding (tiny LlamaConfig) and GPT-NeoX's
partial rotary, the shared math (rotary_frequencies, rotary_tables, apply_rotary), the
non-persistent float32 inv_freq buffer under dtype moves, the harness, and every error code."""

import pytest
import torch
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.rotary import apply_rotary, rotary_frequencies, rotary_tables
from hndl_ops_transformer.rotary_embedding import RotaryEmbedding


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _table(dims, length=7, width=16, dtype=None, **args):
    text = "".join(f", {name}={value!r}" for name, value in args.items())
    model = network(f"rotary_embedding({dims}{text})", input_shape=("B", length, width),
                    output_shape=("B", 2, length, dims), device="cpu", **({"dtype": dtype} if dtype else {}))
    return model, model.nodes.n_n0


def _llama(theta=500000.0, hidden=64, heads=4):
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=2, rope_theta=theta,
                         intermediate_size=32, num_hidden_layers=1, vocab_size=10)
    return LlamaRotaryEmbedding(config)


def test_declaration():
    spec = spec_of(RotaryEmbedding)
    assert spec.alias == "rotary_embedding" and spec.qualified == "rotary_embedding@1"
    assert spec.category == "embedding"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("dims",)
    assert spec.args["dims"].inferable and spec.args["dims"].dim == "R"
    assert spec.args["theta"].default == 10000.0
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, 2, T, R]"


def test_check_operator():
    check_operator(RotaryEmbedding)


# -- inference ----------------------------------------------------------------------------------------
def test_rotated_width_is_inferred_from_the_consumer():
    source = "rope = rotary_embedding(x)\nq = split_heads(x, 4)\nout = merge_heads(rotary(q, rope))"
    node = hndl.resolve(source, input_shape=("B", 5, 32), output_shape=("B", 5, 32)).nodes[0]
    assert node.args == {"dims": 8, "theta": 10000.0}
    assert node.provenance == {"dims": "inferred", "theta": "default"}
    assert node.output_shapes["out"] == ("B", 2, 5, 8)


def test_rotated_width_is_inferred_from_the_output_contract():
    node = hndl.resolve("rotary_embedding()", input_shape=("B", 5, 3), output_shape=("B", 2, 5, 6)).nodes[0]
    assert node.args["dims"] == 6 and node.provenance["dims"] == "inferred"


def test_an_unconsumed_width_is_unresolved():
    error = _fails("rotary_embedding()\nmerge_heads()\nlinear(4)", ("B", 5, 3), ("B", 5, 4))
    assert error.code in ("E_UNRESOLVED", "E_AMBIGUOUS")
    # merge_heads alone fixes it: D = 2 * R
    node = hndl.resolve("rotary_embedding()\nmerge_heads()", input_shape=("B", 5, 3),
                        output_shape=("B", 5, 12)).nodes[0]
    assert node.args["dims"] == 6


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_tables_match_llamas_rotary_embedding_bit_for_bit(theta):
    theirs = _llama(theta)  # head_dim 16
    model, layer = _table(16, length=9, theta=theta)
    assert torch.equal(layer.inv_freq, theirs.inv_freq)
    x = torch.randn(3, 9, 16)
    table = model(x)
    cos, sin = theirs(x, torch.arange(9)[None].expand(3, 9))
    assert torch.equal(table[:, 0], cos) and torch.equal(table[:, 1], sin)
    torch.testing.assert_close(table, spec_of(RotaryEmbedding).reference(layer)(x), rtol=0, atol=0)


def test_rotating_with_the_tables_matches_apply_rotary_pos_emb():
    theirs = _llama()
    source = ("rope = rotary_embedding(x, theta=500000.0)\nq = split_heads(x, 4)\n"
              "out = merge_heads(rotary(q, rope))")
    model = network(source, input_shape=("B", 6, 64), output_shape=("B", 6, 64), device="cpu")
    x = torch.randn(2, 6, 64)
    cos, sin = theirs(x, torch.arange(6)[None].expand(2, 6))
    q = x.view(2, 6, 4, 16).transpose(1, 2)
    expected, _ = apply_rotary_pos_emb(q, q, cos, sin)
    torch.testing.assert_close(model(x), expected.transpose(1, 2).reshape(2, 6, 64), rtol=0, atol=0)


def test_partial_rotary_tables_match_gpt_neox():
    config = GPTNeoXConfig(hidden_size=32, num_attention_heads=2, rotary_pct=0.25, num_hidden_layers=1,
                           intermediate_size=8, vocab_size=10)
    theirs = GPTNeoXRotaryEmbedding(config)  # rotates 4 of 16
    model, layer = _table(4, length=5)
    x = torch.randn(2, 5, 16)
    cos, sin = theirs(x, torch.arange(5)[None].expand(2, 5))
    table = model(x)
    assert torch.equal(table[:, 0], cos) and torch.equal(table[:, 1], sin)


def test_the_shared_math_is_what_transformers_computes():
    theirs = _llama(10000.0)
    inv_freq = rotary_frequencies(16, 10000.0)
    assert inv_freq.dtype == torch.float32 and torch.equal(inv_freq, theirs.inv_freq)
    x = torch.randn(2, 4, 5, 16)
    cos, sin = rotary_tables(inv_freq, 5, torch.float32)
    their_cos, their_sin = theirs(x, torch.arange(5)[None])
    assert torch.equal(cos, their_cos[0]) and torch.equal(sin, their_sin[0])
    expected, _ = apply_rotary_pos_emb(x, x, their_cos, their_sin)
    assert torch.equal(apply_rotary(x, cos, sin), expected)
    low_cos, low_sin = rotary_tables(inv_freq, 5, torch.bfloat16)
    assert low_cos.dtype == torch.bfloat16 and torch.equal(low_cos, cos.to(torch.bfloat16))
    assert torch.equal(low_sin, sin.to(torch.bfloat16))
    # partial: the tail passes through untouched
    y = torch.randn(2, 4, 5, 10)
    turned = apply_rotary(y, cos[:, :4], sin[:, :4])
    assert torch.equal(turned[..., 4:], y[..., 4:])
    assert torch.equal(turned[..., :4], apply_rotary(y[..., :4], cos[:, :4], sin[:, :4]))


def test_table_is_a_batch_expanded_view_and_takes_no_gradient_from_x():
    model, _ = _table(8, length=4)
    x = torch.randn(3, 4, 16, requires_grad=True)
    table = model(x)
    assert table.shape == (3, 2, 4, 8) and table.stride(0) == 0
    assert torch.equal(table[0], table[2]) and not table.requires_grad


def test_inv_freq_is_a_non_persistent_float32_buffer_that_survives_dtype_moves():
    model, layer = _table(8, dtype="bfloat16")
    assert dict(layer.named_buffers()).keys() == {"inv_freq"} and not list(layer.parameters())
    assert model.state_dict() == {} and layer.inv_freq.dtype == torch.float32
    table = model(torch.randn(2, 7, 16, dtype=torch.bfloat16))
    assert table.dtype == torch.bfloat16
    float_model, float_layer = _table(8)
    expected = float_model(torch.randn(2, 7, 16))
    assert torch.equal(table, expected.to(torch.bfloat16))  # same angles, cast at the end as transformers does
    model.double()
    assert layer.inv_freq.dtype == torch.float32 and model(torch.randn(2, 7, 16, dtype=torch.float64)).dtype == \
        torch.float64
    model.to(torch.float16)
    assert torch.equal(layer.inv_freq, float_layer.inv_freq)


def test_forward_is_deterministic():
    model, _ = _table(8)
    x = torch.randn(2, 7, 16)
    model.train()
    first = model(x)
    model.eval()
    assert torch.equal(first, model(x))


def test_float64_gradcheck_and_gradgradcheck_of_the_rotation_through_the_table():
    source = "rope = rotary_embedding(x)\nq = split_heads(x, 2)\nout = merge_heads(rotary(q, rope))"
    model = network(source, input_shape=("B", 3, 8), output_shape=("B", 3, 8), device="cpu").double()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(model, (x,))
    assert torch.autograd.gradgradcheck(model, (x,))


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["rotary_embedding(7)", "rotary_embedding(0)", "rotary_embedding(8.0)",
                                    "rotary_embedding(8, theta=0.0)", "rotary_embedding(8, theta=-1.0)",
                                    "rotary_embedding(8, base=10.0)", "rotary_embedding(8, theta='big')"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 2, 4, 8)).code == "E_ARGUMENT"


def test_an_odd_inferred_width_is_a_constraint_error():
    error = _fails("rotary_embedding()", ("B", 4, 8), ("B", 2, 4, 5))
    assert error.code == "E_CONSTRAINT" and "R=5" in error.message


def test_direct_construction_refuses_an_odd_width():
    with pytest.raises(HNDLError) as error:
        RotaryEmbedding(5, T=4)
    assert error.value.code == "E_ARGUMENT"


def test_contradicting_contracts_are_constraint_errors():
    assert _fails("rotary_embedding(8)", ("B", 4, 8), ("B", 2, 4, 6)).code == "E_CONSTRAINT"
    assert _fails("rotary_embedding(8)", ("B", 4, 8), ("B", 2, 5, 8)).code == "E_CONSTRAINT"
    assert _fails("rotary_embedding(8)", ("B", 4, 8), ("B", 3, 4, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("rotary_embedding(8)", ("B", 4, 8), ("B", 2, 4, 8), input_dtype="int64").code == "E_DTYPE"
