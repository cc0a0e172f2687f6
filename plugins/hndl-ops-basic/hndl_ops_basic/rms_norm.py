"""rms_norm@1: root-mean-square normalization over the last axis, with a learned scale."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .feature_axis import feature_axis_only


def _reference(module):
    def forward(x):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + module.eps) * module.weight

    return forward


@operator(
    "rms_norm",
    torch=TorchSpelling(
        signature="nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)",
        hint="rms_norm reads the normalized width from its input: torch's RMSNorm(64) is rms_norm() "
             "here; give eps as a float or by keyword: rms_norm(eps=1e-06).",
        width_first=True,
        names=("rmsnorm",),
        call="rms_norm()",
    ),
    summary="Divide every position by the root mean square of its last axis, then apply a learned scale.",
    shape="x[B, ..., D] -> out[B, ..., D]",
    relation=feature_axis_only,
    shape_text="Rank 2 [B, D] or rank 3 [B, T, D]; out has the shape of x; D is read from the input.",
    args={
        "eps": Arg(float, 1e-6, min=0, exclusive_min=True,
                   help="Added to the mean square before the square root; must be positive."),
    },
    category="normalization",
    examples=(
        Example("linear(64)\nrms_norm()\nlinear()", ("B", 32), ("B", 10),
                note="The normalized width 64 is read from the producer."),
        Example("rms_norm(1e-5)", ("B", 16, 8), ("B", 16, 8),
                note="Each of the 16 positions is scaled by its own root mean square."),
    ),
    reference=_reference,
)
class RMSNorm(nn.RMSNorm):
    """RMS normalization over the last axis of a `[B, D]` or `[B, T, D]` tensor:

        out = x / sqrt(mean(x^2, -1) + eps) * weight

    Unlike layer_norm it neither subtracts the mean nor adds a bias. The normalized width `D`
    is never an argument: it is the input's last extent, read from the producer (or,
    backward, from whatever fixes the output). The learned `weight` of shape `[D]` is
    initialized to ones. `eps` is explicit in the plan (default 1e-6, positive): it is never
    taken from the compute dtype, so float16 and float32 plans compute the same formula. A
    constant or all-zero input stays finite forward and backward because `eps > 0`. No
    running statistics; train and eval mode are identical. Rank 4 is rejected with
    E_CONSTRAINT.

    **Torch spelling.** torch's `nn.RMSNorm(64)` is `rms_norm()` here. An integer in the
    first position (`rms_norm(64)`, a transcribed width) is refused with E_ARGUMENT naming
    `rms_norm()` / `rms_norm(eps=...)` instead of being read as `eps=64.0`."""

    def __init__(self, eps: float = 1e-6, *, D: int) -> None:
        super().__init__(D, eps=eps, elementwise_affine=True)
