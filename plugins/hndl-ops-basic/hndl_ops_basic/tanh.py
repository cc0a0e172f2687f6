"""tanh@1: the hyperbolic tangent."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "tanh",
    torch=TorchSpelling(signature="nn.Tanh()"),
    summary="Hyperbolic tangent, applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(Example("linear()\ntanh()", ("B", 16), ("B", 3)),),
    reference=lambda module: torch.tanh,
)
class Tanh(nn.Tanh):
    """Squashes every value into (-1, 1). An output contract never implies tanh: write it
    explicitly where the architecture needs it. No parameters, no buffers."""
