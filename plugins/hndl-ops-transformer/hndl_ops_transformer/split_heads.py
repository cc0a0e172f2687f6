"""split_heads@1: [B, T, D] -> [B, H, T, D/H], the per-head layout attention computes on."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT

def _not_divisible(width: int, heads: int) -> str:
    return f"split_heads splits the width D={width} into heads={heads} heads, but {width} is not divisible by {heads}"


_REMEDY = "Choose heads that divides the feature width D (or project to a width that heads divides)."


def _relation(s) -> None:
    """D = heads * E, both directions, with E_CONSTRAINT as soon as a known D is not divisible."""
    heads = s.args["heads"]
    shape = s.shape("x")
    width = shape[2] if shape else None
    if width is not None and width % heads:
        s.error("E_CONSTRAINT", f"{_not_divisible(width, heads)}. {_REMEDY}")
    if s.shape("out") is not None and shape is not None:
        s.scale("x", 2, "out", 3, heads)


def check_split(width: int, heads: int) -> int:
    """The per-head width ``D / heads`` for a module constructed outside a resolved plan."""
    if width % heads:
        raise HNDLError("E_CONSTRAINT", _not_divisible(width, heads), field="heads", remedies=(_REMEDY,))
    return width // heads


def _reference(module):
    def forward(x):
        batch, length, width = x.shape
        return x.reshape(batch, length, module.heads, width // module.heads).permute(0, 2, 1, 3)

    return forward


@operator(
    "split_heads",
    summary="Split the feature axis of a [B, T, D] sequence into heads: [B, H, T, D/H].",
    shape="x[B, T, D] -> out[B, H, T, E]",
    relation=_relation,
    shape_text="x is [B, T, D], out is [B, H, T, E] with H = heads and D = H * E; D must be divisible by "
               "heads; D and E infer from each other in both directions.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT, dim="H",
                     help="Number of heads H; the width D must be divisible by it, and each head gets "
                          "E = D / H features."),
    },
    category="attention",
    examples=(
        Example("linear(64)\nsplit_heads(4)", ("B", 10, 32), ("B", 4, 10, 16),
                note="A query projection split into 4 heads of width 16."),
        Example("linear()\nsplit_heads(2)", ("B", 6, 8), ("B", 2, 6, 12),
                note="The projection width 24 = 2 * 12 is inferred backward from the per-head output."),
    ),
    reference=_reference,
)
class SplitHeads(nn.Module):
    """Reshapes every position's `D` features into `H` heads of `E = D / H` features and
    moves the head axis before the positions: `out[b, h, t, e] = x[b, t, h * E + e]`. This
    is transformers' `view(B, T, H, E).transpose(1, 2)` (and `torch.nn.MultiheadAttention`'s
    split), the layout `scaled_dot_product_attention` and `rotary` take; `merge_heads` is its
    inverse.

    Rank 4 is read here as `[B, H, T, E]` (batch, heads, positions, per-head width), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4.

    `heads` is required; `D` and `E` infer from each other in both directions, so a
    projection before `split_heads` can take its width from the per-head contract after it.
    A width that `heads` does not divide is E_CONSTRAINT. The result is a view of the input
    (nothing copied), with no parameters; identical in train and eval mode."""

    def __init__(self, heads: int, *, D: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = check_split(D, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, head_dim={self.head_dim}"
