"""channel_scale_shift@1: x * (1 + scale) + shift per channel, scale and shift from one [B, 2*C] tensor."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from hndl import Example, operator

from .joins import channel_spread


def _reference(module):
    def forward(x, params):
        scale, shift = params.chunk(2, dim=1)
        trailing = [1] * (x.dim() - 2)
        return x * (1 + scale.reshape(*scale.shape, *trailing)) + shift.reshape(*shift.shape, *trailing)

    return forward


@operator(
    "channel_scale_shift",
    summary="Scale and shift every channel of a [B, C, ...] tensor: x * (1 + scale) + shift, "
            "with [scale, shift] from a [B, 2*C] tensor.",
    shape="x[B, C, ...], params[B, 2*C] -> out[B, C, ...]",
    shape_text="x and out are [B, C], [B, C, L] or [B, C, H, W] of the same shape; params is [B, 2*C] (an odd "
               "width is E_CONSTRAINT); C infers between x, params and out both ways.",
    category="join",
    examples=(
        Example("p = linear(z)\nchannel_scale_shift(x, p)", {"x": ("B", 8, 4, 4), "z": ("B", 16)}, ("B", 8, 4, 4),
                note="diffusers' scale_shift time embedding: the projection width 2 * 8 = 16 is inferred."),
        Example("channel_scale_shift(x, params)", {"x": ("B", 6), "params": ("B", 12)}, ("B", 6),
                note="Rank 2: a FiLM layer on feature vectors."),
    ),
    reference=_reference,
)
class ChannelScaleShift(nn.Module):
    """Modulates each channel of `x` by a per-example scale and shift (FiLM, AdaGN):

        scale, shift = params.chunk(2, dim=1)        # each [B, C]
        out[b, c, ...] = x[b, c, ...] * (1 + scale[b, c]) + shift[b, c]

    This is diffusers' `ResnetBlock2D` with `time_embedding_norm="scale_shift"`, applied after
    the group norm, and the modulation of FiLM and adaptive group norm. The scale is a
    residual around 1, so a zero `params` leaves `x` unchanged. `x` and `out` are `[B, C]`,
    `[B, C, L]` or `[B, C, H, W]`; `params` is `[B, 2*C]`, the scale first and the shift
    second, as one linear projection produces them. `C` infers both ways (from the feature
    map to the projection width `2*C`, or from `params` to the channels); an odd `params`
    width, or one that is not twice the channels, is E_CONSTRAINT. `mul` and `add` never
    broadcast (§3); this is the declared form of the broadcast the reference performs. No
    parameters, no buffers, identical in train and eval mode."""

    def __init__(self, *, input_shapes: Mapping[str, Any]) -> None:
        super().__init__()
        self.spread = channel_spread(len(input_shapes["x"]))

    def forward(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        scale, shift = params.chunk(2, dim=1)
        return torch.addcmul(shift[self.spread], x, 1 + scale[self.spread])
