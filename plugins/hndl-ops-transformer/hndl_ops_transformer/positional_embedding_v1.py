"""positional_embedding@1 (alias positional_embedding_v1): the [T, D] table as version 1 declared it.

Kept so that plans saved before ``positional_embedding`` gained ``max_length`` (version 2)
still restore, rebuild and load their state dicts. New specifications use
``positional_embedding``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.declaration import spec_of

from .positional_embedding import PositionalEmbedding


@operator(
    "positional_embedding_v1",
    identity="positional_embedding",
    version=1,
    summary="Version 1 of positional_embedding (a [T, D] table only), kept so saved plans of it restore.",
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
        Example("positional_embedding_v1()", ("B", 16, 32), ("B", 16, 32),
                note="A [16, 32] table; T and D are both read from the input."),
    ),
    reference=spec_of(PositionalEmbedding).reference,
)
class PositionalEmbeddingV1(PositionalEmbedding):
    """`positional_embedding@1`, frozen: `out[b, t] = x[b, t] + weight[t]` for a learned
    `weight` of shape `[T, D]`, initialized from `N(0, 0.02^2)`.

    This is the declaration `positional_embedding` had before version 2 added `max_length`.
    Its arguments, plan records and parameter are exactly version 1's, so a plan saved with
    `positional_embedding@1` restores byte for byte, builds this module and loads the state
    dict it was saved with. It computes what `positional_embedding()` without `max_length`
    computes. Write `positional_embedding` in new specifications; this alias exists for saved
    plans (which record the identity `positional_embedding@1`, not the alias).
    """

    def __init__(self, *, length: int, embedding_dim: int) -> None:
        super().__init__(length=length, embedding_dim=embedding_dim)
