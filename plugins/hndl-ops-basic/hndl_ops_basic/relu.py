"""relu@1: the rectified linear unit."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "relu",
    torch=TorchSpelling(signature="nn.ReLU(inplace=False)"),
    summary="Rectified linear unit, max(x, 0), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(Example("linear(64)\nrelu()", ("B", 32), ("B", 64)),),
    reference=lambda module: torch.relu,
)
class ReLU(nn.ReLU):
    """Out-of-place ReLU: it never modifies its input, so a shared branch stays intact. No
    parameters, no buffers, identical in train and eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)
