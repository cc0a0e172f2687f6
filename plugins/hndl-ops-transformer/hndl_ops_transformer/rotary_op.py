"""rotary@1: apply rotary position embedding (RoPE) tables to [B, H, T, E] queries or keys."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .rotary import apply_rotary


def _relation(s) -> None:
    """Full rotary: R = E, both directions. Partial: R <= E. R is even either way."""
    table, x = s.shape("rope"), s.shape("x")
    rotated = table[3] if table else None
    width = x[3] if x else None
    if rotated is not None and rotated % 2:
        s.error("E_CONSTRAINT", f"rotary rotates dimension pairs, but the table's width R={rotated} is odd. "
                                "Produce the table with an even width.")
    if not s.args["partial"]:
        s.scale("rope", 3, "x", 3, 1)
        return
    if rotated is not None and width is not None and rotated > width:
        s.error("E_CONSTRAINT", f"rotary rotates the first R={rotated} of each head's E={width} dimensions, but "
                                f"R > E. Produce a table of at most E dimensions.")
    if width is not None:
        s.interval("rope", 3, 2, width)


def _reference(module):
    """transformers' apply_rotary_pos_emb (rotate_half), written out, with the pass-through tail of
    partial rotary (GPT-NeoX)."""

    def forward(x, rope):
        rotated = rope.shape[-1]
        cos, sin = rope[:, 0].unsqueeze(1), rope[:, 1].unsqueeze(1)
        head, tail = x[..., :rotated], x[..., rotated:]
        first, second = head[..., : rotated // 2], head[..., rotated // 2:]
        turned = torch.cat((-second, first), dim=-1)
        return torch.cat((head * cos + turned * sin, tail), dim=-1)

    return forward


@operator(
    "rotary",
    torch=TorchSpelling(signature="transformers apply_rotary_pos_emb(q, k, cos, sin)"),
    summary="Rotate the queries or keys of each head by their position: RoPE applied to [B, H, T, E] with "
            "[B, 2, T, R] cos/sin tables.",
    shape="x[B, H, T, E], rope[B, 2, T, R] -> out[B, H, T, E]",
    relation=_relation,
    shape_text="x and out are [B, H, T, E]; rope is [B, 2, T, R] (cos, sin), R even; R = E unless partial=True, "
               "then R <= E and only the first R dimensions turn.",
    args={
        "partial": Arg(bool, False, positional=False,
                       help="Rotate only the first R of the E dimensions of each head (partial rotary, as "
                            "GPT-NeoX and Phi); by default R = E and each fixes the other."),
    },
    category="attention",
    examples=(
        Example("q = split_heads(x, 2)\nrope = rotary_embedding(x)\nout = merge_heads(rotary(q, rope))",
                ("B", 6, 16), ("B", 6, 16), note="Full rotary over heads of width 8: the table's R = 8 is "
                                                 "inferred from the queries."),
        Example("q = split_heads(x, 2)\nrope = rotary_embedding(x, 4)\n"
                "out = merge_heads(rotary(q, rope, partial=True))",
                ("B", 6, 16), ("B", 6, 16), note="Partial rotary: the first 4 of 8 dimensions turn, the rest "
                                                 "pass through."),
    ),
    reference=_reference,
)
class Rotary(nn.Module):
    """Rotary position embedding (RoFormer; LLaMA, Mistral, Qwen, GPT-NeoX) applied to one
    tensor of heads, in transformers' "rotate half" convention:

        out[..., :R] = x[..., :R] * cos + rotate_half(x[..., :R]) * sin
        out[..., R:] = x[..., R:]

    with `rotate_half([x1, x2]) = [-x2, x1]` over the two halves of the first `R`
    dimensions, and `cos = rope[:, 0]`, `sin = rope[:, 1]` shared by every head. The tables
    come from `rotary_embedding` (any `[B, 2, T, R]` tensor in that layout will do). Apply it
    to queries and keys alike, after `split_heads` and before `scaled_dot_product_attention`;
    the attention score between positions `i` and `j` then depends on `i - j` only.

    Rank 4 is read here as `[B, H, T, E]` (batch, heads, positions, per-head width), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4. The table's rank 4 is `[B, 2, T, R]`.

    By default the whole head turns (`R = E`, which infers the table's width from the heads
    or the other way round); `partial=True` rotates the first `R <= E` dimensions (GPT-NeoX's
    `rotary_pct`, Phi's `partial_rotary_factor`). `R` must be even (E_CONSTRAINT). Out of
    place; differentiable in `x` and in the tables; no parameters, identical in train and
    eval mode. The arithmetic is `hndl_ops_transformer.rotary.apply_rotary`, which the fused
    `attention` shares."""

    def __init__(self, partial: bool = False, *, E: int, R: int) -> None:
        super().__init__()
        if R % 2 or R > E or (not partial and R != E):
            raise HNDLError("E_CONSTRAINT", f"rotary cannot rotate R={R} of E={E} dimensions (partial={partial})",
                            field="rope", remedies=("R must be even, equal to E, or at most E with partial=True.",))
        self.partial = partial

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        return apply_rotary(x, rope[:, 0].unsqueeze(1), rope[:, 1].unsqueeze(1))

    def extra_repr(self) -> str:
        return f"partial={self.partial}"
