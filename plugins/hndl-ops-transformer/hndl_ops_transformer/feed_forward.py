"""feed_forward@1: the position-wise two-layer GELU network of a transformer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator


def _gelu(x):
    """Exact (erf) GELU, written out."""
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _reference(module):
    def forward(x):
        hidden = x @ module.fc1.weight.t()
        if module.fc1.bias is not None:
            hidden = hidden + module.fc1.bias
        out = _gelu(hidden) @ module.fc2.weight.t()
        if module.fc2.bias is not None:
            out = out + module.fc2.bias
        return out

    return forward


@operator(
    "feed_forward",
    summary="Position-wise feed-forward network, linear(D, expansion * D) - GELU - linear(expansion * D, D).",
    shape="x[B, T, D] -> out[B, T, D]",
    args={
        "expansion": Arg(int, 4, min=1,
                         help="Hidden width as a multiple of D: the hidden layer has expansion * D units."),
        "bias": Arg(bool, True, positional=False, help="Whether both linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("feed_forward()", ("B", 16, 32), ("B", 16, 32),
                note="Hidden width 4 * 32 = 128; D is read from the input."),
        Example("linear(48)\nfeed_forward(2)\nlinear()", ("B", 8, 12), ("B", 8, 10),
                note="Hidden width 2 * 48 = 96 between two position-wise projections."),
    ),
    reference=_reference,
)
class FeedForward(nn.Module):
    """The multilayer perceptron applied at every position of a `[B, T, D]` sequence:
    `fc2(gelu(fc1(x)))` with `fc1 = Linear(D, H)` and `fc2 = Linear(H, D)`.

    * **Hidden width.** `H = expansion * D`, with `expansion` defaulting to 4 (the
      GPT/BERT/ViT convention). The width is thus fixed by the resolved `D` and an explicit,
      versioned argument: nothing is guessed. For a hidden width that is not a whole multiple
      of `D`, compose `linear(H)`, an activation and `linear()` as separate nodes instead.
    * **Activation.** The exact (erf) GELU, `torch.nn.functional.gelu(approximate="none")`.
    * Deterministic: no dropout and no randomness in forward. Parameters use PyTorch's
      `Linear` initialization.
    """

    def __init__(self, *, expansion: int = 4, bias: bool = True, D: int) -> None:
        super().__init__()
        self.expansion = expansion
        self.fc1 = nn.Linear(D, expansion * D, bias=bias)
        self.fc2 = nn.Linear(expansion * D, D, bias=bias)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def extra_repr(self) -> str:
        return f"expansion={self.expansion}"
