"""feed_forward@3: the position-wise network of a transformer: two layers, or gated (SwiGLU, GeGLU)."""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

#: The activation names the feed-forward network accepts, each with the torch function it runs.
#: "gelu" is the exact (erf) GELU of BERT and ViT; "gelu_tanh" is the tanh approximation GPT-2
#: calls gelu_new (transformers' "gelu_new" / "gelu_pytorch_tanh"); "silu" is x * sigmoid(x);
#: "quick_gelu" is x * sigmoid(1.702 x), the approximation of OpenAI's CLIP.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": partial(F.gelu, approximate="none"),
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}

#: The activations of feed_forward@2 and transformer_block@2 (frozen with those versions).
ACTIVATIONS_V2: tuple[str, ...] = ("gelu", "gelu_tanh", "relu", "silu")

ACTIVATION_HELP = ("The hidden activation: 'gelu' (exact erf GELU, BERT/ViT), 'gelu_tanh' (the tanh "
                   "approximation GPT-2 calls gelu_new; a call may also write torch's approximate='tanh', "
                   "which binds 'gelu_tanh'), 'relu', 'silu' (x * sigmoid(x)) or 'quick_gelu' "
                   "(x * sigmoid(1.702 x), CLIP).")

ACTIVATION_HELP_V2 = ("The hidden activation: 'gelu' (exact erf GELU, BERT/ViT), 'gelu_tanh' (the tanh "
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
    if name == "quick_gelu":
        return x / (1 + torch.exp(-1.702 * x))
    return x / (1 + torch.exp(-x))  # silu


def hidden_width(D: int, expansion: int, hidden: Optional[int]) -> int:
    """The hidden width: ``hidden`` when given, else ``expansion * D``. A ``hidden`` next to an
    ``expansion`` other than its default 4 is E_ARGUMENT (two answers to one question)."""
    if hidden is not None and expansion != 4:
        raise HNDLError("E_ARGUMENT", f"both expansion={expansion} and hidden={hidden} give the hidden width",
                        field="hidden", remedies=("Give hidden= for an explicit width or expansion= for a multiple "
                                                  "of D, not both.",))
    return hidden if hidden is not None else expansion * D


def _validate(args) -> None:
    hidden_width(1, args.get("expansion"), args.get("hidden"))


def _reference(module):
    def linear(x, layer):
        out = x @ layer.weight.t()
        return out if layer.bias is None else out + layer.bias

    def forward(x):
        if module.gated:
            hidden = written_out_activation(module.activation, linear(x, module.gate_proj)) * linear(x, module.up_proj)
            return linear(hidden, module.down_proj)
        return linear(written_out_activation(module.activation, linear(x, module.fc1)), module.fc2)

    return forward


@operator(
    "feed_forward",
    torch=TorchSpelling(
        signature="timm Mlp(in_features, hidden_features=None, out_features=None, act_layer=nn.GELU)",
        names={
            "mlp": "feed_forward()",
            "swiglu": 'feed_forward(gated=True, activation="silu")',
        },
        keywords={
            "approximate": "feed_forward spells torch's gelu(approximate='tanh') as activation='gelu_tanh': write "
                "feed_forward(..., activation='gelu_tanh').",
        },
    ),
    version=3,
    summary="Position-wise feed-forward network: linear - activation - linear, or gated "
            "(down(activation(gate(x)) * up(x)), SwiGLU/GeGLU).",
    shape="x[B, T, D] -> out[B, T, D]",
    validate=_validate,
    args={
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT,
                         help="Hidden width as a multiple of D: the hidden layer has expansion * D units, unless "
                              "hidden is given (then leave expansion at its default)."),
        "hidden": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                      help="Explicit hidden width (LLaMA's intermediate_size, T5's d_ff), instead of expansion."),
        "gated": Arg(bool, False, positional=False,
                     help="Gated network down_proj(activation(gate_proj(x)) * up_proj(x)): SwiGLU with 'silu' "
                          "(LLaMA), GeGLU with 'gelu'/'gelu_tanh' (T5 v1.1 gated-gelu)."),
        "activation": Arg(str, "gelu", choices=tuple(ACTIVATIONS), positional=False, help=ACTIVATION_HELP),
        "bias": Arg(bool, True, positional=False, help="Whether the linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("feed_forward()", ("B", 16, 32), ("B", 16, 32),
                note="Hidden width 4 * 32 = 128 with the exact GELU; D is read from the input."),
        Example("linear(48)\nfeed_forward(2)\nlinear()", ("B", 8, 12), ("B", 8, 10),
                note="Hidden width 2 * 48 = 96 between two position-wise projections."),
        Example("feed_forward(activation='gelu_tanh')", ("B", 10, 16), ("B", 10, 16),
                note="GPT-2's MLP (activation_function='gelu_new')."),
        Example("feed_forward(hidden=172, gated=True, activation='silu', bias=False)", ("B", 6, 64), ("B", 6, 64),
                note="LLaMA's MLP (SwiGLU, intermediate_size=172): gate_proj, up_proj, down_proj."),
        Example("feed_forward(activation='quick_gelu')", ("B", 7, 16), ("B", 7, 16),
                note="CLIP's MLP (hidden_act='quick_gelu')."),
    ),
    reference=_reference,
)
class FeedForward(nn.Module):
    """The network applied at every position of a `[B, T, D]` sequence, with hidden width
    `H`: plain, `fc2(activation(fc1(x)))` with `fc1 = Linear(D, H)` and `fc2 = Linear(H, D)`;
    or, with `gated=True`, `down_proj(activation(gate_proj(x)) * up_proj(x))` with
    `gate_proj`, `up_proj` `Linear(D, H)` and `down_proj` `Linear(H, D)`.

    * **Hidden width.** `H = hidden` when given (LLaMA's `intermediate_size`, T5's `d_ff`),
      else `expansion * D` with `expansion` defaulting to 4 (the GPT/BERT/ViT convention);
      a `hidden` next to an `expansion` other than 4 is E_ARGUMENT (an explicit
      `expansion=4` beside `hidden` cannot be told from the default and is overridden).
      The width is fixed by the resolved `D` and explicit, versioned arguments: nothing is
      guessed.
    * **Activation.** `activation="gelu"` (the default) is the exact (erf) GELU,
      `torch.nn.functional.gelu(approximate="none")`, of BERT and ViT; `"gelu_tanh"` is its
      tanh approximation (`approximate="tanh"`), which GPT-2 uses under the name `gelu_new`.
      The tanh GELU has one spelling in a plan, `activation="gelu_tanh"`, and torch's spelling
      is accepted everywhere: a call may write `feed_forward(approximate="tanh")` (or
      `activation="gelu", approximate="tanh"`), which binds `activation="gelu_tanh"`, as the
      `gelu` operator itself is `gelu(approximate="tanh")`;
      `"relu"` and `"silu"` (`x * sigmoid(x)`) are the other common choices, and
      `"quick_gelu"` (`x * sigmoid(1.702 x)`) is OpenAI CLIP's. The activation is part of
      the operator's meaning and is recorded in the plan.
    * **Gated.** `gated=True` is the gated linear unit family of Shazeer (2020): SwiGLU with
      `"silu"` (LLaMA, Mistral: `LlamaMLP`'s `gate_proj`, `up_proj`, `down_proj` map one to
      one), GeGLU with `"gelu_tanh"` (T5 v1.1 `gated-gelu`: `wi_0`, `wi_1`, `wo`). The
      activation applies to the gate branch only.
    * **Versions.** Version 3 added `hidden`, `gated` and `"quick_gelu"`; with their defaults it computes
      exactly what `feed_forward@2` computed, with the same parameters. Version 2 added
      `activation`. Plans saved with `feed_forward@1` or `@2` still restore (through
      `feed_forward_v1` and `feed_forward_v2`).
    * Deterministic: no dropout and no randomness in forward. Parameters use PyTorch's
      `Linear` initialization, and the plain network's submodule names (`fc1`, `fc2`) match
      timm's `Mlp`.
    """

    def __init__(self, *, expansion: int = 4, hidden: Optional[int] = None, gated: bool = False,
                 activation: str = "gelu", bias: bool = True, D: int) -> None:
        super().__init__()
        width = hidden_width(D, expansion, hidden)
        self.expansion = expansion
        self.hidden = width
        self.gated = gated
        self.activation = check_activation(activation)
        if gated:
            self.gate_proj = nn.Linear(D, width, bias=bias)
            self.up_proj = nn.Linear(D, width, bias=bias)
            self.down_proj = nn.Linear(width, D, bias=bias)
        else:
            self.fc1 = nn.Linear(D, width, bias=bias)
            self.fc2 = nn.Linear(width, D, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = ACTIVATIONS[self.activation]
        if self.gated:
            return self.down_proj(act(self.gate_proj(x)) * self.up_proj(x))
        return self.fc2(act(self.fc1(x)))

    def extra_repr(self) -> str:
        return f"hidden={self.hidden}, gated={self.gated}, activation={self.activation!r}"
