"""quick_gelu@1: CLIP's sigmoid approximation of GELU, x * sigmoid(1.702 * x)."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling

#: The slope CLIP's QuickGELU uses inside the sigmoid.
SLOPE = 1.702


@operator(
    "quick_gelu",
    torch=TorchSpelling(signature="transformers QuickGELUActivation()"),
    summary="CLIP's QuickGELU, x * sigmoid(1.702 * x), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear(64)\nquick_gelu()\nlinear()", ("B", 32), ("B", 10),
                note="QuickGELU between the hidden layer and the head, as in CLIP's MLP."),
        Example("quick_gelu()", ("B", 16, 8), ("B", 16, 8), note="Applied at every position of a sequence."),
    ),
    reference=lambda module: (lambda x: x * torch.sigmoid(1.702 * x)),
)
class QuickGELU(nn.Module):
    """Out-of-place `x * sigmoid(1.702 * x)`, the activation of OpenAI's CLIP towers
    (transformers' `quick_gelu`, open_clip's `QuickGELU`). It approximates GELU to within
    about 0.02 but is a different function: a checkpoint trained with it must run with it, which
    is why it is an operator of its own rather than a `gelu` approximation choice. Any rank;
    no parameters, no buffers, identical in train and eval mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(SLOPE * x)
