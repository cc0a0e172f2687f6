"""learned_tokens@1: k learned tokens (a class token, register tokens) joined to a [B, T, D] sequence."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT

PLACEMENTS = ("prepend", "append")


def _relation(s) -> None:
    """T_out = T + count, solved for whichever side is unknown."""
    count = s.args["count"]
    x, out = s.shape("x"), s.shape("out")
    if x is None or out is None:
        return
    length, total = x[1], out[1]
    if length is not None and total is not None:
        if total != length + count:
            s.error(
                "E_CONSTRAINT",
                f"learned_tokens adds count={count} tokens to T={length} positions, which gives "
                f"{length + count} positions, but the output has {total}",
            )
    elif length is not None:
        s.axis("out", 1, length + count)
    elif total is not None:
        if total <= count:
            s.error(
                "E_CONSTRAINT",
                f"learned_tokens adds count={count} tokens, so its output needs more than {count} "
                f"positions, but it has {total}: no input sequence is left",
            )
        s.axis("x", 1, total - count)


def _reference(module):
    """The tokens repeated per example (a copy, unlike the module's expand) and concatenated."""

    def forward(x):
        tokens = module.tokens.repeat(x.shape[0], 1, 1)
        pieces = [tokens, x] if module.placement == "prepend" else [x, tokens]
        return torch.cat(pieces, dim=1)

    return forward


@operator(
    "learned_tokens",
    summary="Join count learned tokens (a ViT class token, register tokens) to the start or end of a "
            "[B, T, D] sequence.",
    shape="x[B, T, D] -> out[B, T_out, D]",
    relation=_relation,
    shape_text="T_out = T + count, solved in either direction; D passes through.",
    args={
        "count": Arg(int, 1, min=1, max=MAX_EXTENT,
                     help="Number k of learned tokens: 1 for a class token, 1 + R for a class token and R "
                          "registers."),
        "placement": Arg(str, "prepend", choices=PLACEMENTS, positional=False,
                         help="'prepend' puts the tokens before the sequence (ViT's class token, timm's "
                              "registers); 'append' puts them after it."),
    },
    category="embedding",
    examples=(
        Example("learned_tokens()", ("B", 16, 32), ("B", 17, 32),
                note="ViT's class token: one learned [1, 1, 32] token before 16 patch tokens."),
        Example("learned_tokens(4, placement='append')", ("B", 16, 32), ("B", 20, 32),
                note="Four tokens after the sequence."),
        Example("reshape()\nlearned_tokens(5)\npositional_embedding()", ("B", 48), ("B", 11, 8),
                note="A class token and four registers before the 48 / 8 = 6 tokens; T = 11 - 5 comes only "
                     "from the output contract."),
    ),
    reference=_reference,
)
class LearnedTokens(nn.Module):
    """Concatenates `count` learned tokens to every sequence of a `[B, T, D]` batch along the
    position axis, giving `[B, T + count, D]`: the class token of ViT (`count=1`) and the
    register tokens of "Vision Transformers Need Registers" (`count=1 + R`, class token first,
    as timm orders them).

    * **Parameter.** `tokens` of shape `[1, count, D]`, the layout of timm's `cls_token`
      (`[1, 1, D]`) and `reg_token` (`[1, R, D]`); `torch.cat((cls_token, reg_token), 1)`
      loads as `tokens`. It is initialized from `N(0, (1e-6)^2)`, as timm's
      `VisionTransformer.init_weights` initializes both; override it per node with `init=`,
      e.g. `init={"tokens": truncated_normal(std=0.02)}`.
    * **Batch.** The tokens are the same for every example: `tokens.expand(B, -1, -1)` is a
      view, so the parameter is never copied per example before the concatenation, and the
      gradient of `tokens` is the sum over the batch. Any batch size works, 1 included.
    * **Placement.** `placement="prepend"` (default) puts the tokens at positions
      `0..count-1`, as ViT does; `"append"` puts them at `T..T+count-1`.
    * **Shapes.** `T_out = T + count` is solved in either direction: a known input length
      fixes the output's, and a known output length fixes the input's (an output of at most
      `count` positions is `E_CONSTRAINT`). `D` passes through both ways.
    * Deterministic; out-of-place, so a shared input branch is never modified.
    """

    def __init__(self, *, count: int = 1, placement: str = "prepend", D: int) -> None:
        super().__init__()
        if placement not in PLACEMENTS:
            raise HNDLError("E_ARGUMENT", f"placement must be 'prepend' or 'append', not {placement!r}",
                            field="placement", remedies=("Give placement='prepend' or placement='append'.",))
        self.placement = placement
        self.tokens = nn.Parameter(torch.empty(1, count, D))
        nn.init.normal_(self.tokens, std=1e-6)

    def forward(self, x):
        tokens = self.tokens.expand(x.shape[0], -1, -1)
        return torch.cat((tokens, x) if self.placement == "prepend" else (x, tokens), dim=1)

    def extra_repr(self) -> str:
        return f"count={self.tokens.shape[1]}, placement={self.placement!r}"
