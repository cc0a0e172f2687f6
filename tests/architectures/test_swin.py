"""A small two-stage Swin Transformer written as HNDL configuration text with catalog operators
only, against torchvision's ``SwinTransformer`` built from its constructor
(``patch_size=[4, 4], embed_dim=24, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
stochastic_depth_prob=0, num_classes=10``, nothing downloaded) carrying the same weights: the
resolved plan, the exact parameter and state counts, state-dict keys one to one (the persistent
``relative_position_index`` buffers are buffers in both), eval-mode logits at batch 2, and every
parameter's gradient in training mode.

    conv(stride 4) -> channel_layer_norm -> swin_block x 2 (shift 0, 2) -> patch_merging
    -> swin_block x 2 (shift 0, 2) -> channel_layer_norm -> adaptive_avg_pool -> flatten -> linear

At 48 x 48 the first stage is a 12 x 12 map (3 x 3 windows, shifted by 2) and the second a 6 x 6
map, which torchvision pads to 8 x 8 inside the attention (2 x 2 windows, still shifted by 2): the
padding, the cyclic shift and the shifted-window mask are all exercised. At 32 x 32 the second
stage is 4 x 4, a single window, where torchvision's rule turns the shift off; that size is
compared as well. Full-size Swin-T (depths 2, 2, 6, 2, width 96, window 7, 224 x 224) is the same
text at 21 lines; its parameter count is checked against torchvision's published figure (building it
and comparing logits with torchvision's ``swin_t()`` gave a maximum difference of 0.0 once, by hand:
too slow for this module).

timm's Swin (``swin_tiny_patch4_window7_224`` built with the same small configuration) computes the
same function with the MLP names ``mlp.fc1`` / ``mlp.fc2`` of ``swin_block``; the same text loads its
parameters and gives its logits. timm keeps ``relative_position_index`` out of its state dict
(non-persistent) where torchvision keeps it in; HNDL follows torchvision.

The same network is also written with the attention as one call per block (``window_attention``)
and the residuals, norms and MLP spelled out (1 x 1 convolutions are the per-position linears),
the way the paper's equations read; it loads the same weights and gives the same logits.

HNDL keeps ``[B, C, H, W]`` (§3); torchvision's Swin is channels-last ``[B, H, W, C]`` between its
stem and its final permute, so the operators permute inside. One difference in state that is not a
parameter: a shifted block's window mask is a non-persistent buffer here (built once for the
resolved map size), where torchvision rebuilds it on every forward; the state dicts and the
persistent buffers are identical.

Size of the description. The HNDL network is the 11 non-blank lines of ``SOURCE`` (one per layer).
The reference is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on torchvision 0.29.1: ``SwinTransformer`` 107, ``SwinTransformerBlock`` 55,
``ShiftedWindowAttention`` 79, ``shifted_window_attention`` 113, ``PatchMerging`` 25,
``_patch_merging_pad`` 9, ``_get_relative_position_bias`` 8 (torchvision.models.swin_transformer),
``MLP`` 43, ``Permute`` 13 (torchvision.ops.misc): 452 lines in all (395 without blank and
comment-only lines). The module torchvision.models.swin_transformer itself is 1,033 lines.
"""

from __future__ import annotations

import re

import pytest
import timm
import torch
from torchvision.models.swin_transformer import Swin_T_Weights, SwinTransformer

import hndl
from hndl.torch import network, parameter_counts

EMBED, HEADS, WINDOW, CLASSES = 24, (2, 4), 4, 10

SOURCE = """
conv(24, kernel_size=4, stride=4, name="patch_embed")
channel_layer_norm(1e-5, name="embed_norm")
swin_block(2, 4, name="stage1_0")
swin_block(2, 4, 2, name="stage1_1")
patch_merging(name="merge")
swin_block(4, 4, name="stage2_0")
swin_block(4, 4, 2, name="stage2_1")
channel_layer_norm(1e-5, name="norm")
adaptive_avg_pool(1, name="pool")
flatten(name="flatten")
linear(name="head")
"""


def _block_graph(name: str, heads: int, shift: int, source: str, hidden: int) -> str:
    """One Swin block with its attention as one call: x + W-MSA(LN(x)), then + MLP(LN(.))."""
    return f"""
h = channel_layer_norm({source}, 1e-5, name="{name}_norm1")
h = window_attention(h, {heads}, 4, {shift}, name="{name}_attn")
a = add({source}, h, name="{name}_add1")
h = channel_layer_norm(a, 1e-5, name="{name}_norm2")
h = conv(h, {hidden}, kernel_size=1, name="{name}_fc1")
h = gelu(h, name="{name}_act")
h = conv(h, kernel_size=1, name="{name}_fc2")
{name} = add(a, h, name="{name}_add2")
"""


GRAPH = f"""
h = conv(x, 24, kernel_size=4, stride=4, name="patch_embed")
stem = channel_layer_norm(h, 1e-5, name="embed_norm")
{_block_graph("stage1_0", 2, 0, "stem", 96)}
{_block_graph("stage1_1", 2, 2, "stage1_0", 96)}
merged = patch_merging(stage1_1, name="merge")
{_block_graph("stage2_0", 4, 0, "merged", 192)}
{_block_graph("stage2_1", 4, 2, "stage2_0", 192)}
h = channel_layer_norm(stage2_1, 1e-5, name="norm")
h = adaptive_avg_pool(h, 1, name="pool")
h = flatten(h, name="flatten")
out = linear(h, name="head")
"""
_FC1_WIDTH = {"stage1": 4 * EMBED, "stage2": 8 * EMBED}  # MLP ratio 4


def contract(size: int) -> dict:
    return dict(input_shape=("B", 3, size, size), output_shape=("B", CLASSES))


_SAME = lambda t: t  # noqa: E731
_AS_1X1 = lambda t: t[:, :, None, None]  # a per-position Linear [out, in] is a 1 x 1 conv [out, in, 1, 1]  # noqa: E731
_STAGES = {"stage1": "features.1", "stage2": "features.3"}
_ATTENTION = ("qkv.weight", "qkv.bias", "proj.weight", "proj.bias", "relative_position_bias_table",
              "relative_position_index")
_NORMS = ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")
_MLP = {"fc1.weight": "mlp.0.weight", "fc1.bias": "mlp.0.bias", "fc2.weight": "mlp.3.weight",
        "fc2.bias": "mlp.3.bias"}
_OUTSIDE = {
    "nodes.n_patch_embed.weight": ("features.0.0.weight", _SAME),
    "nodes.n_patch_embed.bias": ("features.0.0.bias", _SAME),
    "nodes.n_embed_norm.weight": ("features.0.2.weight", _SAME),
    "nodes.n_embed_norm.bias": ("features.0.2.bias", _SAME),
    "nodes.n_merge.norm.weight": ("features.2.norm.weight", _SAME),
    "nodes.n_merge.norm.bias": ("features.2.norm.bias", _SAME),
    "nodes.n_merge.reduction.weight": ("features.2.reduction.weight", _SAME),
    "nodes.n_norm.weight": ("norm.weight", _SAME), "nodes.n_norm.bias": ("norm.bias", _SAME),
    "nodes.n_head.weight": ("head.weight", _SAME), "nodes.n_head.bias": ("head.bias", _SAME),
}
_BLOCKS = [(f"{stage}_{i}", f"{prefix}.{i}") for stage, prefix in _STAGES.items() for i in range(2)]
#: HNDL state-dict entry -> (torchvision state-dict entry, how its tensor becomes ours), for SOURCE
MAPPING = {
    **_OUTSIDE,
    **{f"nodes.n_{ours}.{key}": (f"{theirs}.{key}", _SAME) for ours, theirs in _BLOCKS for key in _NORMS},
    **{f"nodes.n_{ours}.attn.{key}": (f"{theirs}.attn.{key}", _SAME) for ours, theirs in _BLOCKS
       for key in _ATTENTION},
    **{f"nodes.n_{ours}.mlp.{key}": (f"{theirs}.{value}", _SAME) for ours, theirs in _BLOCKS
       for key, value in _MLP.items()},
}
#: the same for GRAPH: the block's parts are nodes of their own, the MLP's linears 1 x 1 convolutions
GRAPH_MAPPING = {
    **_OUTSIDE,
    **{f"nodes.n_{ours}_{key}": (f"{theirs}.{key}", _SAME) for ours, theirs in _BLOCKS for key in _NORMS},
    **{f"nodes.n_{ours}_attn.{key}": (f"{theirs}.attn.{key}", _SAME) for ours, theirs in _BLOCKS
       for key in _ATTENTION},
    **{f"nodes.n_{ours}_{key}": (f"{theirs}.{value}", _AS_1X1 if key.endswith("weight") else _SAME)
       for ours, theirs in _BLOCKS for key, value in _MLP.items()},
}


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    model = SwinTransformer(patch_size=[4, 4], embed_dim=EMBED, depths=[2, 2], num_heads=list(HEADS),
                            window_size=[WINDOW, WINDOW], stochastic_depth_prob=0.0, num_classes=CLASSES).eval()
    with torch.no_grad():  # biases start at 0, norms at 1, tables near 0: move every parameter
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def _loaded(source: str, mapping: dict, reference, size: int):
    model = network(source, device="cpu", **contract(size)).eval()
    theirs = reference.state_dict()
    assert set(mapping) == set(model.state_dict()) and {name for name, _ in mapping.values()} == set(theirs)
    model.load_state_dict({key: convert(theirs[name]) for key, (name, convert) in mapping.items()})
    return model


def test_the_plan_resolves_every_stage():
    plan = hndl.resolve(SOURCE, **contract(48))
    assert [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes] == [
        ("patch_embed", "conv", ("B", EMBED, 12, 12)),
        ("embed_norm", "channel_layer_norm", ("B", EMBED, 12, 12)),
        ("stage1_0", "swin_block", ("B", EMBED, 12, 12)),
        ("stage1_1", "swin_block", ("B", EMBED, 12, 12)),
        ("merge", "patch_merging", ("B", 2 * EMBED, 6, 6)),
        ("stage2_0", "swin_block", ("B", 2 * EMBED, 6, 6)),
        ("stage2_1", "swin_block", ("B", 2 * EMBED, 6, 6)),
        ("norm", "channel_layer_norm", ("B", 2 * EMBED, 6, 6)),
        ("pool", "adaptive_avg_pool", ("B", 2 * EMBED, 1, 1)),
        ("flatten", "flatten", ("B", 2 * EMBED)),
        ("head", "linear", ("B", CLASSES)),
    ]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["stage1_1"].args["shift"] == (2, 2) and nodes["stage2_0"].args["heads"] == 4
    assert nodes["head"].args["in_features"] == 2 * EMBED


def test_parameter_and_buffer_counts_equal_torchvision(reference):
    model = network(SOURCE, device="cpu", **contract(48))
    ours, theirs = model.state_dict(), reference.state_dict()
    assert len(ours) == len(theirs) == 67
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == sum(p.numel() for p in reference.parameters()) == 78_190
    persistent = {name: b for name, b in model.named_buffers() if name in ours}
    assert len(persistent) == len(list(reference.buffers())) == 4  # relative_position_index, one per block
    assert sum(b.numel() for b in persistent.values()) == sum(b.numel() for b in reference.buffers())
    assert all(b.dtype == torch.int64 for b in persistent.values())
    # the only other state: the two shifted blocks' window masks, rebuilt by torchvision in forward
    extra = {name: tuple(b.shape) for name, b in model.named_buffers() if name not in ours}
    assert extra == {"nodes.n_stage1_1.attn.attention_mask": (9, 16, 16),
                     "nodes.n_stage2_1.attn.attention_mask": (4, 16, 16)}
    # torchvision loads our state dict under its own names
    for key, (name, convert) in MAPPING.items():
        assert convert(theirs[name]).shape == ours[key].shape, key


@pytest.mark.parametrize("size", [48, 32])
def test_eval_logits_match_torchvision(reference, size):
    model = _loaded(SOURCE, MAPPING, reference, size)
    images = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(images), reference(images)
        features = reference.norm(reference.features(images)).permute(0, 3, 1, 2)
        seen = []
        hook = model.nodes.n_norm.register_forward_hook(lambda module, args, out: seen.append(out))
        try:
            model(images)
        finally:
            hook.remove()
    assert ours.shape == (2, CLASSES)
    torch.testing.assert_close(seen[0], features)
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours[0], ours[1])


def test_the_block_written_out_with_window_attention_matches_torchvision(reference):
    model = _loaded(GRAPH, GRAPH_MAPPING, reference, 48)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    fc1 = {node: module.weight.shape[0] for node, module in model.nodes.items() if node.endswith("_fc1")}
    assert fc1 == {f"n_{block}_fc1": _FC1_WIDTH[block[:6]] for block, _ in _BLOCKS}
    images = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images))


def test_training_gradients_match_torchvision(reference):
    model = _loaded(SOURCE, MAPPING, reference, 48).train()
    reference.train()
    try:
        images = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(3))
        model(images).square().sum().backward()
        reference(images).square().sum().backward()
        theirs = dict(reference.named_parameters())
        for key, parameter in model.named_parameters():
            name, convert = MAPPING[key]
            torch.testing.assert_close(parameter.grad, convert(theirs[name].grad), rtol=1e-4, atol=1e-5)
    finally:
        reference.zero_grad()
        reference.eval()


def swin_t_source() -> str:
    """Swin-T, one line per layer: the configuration of torchvision's ``swin_t``."""
    lines = ['conv(96, kernel_size=4, stride=4, name="patch_embed")', 'channel_layer_norm(1e-5, name="embed_norm")']
    for stage, (depth, heads) in enumerate(zip((2, 2, 6, 2), (3, 6, 12, 24))):
        lines += [f'swin_block({heads}, 7, {3 * (i % 2)}, name="stage{stage}_{i}")' for i in range(depth)]
        lines += [f'patch_merging(name="merge{stage}")'] if stage < 3 else []
    lines += ['channel_layer_norm(1e-5, name="norm")', 'adaptive_avg_pool(1, name="pool")', 'flatten(name="flatten")',
              'linear(name="head")']
    return "\n".join(lines)


def test_full_size_swin_t_has_torchvision_parameter_count():
    source = swin_t_source()
    assert len(source.splitlines()) == 21
    plan = hndl.resolve(source, input_shape=("B", 3, 224, 224), output_shape=("B", 1000))
    shapes = {node.id: node.output_shapes["out"] for node in plan.nodes}
    assert shapes["stage0_1"] == ("B", 96, 56, 56) and shapes["stage3_1"] == ("B", 768, 7, 7)
    counts = parameter_counts(plan)  # constructed on the meta device: the count needs no memory
    assert sum(counts.values()) == Swin_T_Weights.IMAGENET1K_V1.meta["num_params"] == 28_288_354


def _timm_name(ours: str) -> str:
    """Our state-dict entry under timm's names."""
    for pattern, replacement in ((r"nodes\.n_patch_embed\.", "patch_embed.proj."),
                                 (r"nodes\.n_embed_norm\.", "patch_embed.norm."),
                                 (r"nodes\.n_stage1_(\d)\.", r"layers.0.blocks.\1."),
                                 (r"nodes\.n_stage2_(\d)\.", r"layers.1.blocks.\1."),
                                 (r"nodes\.n_merge\.", "layers.1.downsample."), (r"nodes\.n_norm\.", "norm."),
                                 (r"nodes\.n_head\.", "head.fc.")):
        ours = re.sub(pattern, replacement, ours)
    return ours


def test_the_same_text_matches_timm_swin():
    torch.manual_seed(0)
    reference = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, embed_dim=EMBED, depths=(2, 2),
                                  num_heads=HEADS, window_size=WINDOW, img_size=48, num_classes=CLASSES).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model = network(SOURCE, device="cpu", **contract(48)).eval()
    theirs = dict(reference.named_parameters())
    ours = {name: _timm_name(name) for name, _ in model.named_parameters()}
    assert set(ours.values()) == set(theirs)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(theirs[ours[name]])
    images = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(images))
