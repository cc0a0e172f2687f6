"""merge_heads@1: [B, H, T, E] -> [B, T, H*E], the inverse of split_heads."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator


def _relation(s) -> None:
    """D = H * E: any two of H, E and D fix the third (E_CONSTRAINT when they disagree)."""
    source, target = s.shape("x"), s.shape("out")
    if source is None or target is None:
        return
    heads, size, width = source[1], source[3], target[2]
    for factor, name in ((heads, "H"), (size, "E")):
        if factor is not None and width is not None and width % factor:
            s.error("E_CONSTRAINT",
                    f"merge_heads concatenates the heads into the width D={width}, which is not a multiple "
                    f"of {name}={factor}. Feed x with D = H * E or change the output width.")
    if heads is not None:
        s.scale("out", 2, "x", 3, heads)
    elif size is not None:
        s.scale("out", 2, "x", 1, size)


def _reference(module):
    def forward(x):
        batch, heads, length, size = x.shape
        return x.permute(0, 2, 1, 3).reshape(batch, length, heads * size)

    return forward


@operator(
    "merge_heads",
    summary="Concatenate the heads of a [B, H, T, E] tensor back into features: [B, T, H*E].",
    shape="x[B, H, T, E] -> out[B, T, D]",
    relation=_relation,
    shape_text="x is [B, H, T, E], out is [B, T, D] with D = H * E; any two of H, E and D fix the third.",
    args={},
    category="attention",
    examples=(
        Example("split_heads(4)\nmerge_heads()", ("B", 10, 32), ("B", 10, 32),
                note="merge_heads undoes split_heads exactly."),
        Example("merge_heads()\nlinear(16)", ("B", 2, 5, 8), ("B", 5, 16),
                note="Two heads of width 8 give D = 16, the input of the output projection."),
    ),
    reference=_reference,
)
class MergeHeads(nn.Module):
    """Moves the head axis back behind the positions and concatenates the heads' features:
    `out[b, t, h * E + e] = x[b, h, t, e]`, transformers' `transpose(1, 2).reshape(B, T, H * E)`
    after attention, and the inverse of `split_heads`.

    Rank 4 is read here as `[B, H, T, E]` (batch, heads, positions, per-head width), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4.

    No arguments: `D = H * E`, and any two of `H`, `E`, `D` fix the third in either direction
    (E_CONSTRAINT when a known `D` is not a multiple of a known `H` or `E`). The output is
    contiguous (one copy, as `reshape` makes after the transpose); no parameters, identical in
    train and eval mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, heads, length, size = x.shape
        return x.transpose(1, 2).reshape(batch, length, heads * size)
