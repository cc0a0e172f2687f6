"""layer_norm@1: layer normalization over the last axis."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .feature_axis import feature_axis_only


@operator(
    "layer_norm",
    torch=TorchSpelling(
        signature="nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True)",
        hint="layer_norm reads the normalized width from its input: torch's LayerNorm(64) is "
             "layer_norm() here; give eps as a float or by keyword: layer_norm(eps=1e-05).",
        width_first=True,
        names=("layernorm",),
        call="layer_norm()",
    ),
    summary="Normalize every position over its last axis to zero mean and unit variance, then scale and shift.",
    shape="x[B, ..., D] -> out[B, ..., D]",
    relation=feature_axis_only,
    shape_text="Rank 2 [B, D] or rank 3 [B, T, D]; out has the shape of x; D is read from the input.",
    args={
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True,
                   help="Added to the variance before the square root; must be positive."),
        "elementwise_affine": Arg(bool, True, positional=False,
                                  help="Whether to learn a per-feature scale (weight, ones) and shift (bias, zeros)."),
    },
    category="normalization",
    examples=(
        Example("linear(64)\nlayer_norm()\nrelu()\nlinear()", ("B", 32), ("B", 10),
                note="The normalized width 64 is read from the producer."),
        Example("layer_norm(elementwise_affine=False)", ("B", 16, 8), ("B", 16, 8),
                note="Each of the 16 positions is normalized over its 8 features; no parameters."),
    ),
    reference=lambda module: (
        lambda x: F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)
    ),
)
class LayerNorm(nn.LayerNorm):
    """Layer normalization over the last axis of a `[B, D]` or `[B, T, D]` tensor:

        mean = mean(x, -1); var = mean((x - mean)^2, -1)      (population variance)
        out  = (x - mean) / sqrt(var + eps) * weight + bias

    The normalized width `D` is never an argument: it is the input's last extent, so it is
    read from the producer (or, backward, from whatever fixes the output). With
    `elementwise_affine=True` (the default) the module learns `weight` (initialized to ones)
    and `bias` (zeros) of shape `[D]`; with `False` it has no parameters. There are no running
    statistics, so train and eval mode are identical. A constant input has zero variance and
    normalizes to `bias`, with finite gradients, because `eps > 0`. Rank 4 is rejected with
    E_CONSTRAINT rather than normalized over an implied axis.

    **Torch spelling.** torch's `nn.LayerNorm(64)` is `layer_norm()` here: the width is read,
    never written. The only positional value is `eps`, so an integer there (`layer_norm(64)`,
    a transcribed width) is refused with E_ARGUMENT naming `layer_norm()` /
    `layer_norm(eps=...)` instead of being read as `eps=64.0`; a float (`layer_norm(1e-6)`) is eps."""

    def __init__(self, eps: float = 1e-5, elementwise_affine: bool = True, *, D: int) -> None:
        super().__init__(D, eps=eps, elementwise_affine=elementwise_affine)
