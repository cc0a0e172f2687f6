"""timm's ViT-Tiny/16 (``vit_tiny_patch16_224``: 12 layers, width 192, 3 heads, 224 x 224 input)
written as HNDL configuration text with catalog operators only, against
``timm.create_model("vit_tiny_patch16_224", pretrained=False)`` (no download) carrying the same
weights: the resolved plan, the exact parameter count and the eval-mode logits.

    conv(stride 16) -> reshape -> transpose -> learned_tokens (class token)
    -> positional_embedding -> transformer_block x 12 (eps 1e-6, qkv bias) -> layer_norm
    -> select (class token) -> linear

The whole 12-layer model at 224 is used (no depth reduction): it builds and runs in a few
seconds on CPU.

Size of the description. The HNDL network is the 20 non-blank lines of ``SOURCE`` (8 lines for
the stem, class token, positions, final norm, pooling and head, plus one line per layer). The
reference is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on timm 1.0.31: ``VisionTransformer`` 604, ``Block`` 87, ``Attention`` 103,
``LayerScale`` 23 (timm.models.vision_transformer), ``PatchEmbed`` 120 (timm.layers.patch_embed),
``Mlp`` 41 (timm.layers.mlp), 978 lines in all (866 without blank and comment-only lines).
The module timm.models.vision_transformer itself is 5,308 lines.
"""

from __future__ import annotations

import pytest
import timm
import torch

import hndl
from hndl.torch import network

WIDTH, HEADS, DEPTH, PATCH, CLASSES = 192, 3, 12, 16, 1000
TOKENS = (224 // PATCH) ** 2  # 196 patches, plus the class token

SOURCE = """
conv(192, kernel_size=16, stride=16, name="patch_embed")
reshape(192)
transpose(1, 2, name="patch_tokens")
learned_tokens(name="cls_token")
positional_embedding(name="pos_embed")
transformer_block(3, eps=1e-6, name="block0")
transformer_block(3, eps=1e-6, name="block1")
transformer_block(3, eps=1e-6, name="block2")
transformer_block(3, eps=1e-6, name="block3")
transformer_block(3, eps=1e-6, name="block4")
transformer_block(3, eps=1e-6, name="block5")
transformer_block(3, eps=1e-6, name="block6")
transformer_block(3, eps=1e-6, name="block7")
transformer_block(3, eps=1e-6, name="block8")
transformer_block(3, eps=1e-6, name="block9")
transformer_block(3, eps=1e-6, name="block10")
transformer_block(3, eps=1e-6, name="block11")
layer_norm(eps=1e-6, name="norm")
select(1, 0, name="class_token")
linear(name="head")
"""
CONTRACT = dict(input_shape=("B", 3, 224, 224), output_shape=("B", CLASSES))

#: HNDL state-dict entry -> (timm state-dict entry, how the timm tensor becomes ours)
_SAME = lambda t: t  # noqa: E731
_BLOCK = {
    "norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias",
    "attention.in_proj_weight": "attn.qkv.weight", "attention.in_proj_bias": "attn.qkv.bias",
    "attention.out_proj.weight": "attn.proj.weight", "attention.out_proj.bias": "attn.proj.bias",
    "norm2.weight": "norm2.weight", "norm2.bias": "norm2.bias",
    "feed_forward.fc1.weight": "mlp.fc1.weight", "feed_forward.fc1.bias": "mlp.fc1.bias",
    "feed_forward.fc2.weight": "mlp.fc2.weight", "feed_forward.fc2.bias": "mlp.fc2.bias",
}
MAPPING = {
    "nodes.n_patch_embed.weight": ("patch_embed.proj.weight", _SAME),
    "nodes.n_patch_embed.bias": ("patch_embed.proj.bias", _SAME),
    "nodes.n_cls_token.tokens": ("cls_token", _SAME),  # [1, 1, D] in both
    "nodes.n_pos_embed.weight": ("pos_embed", lambda t: t[0]),  # timm's [1, T, D] table is our [T, D]
    **{f"nodes.n_block{i}.{ours}": (f"blocks.{i}.{theirs}", _SAME)
       for i in range(DEPTH) for ours, theirs in _BLOCK.items()},
    "nodes.n_norm.weight": ("norm.weight", _SAME), "nodes.n_norm.bias": ("norm.bias", _SAME),
    "nodes.n_head.weight": ("head.weight", _SAME), "nodes.n_head.bias": ("head.bias", _SAME),
}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    with torch.no_grad():  # timm starts biases at 0, norms at 1, the class token near 0: move them all
        for parameter in reference.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    model = network(SOURCE, device="cpu", **CONTRACT).eval()
    theirs = reference.state_dict()
    ours = model.state_dict()
    assert set(MAPPING) == set(ours) and {name for name, _ in MAPPING.values()} == set(theirs)
    model.load_state_dict({key: convert(theirs[name]) for key, (name, convert) in MAPPING.items()})
    return model, reference


def test_the_plan_resolves_the_vit_tiny_shapes():
    plan = hndl.resolve(SOURCE, **CONTRACT)
    shapes = [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes]
    assert shapes[:5] == [
        ("patch_embed", "conv", ("B", WIDTH, 14, 14)),
        ("n1", "reshape", ("B", WIDTH, TOKENS)),
        ("patch_tokens", "transpose", ("B", TOKENS, WIDTH)),
        ("cls_token", "learned_tokens", ("B", TOKENS + 1, WIDTH)),
        ("pos_embed", "positional_embedding", ("B", TOKENS + 1, WIDTH)),
    ]
    assert shapes[5:5 + DEPTH] == [(f"block{i}", "transformer_block", ("B", TOKENS + 1, WIDTH))
                                   for i in range(DEPTH)]
    assert shapes[5 + DEPTH:] == [("norm", "layer_norm", ("B", TOKENS + 1, WIDTH)),
                                  ("class_token", "select", ("B", WIDTH)),
                                  ("head", "linear", ("B", CLASSES))]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["block0"].args["heads"] == HEADS and nodes["block0"].args["eps"] == 1e-6
    assert nodes["head"].args["in_features"] == WIDTH


def test_parameter_count_equals_timm(models):
    model, reference = models
    ours = sum(p.numel() for p in model.parameters())
    assert ours == sum(p.numel() for p in reference.parameters())
    assert ours == 5_717_416  # ViT-Ti/16 with a 1000-class head


def test_eval_logits_and_class_token_features_match_timm(models):
    model, reference = models
    images = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    seen = []
    hook = model.nodes.n_class_token.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        with torch.no_grad():
            ours = model(images)
            features = reference.forward_head(reference.forward_features(images), pre_logits=True)
            theirs = reference.head(features)  # timm's forward(), with the pre-logits kept
    finally:
        hook.remove()
    assert ours.shape == (2, CLASSES)
    torch.testing.assert_close(seen[0], features)  # final norm, class token selected
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours[0], ours[1])  # the two images give different logits
