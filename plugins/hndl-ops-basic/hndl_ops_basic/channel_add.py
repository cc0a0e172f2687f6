"""channel_add@1: add a per-channel [B, C] vector at every position of a [B, C, ...] tensor."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from hndl import Example, operator

from .joins import channel_spread


def _reference(module):
    def forward(x, y):
        return x + y.reshape(*y.shape, *([1] * (x.dim() - 2)))

    return forward


@operator(
    "channel_add",
    summary="Add a [B, C] vector at every position of a [B, C, ...] tensor (per-channel conditioning).",
    shape="x[B, C, ...], y[B, C] -> out[B, C, ...]",
    shape_text="x and out are [B, C], [B, C, L] or [B, C, H, W] of the same shape; y is [B, C]; C infers "
               "between x, y and out both ways.",
    category="join",
    examples=(
        Example("t = linear(z)\nchannel_add(x, t)", {"x": ("B", 8, 4, 4), "z": ("B", 16)}, ("B", 8, 4, 4),
                note="A diffusion time embedding projected to the 8 channels and added at each pixel; "
                     "the projection width comes from the feature map."),
        Example("channel_add(x, y)", {"x": ("B", 6, 10), "y": ("B", 6)}, ("B", 6, 10),
                note="Rank 3: one bias per channel of a [B, C, L] sequence."),
    ),
    reference=_reference,
)
class ChannelAdd(nn.Module):
    """Adds `y[b, c]` to every position of channel `c` of `x`:

        out[b, c, ...] = x[b, c, ...] + y[b, c]

    the declared form of the broadcast `x + y[:, :, None, None]` that diffusion models use to
    add a projected time embedding to a feature map (diffusers' `ResnetBlock2D` with the
    default `time_embedding_norm`), and that FiLM-style conditioning uses for its shift. `add`
    never broadcasts (§3); this operator states the one broadcast it performs in its shape:
    `y` is `[B, C]` and `x`, `out` are `[B, C, L]` (rank 3) or `[B, C, H, W]` (rank 4). Rank 2
    is allowed too, where `x` is `[B, C]` and the operation is the plain sum, so a
    conditioning path written for any rank keeps working on vectors. The channel count `C`
    infers both ways: from the feature map to the projection that makes `y`, or from `y` to
    `x`. A `y` whose width differs from `x`'s channels is E_CONSTRAINT. No parameters, no
    buffers, identical in train and eval mode."""

    def __init__(self, *, input_shapes: Mapping[str, Any]) -> None:
        super().__init__()
        self.spread = channel_spread(len(input_shapes["x"]))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y[self.spread]
