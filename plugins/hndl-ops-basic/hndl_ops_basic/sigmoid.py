"""sigmoid@1: the logistic function."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "sigmoid",
    torch=TorchSpelling(signature="nn.Sigmoid()"),
    summary="Logistic sigmoid, 1 / (1 + exp(-x)), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear()\nsigmoid()", ("B", 16), ("B", 1),
                note="A probability head; an output contract never implies the sigmoid."),
    ),
    reference=lambda module: torch.sigmoid,
)
class Sigmoid(nn.Sigmoid):
    """Squashes every value into (0, 1). Out-of-place: the input is never modified. An output
    contract never implies a sigmoid; write it explicitly where the architecture needs it. No
    parameters, no buffers, identical in train and eval mode."""
