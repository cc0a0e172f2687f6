"""A tiny diffusers ``UNet2DModel`` written as HNDL configuration text with catalog operators only,
against diffusers 0.42.1's own module built from its config (nothing downloaded) carrying the same
weights: the resolved plan, exact parameter and buffer counts, state-dict keys one to one, eval-mode
outputs at batch 2 and every gradient of a training step.

The configuration (``CONFIG``) is the one a DDPM-style experiment would shrink to::

    UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(32, 64),
                layers_per_block=1, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8, attention_head_dim=8)

What it computes, as the HNDL text writes it (one operator call per line, no loops: configuration
text has none):

* **Time embedding.** ``timestep_embedding`` (diffusers' ``Timesteps``: sinusoidal features,
  ``flip_sin_to_cos=True``, ``downscale_freq_shift=0``; its frequency table is a non-persistent
  buffer, as the reference computes it on the fly and saves nothing), then diffusers'
  ``TimestepEmbedding``, ``linear -> swish -> linear`` to 128 = 4 x 32 features.
* **ResNet block** (``ResnetBlock2D``, ``time_embedding_norm="default"``): group norm, swish, 3x3
  conv, ``channel_add`` of the block's own projection of ``swish(emb)`` over every pixel (the
  reference's ``temb[:, :, None, None]`` broadcast, declared), group norm, swish, 3x3 conv, plus the
  input (through a 1x1 ``conv_shortcut`` where the widths differ). The reference applies the swish to
  the time embedding inside every block; it has no parameters, so the text computes it once
  (``temb``) and every block projects it. The projection widths are never written: ``channel_add``
  infers them from the feature map.
* **Attention block** (diffusers ``Attention`` with ``AttnProcessor2_0``, ``group_norm`` and
  ``residual_connection=True``): group norm over the map, ``reshape`` + ``transpose`` to the
  ``[B, H*W, C]`` token sequence, one ``attention(8, qkv="separate")`` call (separate ``to_q``,
  ``to_k``, ``to_v`` projections with biases, 8 heads of width 8, the output projection ``to_out[0]``),
  back to ``[B, C, H, W]`` and added to the block's input.
* **Down/up sampling.** ``Downsample2D`` is a stride-2 3x3 conv; ``Upsample2D`` is nearest
  ``upsample(2)`` then a 3x3 conv. The up path concatenates the saved down-path activations in
  diffusers' order (``cat([h, skip])``, last saved first), so its ResNet blocks widen 64+64, 64+32,
  64+32 and 32+32.
* **Variant.** ``resnet_time_scale_shift="scale_shift"`` (improved DDPM's adaptive group norm) is the
  same text with ``channel_scale_shift`` after each block's second norm in place of the
  ``channel_add`` before it (``scale_shift_source``), checked against that diffusers model too.

Inputs: ``sample [B, 3, 16, 16]`` and ``timestep [B, 1]``. The reference takes a rank-1 ``[B]``
timestep vector; rank 1 is outside hndl-spec section 3 (contracts are rank 2, 3 or 4 including the
batch), so the HNDL network takes ``timesteps[:, None]``: the same integer timesteps
(``input_dtype={"timestep": "int64"}``), one per example.

Size of the description. The HNDL network is the 108 non-blank, non-comment lines of ``SOURCE``, one
operator call or join per line. The same network as a trusted callable (``unet`` in
examples/diffusion_unet.py: loops over the block types and two helpers, a ResNet block and an
attention block, as diffusers writes it) is 53 lines of code and resolves to the same plan, node for node (same semantic digest).
The reference is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on diffusers 0.42.1: ``UNet2DModel`` 315 (diffusers.models.unets.unet_2d),
``ResnetBlock2D`` 190 (models.resnet), ``Attention`` 787 and ``AttnProcessor2_0`` 92
(models.attention_processor), ``Downsample2D`` 81, ``Upsample2D`` 117, ``Timesteps`` 17,
``TimestepEmbedding`` 46 and ``get_timestep_embedding`` 52 (models.downsampling, models.upsampling,
models.embeddings), ``get_down_block`` 207, ``get_up_block`` 223, ``DownBlock2D`` 76,
``AttnDownBlock2D`` 127, ``UNetMidBlock2D`` 160, ``AttnUpBlock2D`` 127 and ``UpBlock2D`` 99
(models.unets.unet_2d_blocks): 2,716 lines in all (2,334 without blank and comment-only lines). Most
of it serves other configurations (other block types, cross-attention, processors, deprecations);
the HNDL text writes out only this one network, layer by layer.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from diffusers import UNet2DModel

import hndl
from hndl.torch import network, restore

CONFIG = dict(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(32, 64), layers_per_block=1,
              down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
              norm_num_groups=8, attention_head_dim=8)

SOURCE = """
# time embedding: Timesteps(32, flip_sin_to_cos=True, downscale_freq_shift=0), TimestepEmbedding(32, 128)
timestep_embedding(timestep, 32, flip_sin_to_cos=True, downscale_freq_shift=0, name="time_proj")
linear(128, name="time_linear_1")
swish()
emb = linear(128, name="time_linear_2")
temb = swish(emb)

s0 = conv(sample, 32, kernel_size=3, padding=1, name="conv_in")

# down block 0 (DownBlock2D): ResNet block 32 -> 32, stride-2 conv
group_norm(8, name="down0_res0_norm1")
swish()
h = conv(32, kernel_size=3, padding=1, name="down0_res0_conv1")
channel_add(h, linear(temb, name="down0_res0_time_emb_proj"))
group_norm(8, name="down0_res0_norm2")
swish()
h = conv(32, kernel_size=3, padding=1, name="down0_res0_conv2")
s1 = add(s0, h, name="down0_res0")
s2 = conv(32, kernel_size=3, stride=2, padding=1, name="down0_downsample")

# down block 1 (AttnDownBlock2D): ResNet block 32 -> 64, attention
group_norm(8, name="down1_res0_norm1")
swish()
h = conv(64, kernel_size=3, padding=1, name="down1_res0_conv1")
channel_add(h, linear(temb, name="down1_res0_time_emb_proj"))
group_norm(8, name="down1_res0_norm2")
swish()
h = conv(64, kernel_size=3, padding=1, name="down1_res0_conv2")
r = add(conv(s2, 64, kernel_size=1, name="down1_res0_conv_shortcut"), h, name="down1_res0")
group_norm(8, name="down1_attn0_group_norm")
reshape(64, 64)
transpose(1, 2)
attention(8, qkv="separate", name="down1_attn0")
transpose(1, 2)
a = reshape(64, 8, 8)
s3 = add(r, a, name="down1_attn0_residual")

# mid block (UNetMidBlock2D): ResNet block, attention, ResNet block at 64
group_norm(8, name="mid_res0_norm1")
swish()
h = conv(64, kernel_size=3, padding=1, name="mid_res0_conv1")
channel_add(h, linear(temb, name="mid_res0_time_emb_proj"))
group_norm(8, name="mid_res0_norm2")
swish()
h = conv(64, kernel_size=3, padding=1, name="mid_res0_conv2")
r = add(s3, h, name="mid_res0")
group_norm(8, name="mid_attn0_group_norm")
reshape(64, 64)
transpose(1, 2)
attention(8, qkv="separate", name="mid_attn0")
transpose(1, 2)
a = reshape(64, 8, 8)
x = add(r, a, name="mid_attn0_residual")
group_norm(8, name="mid_res1_norm1")
swish()
h = conv(64, kernel_size=3, padding=1, name="mid_res1_conv1")
channel_add(h, linear(temb, name="mid_res1_time_emb_proj"))
group_norm(8, name="mid_res1_norm2")
swish()
h = conv(64, kernel_size=3, padding=1, name="mid_res1_conv2")
x = add(x, h, name="mid_res1")

# up block 0 (AttnUpBlock2D): [ResNet block on cat(h, skip), attention] x 2, nearest x2 + conv
x = concat(x, s3, name="up0_cat0")
group_norm(8, name="up0_res0_norm1")
swish()
h = conv(64, kernel_size=3, padding=1, name="up0_res0_conv1")
channel_add(h, linear(temb, name="up0_res0_time_emb_proj"))
group_norm(8, name="up0_res0_norm2")
swish()
h = conv(64, kernel_size=3, padding=1, name="up0_res0_conv2")
r = add(conv(x, 64, kernel_size=1, name="up0_res0_conv_shortcut"), h, name="up0_res0")
group_norm(8, name="up0_attn0_group_norm")
reshape(64, 64)
transpose(1, 2)
attention(8, qkv="separate", name="up0_attn0")
transpose(1, 2)
a = reshape(64, 8, 8)
x = add(r, a, name="up0_attn0_residual")
x = concat(x, s2, name="up0_cat1")
group_norm(8, name="up0_res1_norm1")
swish()
h = conv(64, kernel_size=3, padding=1, name="up0_res1_conv1")
channel_add(h, linear(temb, name="up0_res1_time_emb_proj"))
group_norm(8, name="up0_res1_norm2")
swish()
h = conv(64, kernel_size=3, padding=1, name="up0_res1_conv2")
r = add(conv(x, 64, kernel_size=1, name="up0_res1_conv_shortcut"), h, name="up0_res1")
group_norm(8, name="up0_attn1_group_norm")
reshape(64, 64)
transpose(1, 2)
attention(8, qkv="separate", name="up0_attn1")
transpose(1, 2)
a = reshape(64, 8, 8)
add(r, a, name="up0_attn1_residual")
upsample(2)
x = conv(64, kernel_size=3, padding=1, name="up0_upsample")

# up block 1 (UpBlock2D): ResNet block on cat(h, skip) x 2
x = concat(x, s1, name="up1_cat0")
group_norm(8, name="up1_res0_norm1")
swish()
h = conv(32, kernel_size=3, padding=1, name="up1_res0_conv1")
channel_add(h, linear(temb, name="up1_res0_time_emb_proj"))
group_norm(8, name="up1_res0_norm2")
swish()
h = conv(32, kernel_size=3, padding=1, name="up1_res0_conv2")
x = add(conv(x, 32, kernel_size=1, name="up1_res0_conv_shortcut"), h, name="up1_res0")
x = concat(x, s0, name="up1_cat1")
group_norm(8, name="up1_res1_norm1")
swish()
h = conv(32, kernel_size=3, padding=1, name="up1_res1_conv1")
channel_add(h, linear(temb, name="up1_res1_time_emb_proj"))
group_norm(8, name="up1_res1_norm2")
swish()
h = conv(32, kernel_size=3, padding=1, name="up1_res1_conv2")
add(conv(x, 32, kernel_size=1, name="up1_res1_conv_shortcut"), h, name="up1_res1")

# output: group norm, swish, 3x3 conv to the contract's 3 channels
group_norm(8, name="conv_norm_out")
swish()
conv(kernel_size=3, padding=1, name="conv_out")
"""
CONTRACT = dict(input_shape={"sample": ("B", 3, 16, 16), "timestep": ("B", 1)}, output_shape=("B", 3, 16, 16),
                input_dtype={"timestep": "int64"})


def _example_unet():
    """``unet`` of examples/diffusion_unet.py: the same network as a trusted callable, written the way
    diffusers builds it (loops over the configured blocks, a ResNet and an attention helper)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "diffusion_unet.py"
    spec = importlib.util.spec_from_file_location("diffusion_unet_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example.unet


#: the reference's (diffusers) submodule -> our node, for every block that holds state
_RESNETS = {  # ours: (theirs, has a 1x1 shortcut)
    "down0_res0": ("down_blocks.0.resnets.0", False),
    "down1_res0": ("down_blocks.1.resnets.0", True),
    "mid_res0": ("mid_block.resnets.0", False),
    "mid_res1": ("mid_block.resnets.1", False),
    "up0_res0": ("up_blocks.0.resnets.0", True),
    "up0_res1": ("up_blocks.0.resnets.1", True),
    "up1_res0": ("up_blocks.1.resnets.0", True),
    "up1_res1": ("up_blocks.1.resnets.1", True),
}
_ATTENTIONS = {
    "down1_attn0": "down_blocks.1.attentions.0",
    "mid_attn0": "mid_block.attentions.0",
    "up0_attn0": "up_blocks.0.attentions.0",
    "up0_attn1": "up_blocks.0.attentions.1",
}
#: the attention node's parameters -> the diffusers Attention's (qkv="separate")
_ATTENTION_STATE = {"q_proj": "to_q", "k_proj": "to_k", "v_proj": "to_v", "out_proj": "to_out.0"}
_LAYERS = {  # our node -> the reference's module holding a weight and a bias
    "conv_in": "conv_in",
    "time_linear_1": "time_embedding.linear_1",
    "time_linear_2": "time_embedding.linear_2",
    "down0_downsample": "down_blocks.0.downsamplers.0.conv",
    "up0_upsample": "up_blocks.0.upsamplers.0.conv",
    "conv_norm_out": "conv_norm_out",
    "conv_out": "conv_out",
}
for _ours, (_theirs, _shortcut) in _RESNETS.items():
    for _part in ("norm1", "conv1", "time_emb_proj", "norm2", "conv2") + (("conv_shortcut",) if _shortcut else ()):
        _LAYERS[f"{_ours}_{_part}"] = f"{_theirs}.{_part}"
for _ours, _theirs in _ATTENTIONS.items():
    _LAYERS[f"{_ours}_group_norm"] = f"{_theirs}.group_norm"
    for _part, _their_part in _ATTENTION_STATE.items():
        _LAYERS[f"{_ours}.{_part}"] = f"{_theirs}.{_their_part}"

#: HNDL state-dict entry -> diffusers state-dict entry (every tensor is copied as it is)
MAPPING = {f"nodes.n_{ours}.{kind}": f"{theirs}.{kind}" for ours, theirs in _LAYERS.items()
           for kind in ("weight", "bias")}


def reference_unet(**changes) -> UNet2DModel:
    torch.manual_seed(0)
    reference = UNet2DModel(**CONFIG, **changes).eval()
    with torch.no_grad():  # norms start at 1 and 0: move every parameter
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return reference


def hndl_unet(reference: UNet2DModel, source: str = SOURCE, mapping: dict = MAPPING) -> torch.nn.Module:
    model = network(source, device="cpu", **CONTRACT).eval()
    theirs = reference.state_dict()
    assert set(mapping) == set(model.state_dict()) and set(mapping.values()) == set(theirs)
    model.load_state_dict({ours: theirs[name] for ours, name in mapping.items()})
    return model


@pytest.fixture(scope="module")
def reference() -> UNet2DModel:
    return reference_unet()


@pytest.fixture(scope="module")
def model(reference) -> torch.nn.Module:
    return hndl_unet(reference)


def _inputs(batch: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    sample = torch.randn(batch, 3, 16, 16, generator=generator)
    timesteps = torch.tensor([3, 500, 999, 0, 42, 250][:batch])
    return sample, timesteps


# -- the plan --------------------------------------------------------------------------------------------------
def test_the_plan_resolves_every_size_from_the_contract():
    plan = hndl.resolve(SOURCE, **CONTRACT)
    assert [(port["name"], port["shape"], port["dtype"]) for port in plan.inputs] == [
        ("sample", ("B", 3, 16, 16), "float32"), ("timestep", ("B", 1), "int64")]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["time_proj"].args == {"dims": 32, "flip_sin_to_cos": True, "downscale_freq_shift": 0.0, "scale": 1.0,
                                       "max_period": 10_000}
    assert nodes["time_proj"].output_shapes["out"] == ("B", 32)
    assert nodes["time_linear_2"].output_shapes["out"] == ("B", 128)
    assert nodes["down0_downsample"].output_shapes["out"] == ("B", 32, 8, 8)
    assert nodes["up0_upsample"].output_shapes["out"] == ("B", 64, 16, 16)
    # the ResNet blocks' time projections are never written: each takes its width from its feature map
    for ours, width in {"down0_res0": 32, "down1_res0": 64, "mid_res0": 64, "up0_res1": 64, "up1_res1": 32}.items():
        projection = nodes[f"{ours}_time_emb_proj"]
        assert projection.args["out_features"] == width and projection.provenance["out_features"] == "inferred"
        assert projection.input_shapes["x"] == ("B", 128)
    # the skip joins widen the up path as diffusers' cat([h, skip]) does
    assert [nodes[f"up{i}_cat{j}"].output_shapes["out"][1] for i in (0, 1) for j in (0, 1)] == [128, 96, 96, 64]
    for name in _ATTENTIONS:
        attention = nodes[name]
        assert attention.input_shapes["x"] == ("B", 64, 64)  # 8 x 8 pixels as 64 tokens of 64 channels
        assert attention.args["heads"] == 8 and attention.args["qkv"] == "separate"
    assert nodes["conv_out"].args["out_channels"] == 3 and nodes["conv_out"].provenance["out_channels"] == "inferred"
    assert sum(node.alias == "channel_add" for node in plan.nodes) == len(_RESNETS)
    assert sum(node.alias == "attention" for node in plan.nodes) == len(_ATTENTIONS)


# -- state -----------------------------------------------------------------------------------------------------
def test_parameters_and_buffers_are_exactly_the_references(model, reference):
    ours, theirs = model.state_dict(), reference.state_dict()
    assert len(ours) == len(theirs) == len(MAPPING) == 144
    for key, name in MAPPING.items():
        assert ours[key].shape == theirs[name].shape, key
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters()) == 702_499
    # neither saves a buffer; the sinusoid frequencies are a non-persistent buffer of the embedding node
    assert [name for name, _ in reference.named_buffers()] == []
    assert {name for name, _ in model.named_parameters()} == set(ours)
    assert [name for name, _ in model.named_buffers()] == ["nodes.n_time_proj.frequencies"]
    frequencies = torch.exp(-math.log(10_000) * torch.arange(16) / 16)  # 32 // 2 of them; downscale_freq_shift=0
    torch.testing.assert_close(model.nodes.n_time_proj.frequencies, frequencies)
    assert all(parameter.requires_grad for parameter in model.parameters())


# -- numerics --------------------------------------------------------------------------------------------------
def test_eval_output_matches_diffusers_at_batch_2(model, reference):
    sample, timesteps = _inputs()
    with torch.no_grad():
        ours = model(sample, timestep=timesteps[:, None])
        theirs = reference(sample, timesteps).sample
    assert ours.shape == (2, 3, 16, 16)
    torch.testing.assert_close(ours, theirs)
    assert not torch.allclose(ours[0], ours[1])  # the two timesteps make different predictions


def test_the_saved_plan_and_state_restore_the_same_network(model, reference):
    restored = restore(model.plan.to_json(), model.state_dict(), device="cpu").eval()  # called like network()'s model
    assert restored.plan.semantic_digest == model.plan.semantic_digest
    sample, timesteps = _inputs()
    with torch.no_grad():
        ours = restored(sample, timestep=timesteps[:, None])
    torch.testing.assert_close(ours, reference(sample, timesteps).sample)


def test_the_timestep_changes_the_prediction_like_the_reference(model, reference):
    sample, _ = _inputs()
    sample = sample[:1].expand(2, -1, -1, -1)  # the same image at two timesteps
    timesteps = torch.tensor([10, 900])
    with torch.no_grad():
        ours = model(sample, timestep=timesteps[:, None])
        torch.testing.assert_close(ours, reference(sample, timesteps).sample)
    assert not torch.allclose(ours[0], ours[1], atol=1e-3)


def test_a_training_step_matches_every_gradient_and_update():
    reference = reference_unet().train()
    model = hndl_unet(reference).train()
    sample, timesteps = _inputs(batch=3, seed=2)
    noise = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    F.mse_loss(model(sample, timestep=timesteps[:, None]), noise).backward()
    F.mse_loss(reference(sample, timesteps).sample, noise).backward()
    theirs = dict(reference.named_parameters())
    for key, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.count_nonzero(parameter.grad) > 0, key
        torch.testing.assert_close(parameter.grad, theirs[MAPPING[key]].grad, rtol=1e-4, atol=1e-6, msg=key)
    for module in (model, reference):
        torch.optim.SGD(module.parameters(), lr=0.1).step()
    model.eval()
    reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(sample, timestep=timesteps[:, None]),
                                   reference(sample, timesteps).sample, rtol=1e-4, atol=1e-5)


# -- the scale-shift variant -----------------------------------------------------------------------------------
def scale_shift_source() -> str:
    """``SOURCE`` for ``resnet_time_scale_shift="scale_shift"`` (improved DDPM's AdaGN): each ResNet
    block normalizes first, then scales and shifts the map by its time projection, ``norm2(h) * (1 +
    scale) + shift`` (``channel_scale_shift``, whose projection width 2 * C is inferred). In this mode
    diffusers' ``UNetMidBlock2D`` builds its attention without a group norm (``attn_groups`` falls to
    None unless the shift is "default"), so the mid attention's norm line goes too."""
    source, blocks = re.subn(
        r'(h = conv\(\d+, kernel_size=3, padding=1, name="\w+_conv1"\))\n'
        r'channel_add\(h, (linear\(temb, name="\w+"\))\)\n'
        r'(group_norm\(8, name="\w+_norm2"\))\n',
        r"\1\nh = \3\nchannel_scale_shift(h, \2)\n", SOURCE)
    assert blocks == len(_RESNETS) and source.count('group_norm(8, name="mid_attn0_group_norm")\n') == 1
    return source.replace('group_norm(8, name="mid_attn0_group_norm")\n', "")


def test_the_scale_shift_variant_matches_diffusers():
    reference = reference_unet(resnet_time_scale_shift="scale_shift")
    mapping = {ours: theirs for ours, theirs in MAPPING.items() if not ours.startswith("nodes.n_mid_attn0_group_norm.")}
    model = hndl_unet(reference, scale_shift_source(), mapping)
    nodes = {node.id: node for node in model.plan.nodes}
    assert nodes["up1_res1_time_emb_proj"].output_shapes["out"] == ("B", 64)  # 2 x 32 channels, inferred
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters()) == 756_035
    sample, timesteps = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(sample, timestep=timesteps[:, None]), reference(sample, timesteps).sample)


# -- the same network with loops -------------------------------------------------------------------------------
def test_the_callable_with_loops_and_helpers_is_the_same_network():
    text, captured = hndl.resolve(SOURCE, **CONTRACT), hndl.resolve_callable(_example_unet(), **CONTRACT)
    assert [node.id for node in captured.nodes] == [node.id for node in text.nodes]
    assert captured.semantic_digest == text.semantic_digest
