"""A tiny T5 encoder written as HNDL configuration text with catalog operators only, against
transformers' ``T5EncoderModel`` (``T5Config(vocab_size=128, d_model=32, d_kv=8, num_heads=4,
d_ff=64, num_layers=2, relative_attention_num_buckets=32, relative_attention_max_distance=128)``
with ``feed_forward_proj="relu"`` and with ``"gated-gelu"``, eager attention, nothing downloaded)
carrying the same weights: the resolved plan, the exact parameter and buffer counts, the
state-dict keys one to one, eval-mode hidden states at batch 2 and every training gradient.

    embedding -> relative_position_bias (T5's bucketed bias, computed once)
    -> transformer_block(unscaled attention + the bias, RMSNorm, ReLU or gated-GELU MLP) x 2
    -> rms_norm

T5 computes its relative position bias in the first layer's attention (``has_relative_attention_bias``)
and hands the same ``[1, H, T, T]`` tensor to every later layer. Here that is one
``relative_position_bias`` node (its learned table ``relative_attention_bias`` is an
``nn.Embedding(32, 4)``, its bucket index table a non-persistent buffer) whose output every block
takes on its ``attn_bias`` port. The attention is unscaled (``scale=1.0``: T5 folds the
``1/sqrt(d_kv)`` into its initialization), with ``head_dim=8`` (``d_kv``), bias-free ``q``, ``k``,
``v``, ``o`` (``qkv="separate"``: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), and
``T5LayerNorm`` is RMSNorm without a bias (``normalization="rms_norm"``, ``eps=1e-6``). The
feed-forward network is ``hidden=64, activation="relu"`` (``wi``, ``wo``) or ``hidden=64,
gated=True, activation="gelu_tanh"`` (``wi_0``, ``wi_1``, ``wo``; T5 v1.1's ``gelu_new``).

The reference lists its one embedding tensor twice in its state dict (``shared.weight`` and the
tied ``encoder.embed_tokens.weight``); HNDL's single embedding maps to both names.

Size of the description. The HNDL network is the 5 non-blank lines of ``SOURCE``. The reference
is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on transformers 5.25.0 (transformers.models.t5.modeling_t5): ``T5EncoderModel`` 64,
``T5Stack`` 108, ``T5Block`` 76, ``T5LayerSelfAttention`` 31, ``T5Attention`` 195, ``T5LayerFF``
16, ``T5DenseActDense`` 20, ``T5DenseGatedActDense`` 27 and ``T5LayerNorm`` 23: 560 lines in all
(461 without blank and comment-only lines). The module modeling_t5 itself is 1,516 lines.
"""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config, T5EncoderModel
from transformers.utils import logging as transformers_logging

import hndl
from hndl.torch import network

VOCAB, WIDTH, HEADS, HEAD_DIM, HIDDEN, LAYERS = 128, 32, 4, 8, 64, 2
FEED_FORWARD = {"relu": 'activation="relu"', "gated-gelu": 'gated=True, activation="gelu_tanh"'}
SOURCE = """
h = embedding(x, 128, 32, name="shared")
bias = relative_position_bias(h, 4, buckets=32, max_distance=128, name="relative_attention_bias")
h = transformer_block(h, 4, head_dim=8, scale=1.0, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=64, FEED_FORWARD, attn_bias=bias, name="block_0")
h = transformer_block(h, 4, head_dim=8, scale=1.0, qkv="separate", bias=False, normalization="rms_norm", eps=1e-6, hidden=64, FEED_FORWARD, attn_bias=bias, name="block_1")
rms_norm(h, 1e-6, name="final_layer_norm")
"""  # noqa: E501

_ATTENTION = {"norm1.weight": "layer.0.layer_norm.weight",
              "attention.q_proj.weight": "layer.0.SelfAttention.q.weight",
              "attention.k_proj.weight": "layer.0.SelfAttention.k.weight",
              "attention.v_proj.weight": "layer.0.SelfAttention.v.weight",
              "attention.out_proj.weight": "layer.0.SelfAttention.o.weight",
              "norm2.weight": "layer.1.layer_norm.weight"}
_MLP = {
    "relu": {"feed_forward.fc1.weight": "layer.1.DenseReluDense.wi.weight",
             "feed_forward.fc2.weight": "layer.1.DenseReluDense.wo.weight"},
    "gated-gelu": {"feed_forward.gate_proj.weight": "layer.1.DenseReluDense.wi_0.weight",
                   "feed_forward.up_proj.weight": "layer.1.DenseReluDense.wi_1.weight",
                   "feed_forward.down_proj.weight": "layer.1.DenseReluDense.wo.weight"},
}


def source(projection: str) -> str:
    return SOURCE.replace("FEED_FORWARD", FEED_FORWARD[projection])


def mapping(projection: str) -> dict[str, str]:
    """HNDL state-dict entry -> transformers parameter name, one to one (no transposes, no splits)."""
    return {
        "nodes.n_shared.weight": "shared.weight",
        "nodes.n_relative_attention_bias.relative_attention_bias.weight":
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        **{f"nodes.n_block_{i}.{ours}": f"encoder.block.{i}.{theirs}" for i in range(LAYERS)
           for ours, theirs in {**_ATTENTION, **_MLP[projection]}.items()},
        "nodes.n_final_layer_norm.weight": "encoder.final_layer_norm.weight",
    }


def contract(length: int) -> dict:
    return dict(input_shape=("B", length), output_shape=("B", length, WIDTH), input_dtype="int64")


def reference_t5(projection: str) -> T5EncoderModel:
    config = T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=HEAD_DIM, num_heads=HEADS, d_ff=HIDDEN, num_layers=LAYERS,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      feed_forward_proj=projection, dropout_rate=0.0, layer_norm_epsilon=1e-6,
                      attn_implementation="eager")
    torch.manual_seed(0)
    reference = T5EncoderModel(config).eval()
    assert reference.config._attn_implementation == "eager"
    with torch.no_grad():  # norms start at 1: move every parameter
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return reference


def hndl_t5(reference: T5EncoderModel, projection: str, length: int):
    model = network(source(projection), device="cpu", **contract(length)).eval()
    names = mapping(projection)
    theirs = dict(reference.named_parameters())
    assert set(names) == set(model.state_dict()) and set(names.values()) == set(theirs)
    model.load_state_dict({key: theirs[name].detach() for key, name in names.items()})
    return model


@pytest.fixture(scope="module", autouse=True)
def _quiet_transformers():
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    yield
    transformers_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module", params=["relu", "gated-gelu"])
def projection(request):
    return request.param


@pytest.fixture(scope="module")
def reference(projection):
    return reference_t5(projection)


def _ids(length: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# -- the plan --------------------------------------------------------------------------------------------------
def test_the_plan_resolves_every_size_from_the_contract(projection):
    plan = hndl.resolve(source(projection), **contract(10))
    assert [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes] == [
        ("shared", "embedding", ("B", 10, WIDTH)),
        ("relative_attention_bias", "relative_position_bias", ("B", HEADS, 10, 10)),
        ("block_0", "transformer_block", ("B", 10, WIDTH)),
        ("block_1", "transformer_block", ("B", 10, WIDTH)),
        ("final_layer_norm", "rms_norm", ("B", 10, WIDTH)),
    ]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["block_1"].inputs == {"x": "node:block_0/out", "attn_bias": "node:relative_attention_bias/out"}
    assert {name: nodes["block_0"].args[name] for name in ("scale", "head_dim", "normalization", "gated")} == {
        "scale": 1.0, "head_dim": HEAD_DIM, "normalization": "rms_norm", "gated": projection == "gated-gelu"}


def test_parameter_and_buffer_counts_and_state_dict_keys_equal_t5(projection, reference):
    model = network(source(projection), device="cpu", **contract(16))
    ours = sum(p.numel() for p in model.parameters())
    expected = {"relu": 4096 + 128 + LAYERS * (4 * 1024 + 2 * 2048 + 2 * 32) + 32,
                "gated-gelu": 4096 + 128 + LAYERS * (4 * 1024 + 3 * 2048 + 2 * 32) + 32}[projection]
    assert ours == sum(p.numel() for p in reference.parameters()) == expected
    names = mapping(projection)
    their_state = reference.state_dict()
    assert {key: tuple(value.shape) for key, value in model.state_dict().items()} == {
        key: tuple(their_state[name].shape) for key, name in names.items()}
    # the reference's state dict names its one embedding tensor twice; nothing else differs
    assert set(their_state) - set(names.values()) == {"encoder.embed_tokens.weight"}
    assert reference.encoder.embed_tokens.weight is reference.shared.weight
    # buffers: T5 has none; our bucket index table is a non-persistent integer buffer
    assert list(reference.named_buffers()) == []
    buffers = dict(model.named_buffers())
    assert list(buffers) == ["nodes.n_relative_attention_bias.relative_position_bucket"]
    assert buffers["nodes.n_relative_attention_bias.relative_position_bucket"].dtype == torch.int64
    assert not any("bucket" in key for key in model.state_dict())


# -- numerics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [9, 16])
def test_eval_hidden_states_match_transformers(projection, reference, length):
    model = hndl_t5(reference, projection, length)
    ids = _ids(length)
    with torch.no_grad():
        ours, theirs = model(ids), reference(input_ids=ids).last_hidden_state
    assert ours.shape == (2, length, WIDTH)
    torch.testing.assert_close(ours, theirs)


def test_every_gradient_matches_the_reference(projection):
    reference = reference_t5(projection).train()
    model = hndl_t5(reference, projection, 10).train()
    ids = _ids(10)
    upstream = torch.randn(2, 10, WIDTH, generator=torch.Generator().manual_seed(3))
    (model(ids) * upstream).sum().backward()
    (reference(input_ids=ids).last_hidden_state * upstream).sum().backward()
    theirs = dict(reference.named_parameters())
    names = mapping(projection)
    for key, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.count_nonzero(parameter.grad) > 0
        torch.testing.assert_close(parameter.grad, theirs[names[key]].grad)
