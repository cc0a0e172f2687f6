"""Runtime parity of one LLaMA decoder layer written in HNDL with transformers' ``LlamaDecoderLayer``.

The layer: batch 4, T = 128, D = 256, 8 query heads over 2 key/value heads (head width 32),
SwiGLU width 688, RMSNorm, rotary positions (theta 10000), causal. HNDL side: the network

    r = rotary_embedding(x)
    transformer_block(x, 8, kv_heads=2, causal=True, qkv="separate", bias=False,
                      normalization="rms_norm", eps=1e-6, hidden=688, gated=True, activation="silu", rope=r)

built by ``hndl.torch.network`` and called as a whole (graph execution included). transformers
side: ``LlamaRotaryEmbedding`` (the cos/sin tables, as ``LlamaModel`` computes them once per
forward) and ``LlamaDecoderLayer`` with transformers' default attention (``sdpa``: with no mask it
runs ``scaled_dot_product_attention(is_causal=True, enable_gqa=True)``), the same weights. Both
must agree before anything is timed.

Two measurements, side by side in one process on one CPU thread (restored afterwards): eval
forward under ``no_grad``, and a training step's forward and backward (train mode, gradients
cleared with ``set_to_none`` before each call, the loss ``(out * upstream).sum()``). Method as in
test_transformer_speed.py: warm-up, ``HNDL_BENCHMARK_ROUNDS`` (default 21) interleaved rounds
alternating which model goes first, each round alternating the two models three times and keeping
each one's fastest timing, the garbage collector paused; the median of the per-round ratios is
asserted against the target (HNDL <= 1.05 x transformers) and every figure printed.

Run with ``.venv/bin/python -m pytest -m benchmark tests/benchmark/test_llama_speed.py -q -s``.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from hndl.torch import network

pytestmark = [pytest.mark.benchmark, pytest.mark.usefixtures("one_thread")]

BATCH, LENGTH, WIDTH, HEADS, KV_HEADS, HIDDEN = 4, 128, 256, 8, 2, 688
TARGET = 1.05
SOURCE = f"""
r = rotary_embedding(x)
transformer_block(x, {HEADS}, kv_heads={KV_HEADS}, causal=True, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden={HIDDEN}, gated=True, activation="silu", rope=r)
"""  # noqa: E501
NAMES = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "attention.": "self_attn.",
         "out_proj": "o_proj", "feed_forward.": "mlp."}


def _their_name(name: str) -> str:
    for ours, theirs in NAMES.items():
        name = name.replace(ours, theirs)
    return name


def _models():
    torch.manual_seed(0)
    shape = ("B", LENGTH, WIDTH)
    ours = network(SOURCE, input_shape=shape, output_shape=shape, device="cpu")
    config = LlamaConfig(hidden_size=WIDTH, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         intermediate_size=HIDDEN, rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=8,
                         num_hidden_layers=1, attn_implementation="sdpa")
    layer = LlamaDecoderLayer(config, layer_idx=0)
    rotary = LlamaRotaryEmbedding(config)
    block = ours.nodes.n_n1
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    layer.load_state_dict({_their_name(name): value for name, value in block.state_dict().items()})
    positions = torch.arange(LENGTH)[None].expand(BATCH, LENGTH)

    def theirs(x):
        return layer(x, position_embeddings=rotary(x, positions))

    return ours, (layer, rotary), theirs


LABEL = f"LLaMA decoder layer (batch {BATCH}, T={LENGTH}, D={WIDTH}, heads {HEADS}/{KV_HEADS}, SwiGLU {HIDDEN})"


def test_llama_layer_eval_forward_is_within_5_percent_of_transformers(side_by_side):
    ours, (layer, rotary), theirs = _models()
    ours.eval()
    layer.eval()
    x = torch.randn(BATCH, LENGTH, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))
        ratio = side_by_side(f"{LABEL}, eval/no_grad", lambda: ours(x), lambda: theirs(x), calls=2, target=TARGET,
                             reference="transformers")
    assert ratio <= TARGET


def test_llama_layer_training_step_is_within_5_percent_of_transformers(side_by_side):
    ours, (layer, rotary), theirs = _models()
    ours.train()
    layer.train()
    x = torch.randn(BATCH, LENGTH, WIDTH, requires_grad=True)
    upstream = torch.randn(BATCH, LENGTH, WIDTH)
    our_parameters, their_parameters = list(ours.parameters()), list(layer.parameters())

    def step(model, parameters):
        def run():
            for parameter in parameters:
                parameter.grad = None
            x.grad = None
            (model(x) * upstream).sum().backward()
        return run

    step(ours, our_parameters)()
    our_input_grad = x.grad.clone()
    step(theirs, their_parameters)()
    torch.testing.assert_close(our_input_grad, x.grad)
    ratio = side_by_side(f"{LABEL}, train forward+backward", step(ours, our_parameters),
                         step(theirs, their_parameters), calls=1, target=TARGET, reference="transformers")
    assert ratio <= TARGET
