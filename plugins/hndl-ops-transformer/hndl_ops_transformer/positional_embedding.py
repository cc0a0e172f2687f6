"""positional_embedding@2: a learned embedding of each sequence position, added to x."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT


def _too_long(length: int, max_length: int) -> str:
    return (f"positional_embedding holds max_length={max_length} positions, but the sequence has "
            f"T={length} positions")


_REMEDY = "Give max_length >= T (or omit it for a table of exactly T rows), or feed a shorter sequence."


def _relation(s) -> None:
    """A table of max_length rows serves any T <= max_length (E_CONSTRAINT beyond)."""
    max_length = s.args.get("max_length")
    if max_length is None:
        return
    for port in ("x", "out"):
        shape = s.shape(port)
        length = shape[1] if shape else None
        if length is not None and length > max_length:
            s.error("E_CONSTRAINT", f"{_too_long(length, max_length)}. {_REMEDY}")


def check_max_length(length: int, max_length: Optional[int]) -> int:
    """The number of table rows, for a module constructed directly outside a resolved plan."""
    if max_length is None:
        return length
    if length > max_length:
        raise HNDLError("E_CONSTRAINT", _too_long(length, max_length), field="max_length", remedies=(_REMEDY,))
    return max_length


def _reference(module):
    return lambda x: x + module.weight[: x.shape[1]].unsqueeze(0)


@operator(
    "positional_embedding",
    version=2,
    summary="Add a learned embedding of each position to a [B, T, D] sequence, from a table of T or max_length rows.",
    shape="x[B, T, D] -> out[B, T, D]",
    relation=_relation,
    shape_text="x and out are [B, T, D]; with max_length, T <= max_length.",
    args={
        "length": Arg(int, min=1, inferable=True, dim="T", positional=False,
                      help="Number of positions T; normally inferred from the input. The sequence length "
                           "is fixed by the contract: every call must carry exactly T positions."),
        "embedding_dim": Arg(int, min=1, inferable=True, dim="D", positional=False,
                             help="Width D of each position's embedding; normally inferred from the input."),
        "max_length": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                          help="Rows of the table (transformers' max_position_embeddings, timm's pos_embed "
                               "length); the first T rows are added. Omitted, the table has exactly T rows."),
    },
    category="embedding",
    examples=(
        Example("positional_embedding()", ("B", 16, 32), ("B", 16, 32),
                note="A [16, 32] table; T and D are both read from the input."),
        Example("linear(24)\npositional_embedding()\nlinear()", ("B", 10, 6), ("B", 10, 4),
                note="D = 24 comes from the projection before it."),
        Example("positional_embedding(max_length=64)", ("B", 10, 16), ("B", 10, 16),
                note="A [64, 16] table, as a GPT-2 checkpoint holds it; rows 0..9 are added."),
    ),
    reference=_reference,
)
class PositionalEmbedding(nn.Module):
    """Learned absolute position embedding (GPT-2, BERT, ViT): `out[b, t] = x[b, t] +
    weight[t]` for a parameter `weight` of shape `[R, D]`.

    * **Rows.** Without `max_length` the table holds exactly one row per position, `R = T`.
      With `max_length` it holds `R = max_length` rows and the first `T` are added, which is
      how checkpoints store their tables (transformers' `max_position_embeddings`, e.g. GPT-2's
      `wpe.weight` `[1024, D]`; timm's `pos_embed` `[1, N, D]` squeezed): such a table loads
      as is, whatever `T` the plan serves. `T > max_length` is `E_CONSTRAINT`.
    * **Fixed length.** `T` is the sequence length of the contract, in either case: a plan
      resolved for `T = 64` runs on 64 positions only (shorter sequences are a different
      contract; resolve a separate plan for them, which can load the same table).
    * Both `T` (`length`) and `D` (`embedding_dim`) are normally inferred from the input;
      giving them asserts them. The table is initialized from `N(0, 0.02^2)`, the GPT-2
      convention (override it per node with `init=`, e.g. `truncated_normal(std=0.02)` as
      timm does). Deterministic; out-of-place, so a shared input branch is never modified.
    * **Versions.** Version 2 added `max_length`; omitted, it computes exactly what
      `positional_embedding@1` computed, with the same `[T, D]` table. Plans saved with
      `positional_embedding@1` still restore (through `positional_embedding_v1`).
    """

    def __init__(self, *, length: int, embedding_dim: int, max_length: Optional[int] = None) -> None:
        super().__init__()
        self.length = length
        self.weight = nn.Parameter(torch.empty(check_max_length(length, max_length), embedding_dim))
        nn.init.normal_(self.weight, std=0.02)
        # Decided here, not from weight.shape in forward: a torch.jit.trace compares no traced sizes.
        self.sliced = self.weight.shape[0] != length

    def forward(self, x):
        table = self.weight
        if self.sliced:
            table = table[: self.length]
        return x + table

    def extra_repr(self) -> str:
        rows = self.weight.shape[0]
        extra = "" if rows == self.length else f", max_length={rows}"
        return f"length={self.length}, embedding_dim={self.weight.shape[1]}{extra}"
