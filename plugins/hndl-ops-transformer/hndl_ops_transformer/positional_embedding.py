"""positional_embedding@1: a learned embedding of each sequence position, added to x."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator


@operator(
    "positional_embedding",
    summary="Add a learned [T, D] embedding of each position to a [B, T, D] sequence.",
    shape="x[B, T, D] -> out[B, T, D]",
    args={
        "length": Arg(int, min=1, inferable=True, dim="T", positional=False,
                      help="Number of positions T; normally inferred from the input. The sequence length "
                           "is fixed by the contract: every call must carry exactly T positions."),
        "embedding_dim": Arg(int, min=1, inferable=True, dim="D", positional=False,
                             help="Width D of each position's embedding; normally inferred from the input."),
    },
    category="embedding",
    examples=(
        Example("positional_embedding()", ("B", 16, 32), ("B", 16, 32),
                note="A [16, 32] table; T and D are both read from the input."),
        Example("linear(24)\npositional_embedding()\nlinear()", ("B", 10, 6), ("B", 10, 4),
                note="D = 24 comes from the projection before it."),
    ),
    reference=lambda module: (lambda x: x + module.weight.unsqueeze(0)),
)
class PositionalEmbedding(nn.Module):
    """Learned absolute position embedding (GPT-2, BERT, ViT): `out[b, t] = x[b, t] +
    weight[t]` for a parameter `weight` of shape `[T, D]`.

    `T` is the sequence length of the contract, not a maximum: the table holds exactly one
    row per position, so a plan resolved for `T = 64` runs on 64 positions only (shorter
    sequences are a different contract; resolve a separate plan for them). Both `T`
    (`length`) and `D` (`embedding_dim`) are normally inferred from the input; giving them
    asserts them. The table is initialized from `N(0, 0.02^2)`, the GPT-2 convention.
    Deterministic; out-of-place, so a shared input branch is never modified.
    """

    def __init__(self, *, length: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(length, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return x + self.weight

    def extra_repr(self) -> str:
        return f"length={self.weight.shape[0]}, embedding_dim={self.weight.shape[1]}"
