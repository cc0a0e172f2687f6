"""feed_forward@2: the position-wise two-layer network of a transformer, with its activation chosen."""

from __future__ import annotations

import math
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT

#: The activation names the feed-forward network accepts, each with the torch function it runs.
#: "gelu" is the exact (erf) GELU of BERT and ViT; "gelu_tanh" is the tanh approximation GPT-2
#: calls gelu_new (transformers' "gelu_new" / "gelu_pytorch_tanh"); "silu" is x * sigmoid(x).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": partial(F.gelu, approximate="none"),
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}

ACTIVATION_HELP = ("The hidden activation: 'gelu' (exact erf GELU, BERT/ViT), 'gelu_tanh' (the tanh "
                   "approximation GPT-2 calls gelu_new), 'relu' or 'silu' (x * sigmoid(x)).")


def check_activation(activation: str) -> str:
    """The activation name itself, for a module constructed directly outside a resolved plan."""
    if activation not in ACTIVATIONS:
        raise HNDLError(
            "E_ARGUMENT",
            f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, not {activation!r}",
            field="activation",
            remedies=(f"Give activation= one of {', '.join(ACTIVATIONS)}.",),
        )
    return activation


def written_out_activation(name: str, x: torch.Tensor) -> torch.Tensor:
    """Each activation from its formula, with plain tensor arithmetic (for the references)."""
    if name == "gelu":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return torch.where(x > 0, x, torch.zeros_like(x))
    return x / (1 + torch.exp(-x))  # silu


def _reference(module):
    def forward(x):
        hidden = x @ module.fc1.weight.t()
        if module.fc1.bias is not None:
            hidden = hidden + module.fc1.bias
        out = written_out_activation(module.activation, hidden) @ module.fc2.weight.t()
        if module.fc2.bias is not None:
            out = out + module.fc2.bias
        return out

    return forward


@operator(
    "feed_forward",
    version=2,
    summary="Position-wise feed-forward network, linear(D, expansion * D) - activation - linear(expansion * D, D).",
    shape="x[B, T, D] -> out[B, T, D]",
    args={
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT,
                         help="Hidden width as a multiple of D: the hidden layer has expansion * D units."),
        "activation": Arg(str, "gelu", choices=tuple(ACTIVATIONS), positional=False, help=ACTIVATION_HELP),
        "bias": Arg(bool, True, positional=False, help="Whether both linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("feed_forward()", ("B", 16, 32), ("B", 16, 32),
                note="Hidden width 4 * 32 = 128 with the exact GELU; D is read from the input."),
        Example("linear(48)\nfeed_forward(2)\nlinear()", ("B", 8, 12), ("B", 8, 10),
                note="Hidden width 2 * 48 = 96 between two position-wise projections."),
        Example("feed_forward(activation='gelu_tanh')", ("B", 10, 16), ("B", 10, 16),
                note="GPT-2's MLP (activation_function='gelu_new')."),
        Example("feed_forward(2, activation='silu', bias=False)", ("B", 6, 8), ("B", 6, 8),
                note="A bias-free SiLU network with hidden width 16."),
    ),
    reference=_reference,
)
class FeedForward(nn.Module):
    """The multilayer perceptron applied at every position of a `[B, T, D]` sequence:
    `fc2(activation(fc1(x)))` with `fc1 = Linear(D, H)` and `fc2 = Linear(H, D)`.

    * **Hidden width.** `H = expansion * D`, with `expansion` defaulting to 4 (the
      GPT/BERT/ViT convention). The width is thus fixed by the resolved `D` and an explicit,
      versioned argument: nothing is guessed. For a hidden width that is not a whole multiple
      of `D`, compose `linear(H)`, an activation and `linear()` as separate nodes instead.
    * **Activation.** `activation="gelu"` (the default) is the exact (erf) GELU,
      `torch.nn.functional.gelu(approximate="none")`, of BERT and ViT; `"gelu_tanh"` is its
      tanh approximation (`approximate="tanh"`), which GPT-2 uses under the name `gelu_new`;
      `"relu"` and `"silu"` (`x * sigmoid(x)`) are the other common choices. The activation
      is part of the operator's meaning and is recorded in the plan.
    * **Versions.** Version 2 added `activation`; with its default it computes exactly what
      `feed_forward@1` computed, with the same parameters. Plans saved with `feed_forward@1`
      still restore (through `feed_forward_v1`).
    * Deterministic: no dropout and no randomness in forward. Parameters use PyTorch's
      `Linear` initialization, and the submodule names (`fc1`, `fc2`) match timm's `Mlp`.
    """

    def __init__(self, *, expansion: int = 4, activation: str = "gelu", bias: bool = True, D: int) -> None:
        super().__init__()
        self.expansion = expansion
        self.activation = check_activation(activation)
        self.fc1 = nn.Linear(D, expansion * D, bias=bias)
        self.fc2 = nn.Linear(expansion * D, D, bias=bias)

    def forward(self, x):
        return self.fc2(ACTIVATIONS[self.activation](self.fc1(x)))

    def extra_repr(self) -> str:
        return f"expansion={self.expansion}, activation={self.activation!r}"
