"""layer_scale@1: a learned per-channel scale (ConvNeXt, CaiT), on images and on sequences."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

#: Every supported rank (§3) and the axis it scales: [B, F] and [B, T, D] the last, [B, C, H, W] the channels.
CHANNEL_AXIS = {2: 1, 3: 2, 4: 1}


def channel_axis(rank: int) -> int:
    """The axis layer_scale scales on a tensor of ``rank``."""
    return CHANNEL_AXIS[rank]


def _broadcast(gamma: torch.Tensor, rank: int) -> torch.Tensor:
    """gamma [C] viewed so it multiplies the scaled axis of a rank-``rank`` tensor."""
    return gamma.view(-1, 1, 1) if rank == 4 else gamma


@operator(
    "layer_scale",
    torch=TorchSpelling(
        signature="timm LayerScale(dim, init_values=1e-05)",
        hint="layer_scale reads the width from its input: timm's LayerScale(64) is layer_scale() "
             "here; give the starting scale as a float or by keyword: layer_scale(init_value=1e-05).",
        width_first=True,
    ),
    summary="Multiply every channel (images) or feature (sequences) by its own learned scale, initialized small.",
    shape="x[B, ...] -> out[B, ...]",
    shape_text="out has the shape of x; rank 2 and 3 scale the last axis, rank 4 the channel axis C.",
    args={
        "init_value": Arg(float, 1e-6, tensor_value=True,
                          help="The value every scale starts at (1e-6 in ConvNeXt; CaiT uses 1e-5 to 1e-6 by depth). "
                               "It must fit the compute dtype: resolution refuses more than 65504 in float16."),
    },
    category="block",
    examples=(
        Example("conv(8, kernel_size=1)\nlayer_scale()", ("B", 4, 5, 5), ("B", 8, 5, 5),
                note="On [B, C, H, W] the scale is per channel: 8 parameters."),
        Example("linear()\nlayer_scale(1e-5)", ("B", 6, 16), ("B", 6, 32),
                note="On [B, T, D] the scale is per feature D, shared by every position; D is inferred backward."),
    ),
    reference=lambda module: (lambda x: x * _broadcast(module.gamma, x.dim())),
)
class LayerScale(nn.Module):
    """LayerScale (Touvron et al. 2021, CaiT; used on every residual branch of ConvNeXt): a
    learned vector `gamma` with one entry per channel, multiplied onto its input.

        [B, C, H, W]:  out[b, c, h, w] = gamma[c] * x[b, c, h, w]     (axis 1, the channels)
        [B, T, D]:     out[b, t, d]    = gamma[d] * x[b, t, d]        (axis 2, the features)
        [B, F]:        out[b, f]       = gamma[f] * x[b, f]           (axis 1, the features)

    Which axis is scaled follows HNDL's layouts (§3): the channel axis of an image, the last
    (feature) axis of a sequence or a feature vector, exactly the axis batch_norm and
    layer_norm act on; a rank-3 input is never read as `[B, C, L]`. The multiply lives inside
    this one operator because joins never broadcast: a `[C]` parameter could not be multiplied
    onto `[B, C, H, W]` by `mul`.

    `gamma` has shape `[C]` (timm's `LayerScale` / `LayerScale2d` layout and name, so their
    state dictionaries load; torchvision's ConvNeXt stores the same values as `[C, 1, 1]`) and
    starts at `init_value` everywhere, so a residual branch starts close to zero. The channel
    count is read from the input's shape, so it is never an argument. No buffers, no
    randomness; identical in train and eval mode; out-of-place.

    **Torch spelling.** timm's `LayerScale(64)` is `layer_scale()`: the width is read from the
    input. An integer in the first position (`layer_scale(64)`) is refused with E_ARGUMENT
    naming `layer_scale(init_value=...)` instead of being read as a starting scale of 64.0."""

    def __init__(self, init_value: float = 1e-6, *, input_shapes: Mapping[str, Any]) -> None:
        super().__init__()
        shape = input_shapes["x"]
        self.init_value = init_value
        self.rank = len(shape)
        self.gamma = nn.Parameter(torch.full((shape[channel_axis(self.rank)],), float(init_value)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * _broadcast(self.gamma, self.rank)
