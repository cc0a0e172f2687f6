"""A small MLP-Mixer written as HNDL configuration text with catalog operators only, against
``timm.models.mlp_mixer.MlpMixer(num_classes=10, img_size=32, patch_size=4, embed_dim=32,
num_blocks=2)`` carrying the same weights: the resolved plan, the exact parameter count and the
eval-mode logits. timm's defaults stay in force: ``mlp_ratio=(0.5, 4.0)``, LayerNorm eps 1e-6,
exact GELU, average pooling over the tokens.

    conv(stride 4) -> reshape -> transpose                                  [B, 64 tokens, 32]
    per block: x + transpose(linear(16) -> gelu -> linear(64))(transpose(layer_norm(x)))
               x + feed_forward(layer_norm(x))
    layer_norm -> mean over the tokens -> linear

Token mixing is one ``transpose`` into ``[B, D, T]``, the token MLP across the 64 tokens and one
``transpose`` back. The token MLP is written as ``linear(16)``, ``gelu()``, ``linear()`` because its
hidden width, timm's ``int(0.5 * embed_dim)`` = 16, is not a whole multiple of the 64 tokens it mixes and
``feed_forward`` only takes an integer ``expansion`` (its documented limit); the channel MLP
(4 x 32 hidden units) is one ``feed_forward``.

Size of the description. The HNDL network is the 26 non-blank lines of ``SOURCE`` (6 lines for the
stem, final norm, pooling and head, plus ten per block). The reference is what was read to learn
what the model computes, counted with ``len(inspect.getsourcelines(obj)[0])`` (every line of the
definition: code, docstrings, comments, blank lines) on timm 1.0.31: ``MlpMixer`` 254 and
``MixerBlock`` 44 (timm.models.mlp_mixer), ``PatchEmbed`` 120 (timm.layers.patch_embed), ``Mlp`` 41
(timm.layers.mlp), 459 lines in all (407 without blank and comment-only lines). The module
timm.models.mlp_mixer itself is 894 lines.
"""

from __future__ import annotations

import pytest
import torch
from timm.models.mlp_mixer import MlpMixer

import hndl
from hndl.torch import network

IMAGE, PATCH, WIDTH, BLOCKS, CLASSES = 32, 4, 32, 2, 10
TOKENS = (IMAGE // PATCH) ** 2  # 64
TOKEN_HIDDEN, CHANNEL_HIDDEN = int(0.5 * WIDTH), int(4.0 * WIDTH)  # timm's mlp_ratio=(0.5, 4.0)

SOURCE = """
x = conv(x, 32, kernel_size=4, stride=4, name="stem")
x = reshape(x, 32)
x = transpose(x, 1, 2, name="tokens")
h = layer_norm(x, eps=1e-6, name="block0_norm1")
h = transpose(h, 1, 2, name="block0_to_tokens")
h = linear(h, 16, name="block0_token_fc1")
h = gelu(h, name="block0_token_act")
h = linear(h, name="block0_token_fc2")
h = transpose(h, 1, 2, name="block0_to_channels")
x = add(x, h, name="block0_token_mix")
h = layer_norm(x, eps=1e-6, name="block0_norm2")
h = feed_forward(h, name="block0_channel_mlp")
x = add(x, h, name="block0_channel_mix")
h = layer_norm(x, eps=1e-6, name="block1_norm1")
h = transpose(h, 1, 2, name="block1_to_tokens")
h = linear(h, 16, name="block1_token_fc1")
h = gelu(h, name="block1_token_act")
h = linear(h, name="block1_token_fc2")
h = transpose(h, 1, 2, name="block1_to_channels")
x = add(x, h, name="block1_token_mix")
h = layer_norm(x, eps=1e-6, name="block1_norm2")
h = feed_forward(h, name="block1_channel_mlp")
x = add(x, h, name="block1_channel_mix")
x = layer_norm(x, eps=1e-6, name="norm")
x = mean(x, 1, name="pool")
out = linear(x, name="head")
"""
CONTRACT = dict(input_shape=("B", 3, IMAGE, IMAGE), output_shape=("B", CLASSES))

#: HNDL state-dict entry -> timm state-dict entry (every tensor has the same layout in both)
_BLOCK = {
    "norm1": "norm1", "token_fc1": "mlp_tokens.fc1", "token_fc2": "mlp_tokens.fc2",
    "norm2": "norm2", "channel_mlp.fc1": "mlp_channels.fc1", "channel_mlp.fc2": "mlp_channels.fc2",
}
MAPPING = {
    "nodes.n_stem.weight": "stem.proj.weight", "nodes.n_stem.bias": "stem.proj.bias",
    **{f"nodes.n_block{i}_{ours}.{kind}": f"blocks.{i}.{theirs}.{kind}"
       for i in range(BLOCKS) for ours, theirs in _BLOCK.items() for kind in ("weight", "bias")},
    "nodes.n_norm.weight": "norm.weight", "nodes.n_norm.bias": "norm.bias",
    "nodes.n_head.weight": "head.weight", "nodes.n_head.bias": "head.bias",
}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    reference = MlpMixer(num_classes=CLASSES, img_size=IMAGE, patch_size=PATCH, embed_dim=WIDTH,
                         num_blocks=BLOCKS).eval()
    with torch.no_grad():  # timm starts biases at 0 (or near it) and norms at 1: move them all
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model = network(SOURCE, device="cpu", **CONTRACT).eval()
    theirs = reference.state_dict()
    ours = model.state_dict()
    assert set(MAPPING) == set(ours) and set(MAPPING.values()) == set(theirs)
    model.load_state_dict({key: theirs[name] for key, name in MAPPING.items()})
    return model, reference


def test_the_plan_resolves_token_and_channel_mixing():
    plan = hndl.resolve(SOURCE, **CONTRACT)
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["tokens"].output_shapes["out"] == ("B", TOKENS, WIDTH)
    for i in range(BLOCKS):
        assert nodes[f"block{i}_to_tokens"].output_shapes["out"] == ("B", WIDTH, TOKENS)
        assert nodes[f"block{i}_token_fc1"].output_shapes["out"] == ("B", WIDTH, TOKEN_HIDDEN)
        # the token MLP's output width (64 tokens) is inferred through the transpose and the residual add
        fc2 = nodes[f"block{i}_token_fc2"]
        assert fc2.args["out_features"] == TOKENS and fc2.provenance["out_features"] == "inferred"
        assert nodes[f"block{i}_to_channels"].output_shapes["out"] == ("B", TOKENS, WIDTH)
        assert nodes[f"block{i}_channel_mlp"].args["expansion"] * WIDTH == CHANNEL_HIDDEN
    assert nodes["pool"].output_shapes["out"] == ("B", WIDTH)
    assert nodes["head"].args["out_features"] == CLASSES


def test_parameter_count_equals_timm(models):
    model, reference = models
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


def test_eval_logits_match_timm(models):
    model, reference = models
    images = torch.randn(4, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(images), reference(images)
    assert ours.shape == (4, CLASSES)
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours[0], ours[1])


def test_token_mixing_matches_timm_and_mixes_across_tokens(models):
    """The residual stream after the first token-mixing step equals timm's, and changing only the
    first patch moves every other token there: the transposes put the linear layers across the
    tokens, not the channels."""
    model, reference = models
    images = torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(2))
    changed = images.clone()
    changed[:, :, :PATCH, :PATCH] += 1.0  # the first patch (token 0) only
    seen = []
    hook = model.nodes.n_block0_token_mix.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        with torch.no_grad():
            for batch in (images, changed):
                model(batch)
            stem, block = reference.stem, reference.blocks[0]
            expected = [stem(batch) + block.mlp_tokens(block.norm1(stem(batch)).transpose(1, 2)).transpose(1, 2)
                        for batch in (images, changed)]
    finally:
        hook.remove()
    for ours, theirs in zip(seen, expected):
        torch.testing.assert_close(ours, theirs)
    moved = (seen[0] - seen[1]).abs().amax(dim=-1)[0]  # per token
    assert bool((moved[1:] > 1e-4).all())
