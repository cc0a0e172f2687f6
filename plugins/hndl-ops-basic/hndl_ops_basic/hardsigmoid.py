"""hardsigmoid@1: the piecewise-linear approximation of the sigmoid, relu6(x + 3) / 6."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Example, operator


@operator(
    "hardsigmoid",
    torch=dict(signature="nn.Hardsigmoid(inplace=False)"),
    summary="Hard sigmoid, relu6(x + 3) / 6, applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear()\nhardsigmoid()", ("B", 32), ("B", 8),
                note="Gates in [0, 1], as in squeeze-and-excitation; the width comes from the output."),
        Example("hardsigmoid()", ("B", 4, 6, 6), ("B", 4, 6, 6), note="Elementwise on any supported rank."),
    ),
    reference=lambda module: (lambda x: torch.clamp(x + 3.0, 0.0, 6.0) / 6.0),
)
class Hardsigmoid(nn.Hardsigmoid):
    """Out-of-place hard sigmoid: 0 for `x <= -3`, 1 for `x >= 3` and `x / 6 + 1 / 2` in
    between, a cheap stand-in for the sigmoid. The gradient is 1/6 strictly inside (-3, 3) and
    0 outside, exactly as torch's. The forward is written as `hardtanh(x + 3, 0, 6) / 6` rather
    than torch's fused hardsigmoid kernel, which has no second derivative: this way double
    backward (gradient penalties, gradgradcheck) works through the node like every other
    activation. Never modifies its input. No parameters, no buffers, identical in train and
    eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(x + 3.0, 0.0, 6.0) / 6.0
