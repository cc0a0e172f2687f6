"""hardswish@1: the piecewise-polynomial approximation of swish, x * relu6(x + 3) / 6."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "hardswish",
    torch=TorchSpelling(signature="nn.Hardswish(inplace=False)"),
    summary="Hard swish, x * relu6(x + 3) / 6, applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear(64)\nhardswish()\nlinear()", ("B", 32), ("B", 10),
                note="The MobileNetV3 activation; the head width comes from the output contract."),
        Example("hardswish()", ("B", 4, 6, 6), ("B", 4, 6, 6), note="Elementwise on any supported rank."),
    ),
    reference=lambda module: (lambda x: x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0),
)
class Hardswish(nn.Hardswish):
    """Out-of-place hard swish (MobileNetV3): 0 for `x <= -3`, `x` for `x >= 3` and
    `x * (x + 3) / 6` in between, a cheap stand-in for SiLU. Never modifies its input. No
    parameters, no buffers, identical in train and eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)
