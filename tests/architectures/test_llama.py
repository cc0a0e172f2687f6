"""A tiny LLaMA written as HNDL configuration text with catalog operators only, against transformers'
``LlamaForCausalLM`` (``LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
num_attention_heads=4, num_key_value_heads=2, intermediate_size=172, rope_theta=10000,
rms_norm_eps=1e-6, tie_word_embeddings=False)``, eager attention, nothing downloaded) carrying the
same weights: the resolved plan, the exact parameter and buffer counts, the state-dict keys one to
one, eval-mode logits at batch 2 and every training gradient.

    embedding -> rotary_embedding (one cos/sin table for the stack)
    -> transformer_block(grouped-query rotary attention, RMSNorm, SwiGLU) x 2 -> rms_norm -> linear

Each decoder layer is one ``transformer_block`` call: ``kv_heads=2`` groups the four query heads
over two key/value heads (transformers' ``repeat_kv``), ``qkv="separate"`` gives the ``q_proj``,
``k_proj``, ``v_proj`` layout, ``normalization="rms_norm"`` the ``LlamaRMSNorm`` pair, and
``hidden=172, gated=True, activation="silu"`` the ``LlamaMLP`` (``gate_proj``, ``up_proj``,
``down_proj``). The rotary table is a ``rotary_embedding`` node whose width (the head width 16) is
inferred from the blocks that consume it on their ``rope`` port; its inverse frequencies are a
non-persistent buffer, as ``LlamaRotaryEmbedding.inv_freq`` is, so neither state dict holds a
buffer (transformers additionally keeps ``original_inv_freq``, a second non-persistent copy that
only dynamic RoPE scaling reads). The same network with ``rope_theta=10000.0`` on each block
(its own table, no rope port) computes the same logits.

Size of the description. The HNDL network is the 6 non-blank lines of ``SOURCE``. The reference
is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on transformers 5.25.0 (transformers.models.llama.modeling_llama):
``LlamaForCausalLM`` 73, ``LlamaModel`` 73, ``LlamaDecoderLayer`` 42, ``LlamaAttention`` 67,
``LlamaMLP`` 14, ``LlamaRMSNorm`` 19, ``LlamaRotaryEmbedding`` 44, ``apply_rotary_pos_emb`` 23,
``rotate_half`` 5, ``repeat_kv`` 10 and ``eager_attention_forward`` 23: 393 lines in all (341
without blank and comment-only lines). The module modeling_llama itself is 503 lines.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as transformers_logging

import hndl
from hndl.torch import network

VOCAB, WIDTH, LAYERS, HEADS, KV_HEADS, HIDDEN = 128, 64, 2, 4, 2, 172
SOURCE = """
h = embedding(x, 128, 64, name="embed_tokens")
rope = rotary_embedding(h, theta=10000.0, name="rotary_emb")
h = transformer_block(h, 4, kv_heads=2, causal=True, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=172, gated=True, activation="silu", rope=rope, name="layers_0")
h = transformer_block(h, 4, kv_heads=2, causal=True, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=172, gated=True, activation="silu", rope=rope, name="layers_1")
h = rms_norm(h, 1e-6, name="norm")
linear(h, 128, bias=False, name="lm_head")
"""  # noqa: E501
#: The same network with each block computing its own rotary table (rope_theta) instead of the rope port.
SOURCE_OWN_TABLES = """
embedding(128, 64, name="embed_tokens")
transformer_block(4, kv_heads=2, causal=True, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=172, gated=True, activation="silu", rope_theta=10000.0, name="layers_0")
transformer_block(4, kv_heads=2, causal=True, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=172, gated=True, activation="silu", rope_theta=10000.0, name="layers_1")
rms_norm(1e-6, name="norm")
linear(128, bias=False, name="lm_head")
"""  # noqa: E501

_BLOCK_NAMES = {
    "norm1.weight": "input_layernorm.weight", "attention.q_proj.weight": "self_attn.q_proj.weight",
    "attention.k_proj.weight": "self_attn.k_proj.weight", "attention.v_proj.weight": "self_attn.v_proj.weight",
    "attention.out_proj.weight": "self_attn.o_proj.weight", "norm2.weight": "post_attention_layernorm.weight",
    "feed_forward.gate_proj.weight": "mlp.gate_proj.weight", "feed_forward.up_proj.weight": "mlp.up_proj.weight",
    "feed_forward.down_proj.weight": "mlp.down_proj.weight",
}
#: HNDL state-dict entry -> transformers state-dict entry, one to one (no transposes, no splits).
MAPPING = {
    "nodes.n_embed_tokens.weight": "model.embed_tokens.weight",
    **{f"nodes.n_layers_{i}.{ours}": f"model.layers.{i}.{theirs}" for i in range(LAYERS)
       for ours, theirs in _BLOCK_NAMES.items()},
    "nodes.n_norm.weight": "model.norm.weight",
    "nodes.n_lm_head.weight": "lm_head.weight",
}


def contract(length: int) -> dict:
    return dict(input_shape=("B", length), output_shape=("B", length, VOCAB), input_dtype="int64")


def reference_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, intermediate_size=HIDDEN, rope_theta=10000.0,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    reference = LlamaForCausalLM(config).eval()
    assert reference.config._attn_implementation == "eager"
    with torch.no_grad():  # norms start at 1: move every parameter
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return reference


def hndl_llama(reference: LlamaForCausalLM, length: int, source: str = SOURCE):
    model = network(source, device="cpu", **contract(length)).eval()
    theirs = reference.state_dict()
    assert set(MAPPING) == set(model.state_dict()) and set(MAPPING.values()) == set(theirs)
    model.load_state_dict({key: theirs[name] for key, name in MAPPING.items()})
    return model


@pytest.fixture(scope="module", autouse=True)
def _quiet_transformers():
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    yield
    transformers_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def reference():
    return reference_llama()


def _ids(length: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# -- the plan --------------------------------------------------------------------------------------------------
def test_the_plan_resolves_every_size_from_the_contract():
    plan = hndl.resolve(SOURCE, **contract(10))
    assert [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes] == [
        ("embed_tokens", "embedding", ("B", 10, WIDTH)),
        ("rotary_emb", "rotary_embedding", ("B", 2, 10, 16)),  # the head width, inferred from the blocks
        ("layers_0", "transformer_block", ("B", 10, WIDTH)),
        ("layers_1", "transformer_block", ("B", 10, WIDTH)),
        ("norm", "rms_norm", ("B", 10, WIDTH)),
        ("lm_head", "linear", ("B", 10, VOCAB)),
    ]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["rotary_emb"].args["dims"] == 16 and nodes["rotary_emb"].provenance["dims"] == "inferred"
    assert nodes["layers_1"].inputs == {"x": "node:layers_0/out", "rope": "node:rotary_emb/out"}
    assert {name: nodes["layers_0"].args[name] for name in ("kv_heads", "qkv", "normalization", "hidden", "gated")} == {
        "kv_heads": 2, "qkv": "separate", "normalization": "rms_norm", "hidden": HIDDEN, "gated": True}


def test_parameter_and_buffer_counts_and_state_dict_keys_equal_llama(reference):
    model = network(SOURCE, device="cpu", **contract(16))
    ours = sum(p.numel() for p in model.parameters())
    assert ours == sum(p.numel() for p in reference.parameters()) == 107_328
    assert len(list(model.parameters())) == len(list(reference.parameters())) == len(MAPPING)
    assert {key: tuple(value.shape) for key, value in model.state_dict().items()} == {
        key: tuple(reference.state_dict()[name].shape) for key, name in MAPPING.items()}
    # the rotary inverse frequencies are non-persistent buffers on both sides, equal, in neither state dict;
    # transformers also keeps original_inv_freq, a copy for dynamic RoPE scaling that default RoPE never reads
    our_buffers, their_buffers = dict(model.named_buffers()), dict(reference.named_buffers())
    assert list(our_buffers) == ["nodes.n_rotary_emb.inv_freq"]
    assert sorted(their_buffers) == ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
    for name in their_buffers:
        torch.testing.assert_close(our_buffers["nodes.n_rotary_emb.inv_freq"], their_buffers[name], rtol=0, atol=0)
    assert not any("inv_freq" in key for key in model.state_dict())
    assert not any("inv_freq" in key for key in reference.state_dict())


# -- numerics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [9, 16])
def test_eval_logits_match_transformers(reference, length):
    model = hndl_llama(reference, length)
    ids = _ids(length)
    with torch.no_grad():
        ours, theirs = model(ids), reference(input_ids=ids).logits
    assert ours.shape == (2, length, VOCAB)
    torch.testing.assert_close(ours, theirs)


def test_blocks_with_their_own_rotary_tables_compute_the_same(reference):
    model = hndl_llama(reference, 12, SOURCE_OWN_TABLES)
    assert len(dict(model.named_buffers())) == LAYERS  # one non-persistent inv_freq per block
    ids = _ids(12)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(input_ids=ids).logits)


def test_the_logits_are_causal_like_the_reference(reference):
    model = hndl_llama(reference, 12)
    ids = _ids(12)
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(ids), model(changed)
        torch.testing.assert_close(after, reference(input_ids=changed).logits)
    torch.testing.assert_close(after[:, :7], before[:, :7], rtol=0, atol=1e-5)
    assert not torch.allclose(after[:, 7], before[:, 7])


def test_every_gradient_matches_the_reference():
    reference = reference_llama().train()
    model = hndl_llama(reference, 10).train()
    ids, targets = _ids(10), _ids(10, seed=2)
    F.cross_entropy(model(ids).reshape(-1, VOCAB), targets.reshape(-1)).backward()
    F.cross_entropy(reference(input_ids=ids).logits.reshape(-1, VOCAB), targets.reshape(-1)).backward()
    theirs = dict(reference.named_parameters())
    for key, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.count_nonzero(parameter.grad) > 0
        torch.testing.assert_close(parameter.grad, theirs[MAPPING[key]].grad)
