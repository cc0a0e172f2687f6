"""layer_norm2d@1 (alias channel_layer_norm): layer normalization over the channels of [B, C, H, W]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling


def _reference(module):
    """The normalization written out over axis 1: population variance, then the affine per channel."""

    def forward(x):
        mean = x.mean(dim=1, keepdim=True)
        variance = (x - mean).square().mean(dim=1, keepdim=True)
        out = (x - mean) / torch.sqrt(variance + module.eps)
        if module.weight is not None:
            out = out * module.weight[None, :, None, None] + module.bias[None, :, None, None]
        return out

    return forward


@operator(
    "channel_layer_norm",
    torch=TorchSpelling(
        signature="timm LayerNorm2d(num_channels, eps=1e-06)",
        hint="channel_layer_norm reads the channel count from its input: timm's LayerNorm2d(64) is "
             "channel_layer_norm() here; give eps as a float or by keyword: "
             "channel_layer_norm(eps=1e-06).",
        width_first=True,
    ),
    identity="layer_norm2d",
    summary="Normalize every spatial position of [B, C, H, W] over its channels, then scale and shift per channel.",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    shape_text="out has the shape of x; the normalized width C is read from the input (or, backward, the output).",
    args={
        "eps": Arg(float, 1e-6, min=0, exclusive_min=True,
                   help="Added to the variance before the square root; must be positive (1e-6, as in ConvNeXt)."),
        "elementwise_affine": Arg(bool, True, positional=False,
                                  help="Whether to learn a per-channel scale (weight, ones) and shift (bias, zeros)."),
    },
    category="normalization",
    examples=(
        Example("conv(8, kernel_size=3, padding=1)\nchannel_layer_norm()", ("B", 3, 6, 6), ("B", 8, 6, 6),
                note="The normalized width 8 is read from the convolution."),
        Example("channel_layer_norm()\nconv(16, kernel_size=2, stride=2)", ("B", 8, 8, 8), ("B", 16, 4, 4),
                note="ConvNeXt's downsampling layer: normalize the channels, then a 2 x 2 stride-2 convolution."),
        Example("conv(kernel_size=1)\nchannel_layer_norm(1e-5, elementwise_affine=False)", ("B", 2, 3, 3),
                ("B", 4, 3, 3), note="Channels 4 are inferred backward through the normalization; no parameters."),
    ),
    reference=_reference,
)
class ChannelLayerNorm(nn.LayerNorm):
    """Layer normalization over the channel axis of a `[B, C, H, W]` tensor (ConvNeXt's
    LayerNorm2d, `timm.layers.LayerNorm2d`). At every batch element and spatial position
    `(b, h, w)`, the `C` values `x[b, :, h, w]` are normalized on their own:

        mean = mean_c x[b, c, h, w];  var = mean_c (x[b, c, h, w] - mean)^2   (population variance)
        out[b, c, h, w] = (x[b, c, h, w] - mean) / sqrt(var + eps) * weight[c] + bias[c]

    This is `layer_norm` applied to the channels-last view `[B, H, W, C]`, without the author
    permuting anything: layer_norm itself normalizes the last axis of ranks 2 and 3 only and
    rejects rank 4 rather than guessing an axis. It is not group_norm(1), which normalizes
    over `[C, H, W]` together.

    `eps` defaults to `1e-6` as in ConvNeXt (layer_norm's default is `1e-5`). With
    `elementwise_affine=True` (the default) the module learns `weight` (ones) and `bias`
    (zeros) of shape `[C]`, with the state keys of timm's LayerNorm2d, so its weights load
    directly; with `False` it has no parameters. `C` is never an argument: it is the input's
    channel count. No running statistics, so train and eval mode are identical, and each
    position is independent of every other position and example. A constant position
    normalizes to `bias`, with finite gradients, because `eps > 0`. The output has the
    input's shape and is laid out channels-last in memory.

    **Torch spelling.** timm's `LayerNorm2d(64)` is `channel_layer_norm()`: the channel count is
    read from the input. An integer in the first position (`channel_layer_norm(64)`) is refused
    with E_ARGUMENT naming `channel_layer_norm()` / `channel_layer_norm(eps=...)` instead of
    being read as `eps=64.0`."""

    def __init__(self, eps: float = 1e-6, elementwise_affine: bool = True, *, C: int) -> None:
        super().__init__(C, eps=eps, elementwise_affine=elementwise_affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels_last = x.permute(0, 2, 3, 1)
        return F.layer_norm(channels_last, self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)
