"""A small diffusion UNet (diffusers' UNet2DModel layout) trained for a few DDPM steps on toy images.

The network is a trusted callable written the way diffusers builds its UNet: loops over the
configured blocks and two helpers, a ResNet block (group norm, swish, conv, the block's projection
of the time embedding added to every pixel with `channel_add`, group norm, swish, conv, residual)
and an attention block over the feature map's pixels (one `attention` call), unrolled once at
capture into a static graph. It has two inputs, the noisy `sample [B, 3, 16, 16]` and the integer
`timestep [B, 1]` (one timestep per example; rank-1 contracts are outside HNDL's ranks), and predicts
the noise that was added. The time embedding is one `timestep_embedding` call, whose sinusoid
frequencies are a non-persistent buffer.

tests/architectures/test_unet2d.py checks this very network against diffusers' UNet2DModel with
copied weights. Here it trains on colored squares with the DDPM noise-prediction loss, then draws
a few samples with a 10-step deterministic (DDIM) sampler.

Run: python examples/diffusion_unet.py
"""

import torch
import torch.nn.functional as F

from hndl import ops
from hndl.torch import network_from_callable

CONFIG = dict(sample_size=16, channels=3, block_out_channels=(32, 64), layers_per_block=1,
              down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
              norm_num_groups=8, attention_head_dim=8)
CONTRACT = dict(input_shape={"sample": ("B", 3, 16, 16), "timestep": ("B", 1)}, output_shape=("B", 3, 16, 16),
                input_dtype={"timestep": "int64"})
STEPS = 1000  # the DDPM noise schedule: beta rises linearly from 1e-4 to 0.02


def unet(*, sample, timestep):
    """diffusers' UNet2DModel forward, one operator call per layer."""
    widths, size, groups = CONFIG["block_out_channels"], CONFIG["sample_size"], CONFIG["norm_num_groups"]

    def resnet_block(x, width_in, width, name):
        ops.group_norm(x, groups, name=f"{name}_norm1")
        ops.swish()
        h = ops.conv(width, kernel_size=3, padding=1, name=f"{name}_conv1")
        ops.channel_add(h, ops.linear(temb, name=f"{name}_time_emb_proj"))  # the width is inferred from h
        ops.group_norm(groups, name=f"{name}_norm2")
        ops.swish()
        h = ops.conv(width, kernel_size=3, padding=1, name=f"{name}_conv2")
        if width_in != width:
            x = ops.conv(x, width, kernel_size=1, name=f"{name}_conv_shortcut")
        return ops.add(x, h, name=name)

    def attention_block(x, width, side, name):
        ops.group_norm(x, groups, name=f"{name}_group_norm")
        ops.reshape(width, side * side)  # [B, C, H*W]
        ops.transpose(1, 2)  # the pixels as a sequence of tokens, [B, H*W, C]
        ops.attention(width // CONFIG["attention_head_dim"], qkv="separate", name=name)
        ops.transpose(1, 2)
        return ops.add(x, ops.reshape(width, side, side), name=f"{name}_residual")

    ops.timestep_embedding(timestep, widths[0], flip_sin_to_cos=True, downscale_freq_shift=0, name="time_proj")
    ops.linear(4 * widths[0], name="time_linear_1")
    ops.swish()
    temb = ops.swish(ops.linear(4 * widths[0], name="time_linear_2"))

    x = ops.conv(sample, widths[0], kernel_size=3, padding=1, name="conv_in")
    width = widths[0]
    skips = [(x, width)]
    last = len(widths) - 1
    for level, (kind, out) in enumerate(zip(CONFIG["down_block_types"], widths)):
        for i in range(CONFIG["layers_per_block"]):
            x, width = resnet_block(x, width, out, f"down{level}_res{i}"), out
            if kind == "AttnDownBlock2D":
                x = attention_block(x, width, size >> level, f"down{level}_attn{i}")
            skips.append((x, width))
        if level < last:
            x = ops.conv(width, kernel_size=3, stride=2, padding=1, name=f"down{level}_downsample")
            skips.append((x, width))
    x = resnet_block(x, width, width, "mid_res0")
    x = attention_block(x, width, size >> last, "mid_attn0")
    x = resnet_block(x, width, width, "mid_res1")
    for level, (kind, out) in enumerate(zip(CONFIG["up_block_types"], reversed(widths))):
        for i in range(CONFIG["layers_per_block"] + 1):
            skip, skip_width = skips.pop()
            x = ops.concat(x, skip, name=f"up{level}_cat{i}")
            x, width = resnet_block(x, width + skip_width, out, f"up{level}_res{i}"), out
            if kind == "AttnUpBlock2D":
                x = attention_block(x, width, size >> (last - level), f"up{level}_attn{i}")
        if level < last:
            ops.upsample(2)
            x = ops.conv(width, kernel_size=3, padding=1, name=f"up{level}_upsample")
    ops.group_norm(x, groups, name="conv_norm_out")
    ops.swish()
    return ops.conv(kernel_size=3, padding=1, name="conv_out")  # 3 channels, from the output contract


def squares(count: int, generator: torch.Generator) -> torch.Tensor:
    """Toy images in [-1, 1]: a square of a random color and size at a random place on black."""
    images = -torch.ones(count, 3, 16, 16)
    for image in images:
        side = int(torch.randint(4, 9, (), generator=generator))
        top, left = (int(v) for v in torch.randint(0, 17 - side, (2,), generator=generator))
        image[:, top:top + side, left:left + side] = torch.rand(3, 1, 1, generator=generator) * 2 - 1
    return images


def main() -> None:
    model = network_from_callable(unet, device="cpu", initialization_seed=0, **CONTRACT)
    plan = model.plan
    print(str(model).splitlines()[0])
    aliases = [node.alias for node in plan.nodes]
    print(f"nodes: {len(aliases)}; resnet blocks: {aliases.count('channel_add')}; "
          f"attention blocks: {aliases.count('attention')}")
    print(f"parameters: {sum(p.numel() for p in model.parameters())}; "
          f"buffers: {', '.join(name for name, _ in model.named_buffers())} (not saved: "
          f"{all(name not in model.state_dict() for name, _ in model.named_buffers())})")

    betas = torch.linspace(1e-4, 0.02, STEPS)
    alphas_cumprod = torch.cumprod(1 - betas, dim=0)
    generator = torch.Generator().manual_seed(0)
    data = squares(64, generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(20):
        images = data[torch.randint(0, len(data), (8,), generator=generator)]
        t = torch.randint(0, STEPS, (8,), generator=generator)
        noise = torch.randn(images.shape, generator=generator)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        noisy = a.sqrt() * images + (1 - a).sqrt() * noise
        loss = F.mse_loss(model(noisy, timestep=t[:, None]), noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, final = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"noise-prediction loss (mean of 5 steps): {first:.3f} -> {final:.3f}")

    model.eval()
    x = torch.randn(4, 3, 16, 16, generator=generator)
    timesteps = torch.linspace(STEPS - 1, 0, 10).long()
    with torch.no_grad():  # DDIM (eta = 0): predict the clean image, step to the next timestep's noise level
        for step, t in enumerate(timesteps):
            a = alphas_cumprod[t]
            noise = model(x, timestep=t.repeat(4, 1))
            clean = ((x - (1 - a).sqrt() * noise) / a.sqrt()).clamp(-1, 1)
            a_next = alphas_cumprod[timesteps[step + 1]] if step + 1 < len(timesteps) else torch.tensor(1.0)
            x = a_next.sqrt() * clean + (1 - a_next).sqrt() * noise
    print(f"samples: {list(x.shape)}, values in [{x.min().item():.2f}, {x.max().item():.2f}]")


if __name__ == "__main__":
    main()
