"""relu6@1: the rectified linear unit capped at six."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "relu6",
    torch=TorchSpelling(signature="nn.ReLU6(inplace=False)"),
    summary="ReLU capped at six, min(max(x, 0), 6), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear(64)\nrelu6()\nlinear()", ("B", 32), ("B", 10),
                note="The bounded activation of MobileNet-style blocks; the head width comes from the output."),
        Example("relu6()", ("B", 4, 6, 6), ("B", 4, 6, 6), note="Elementwise on any supported rank."),
    ),
    reference=lambda module: (lambda x: torch.clamp(x, 0.0, 6.0)),
)
class ReLU6(nn.ReLU6):
    """Out-of-place ReLU6, `min(max(x, 0), 6)`: the bounded range keeps activations small in
    low precision. The gradient is 1 strictly inside (0, 6) and 0 outside; it never modifies
    its input, so a shared branch stays intact. No parameters, no buffers, identical in train
    and eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)
