"""feed_forward@1 (alias feed_forward_v1): the GELU feed-forward network as version 1 declared it.

Kept so that plans saved before ``feed_forward`` gained ``activation`` (version 2) still
restore, rebuild and load their state dicts. New specifications use ``feed_forward``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .feed_forward import FeedForward


@operator(
    "feed_forward_v1",
    identity="feed_forward",
    version=1,
    summary="Version 1 of feed_forward (exact GELU only), kept so saved feed_forward@1 plans restore.",
    shape="x[B, T, D] -> out[B, T, D]",
    args={
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT,
                         help="Hidden width as a multiple of D: the hidden layer has expansion * D units."),
        "bias": Arg(bool, True, positional=False, help="Whether both linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("feed_forward_v1()", ("B", 16, 32), ("B", 16, 32),
                note="The same network as feed_forward() with its default activation."),
        Example("linear(48)\nfeed_forward_v1(2)\nlinear()", ("B", 8, 12), ("B", 8, 10),
                note="Hidden width 2 * 48 = 96 between two position-wise projections."),
    ),
    reference=spec_of(FeedForward).reference,
)
class FeedForwardV1(FeedForward):
    """`feed_forward@1`, frozen: `fc2(gelu(fc1(x)))` with `fc1 = Linear(D, expansion * D)`,
    `fc2 = Linear(expansion * D, D)` and the exact (erf) GELU.

    This is the declaration `feed_forward` had before version 2 added the `activation`
    argument. Its arguments, plan records and parameters are exactly version 1's, so a plan
    saved with `feed_forward@1` restores byte for byte, builds this module and loads the
    state dict it was saved with. It computes what `feed_forward(activation="gelu")` computes
    with the same parameters. Write `feed_forward` in new specifications; this alias exists
    for saved plans (which record the identity `feed_forward@1`, not the alias).
    """

    def __init__(self, *, expansion: int = 4, bias: bool = True, D: int) -> None:
        super().__init__(expansion=expansion, activation="gelu", bias=bias, D=D)
