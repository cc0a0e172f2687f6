"""mish@1: the self-regularized activation x * tanh(softplus(x))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "mish",
    torch=TorchSpelling(signature="nn.Mish(inplace=False)"),
    summary="Mish, x * tanh(softplus(x)), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear(16)\nmish()\nlinear()", ("B", 8), ("B", 4),
                note="Mish between two layers; the head width comes from the output contract."),
        Example("mish()", ("B", 4, 6, 6), ("B", 4, 6, 6), note="Elementwise on any supported rank."),
    ),
    reference=lambda module: (lambda x: x * torch.tanh(F.softplus(x))),
)
class Mish(nn.Mish):
    """Out-of-place Mish, `x * tanh(log(1 + exp(x)))`: smooth and non-monotone like SiLU, with a
    slightly stronger negative dip. Never modifies its input. No parameters, no buffers,
    identical in train and eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)
