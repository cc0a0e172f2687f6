"""feed_forward@2 (alias feed_forward_v2): the feed-forward network as version 2 declared it.

Kept so that plans saved before ``feed_forward`` gained ``hidden``, ``gated`` and the
``quick_gelu`` activation (version 3) still restore, rebuild and load their state dicts.
New specifications use ``feed_forward``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .feed_forward import ACTIVATION_HELP_V2, ACTIVATIONS_V2, FeedForward


@operator(
    "feed_forward_v2",
    identity="feed_forward",
    version=2,
    summary="Version 2 of feed_forward (linear - activation - linear, width expansion * D), kept so saved "
            "feed_forward@2 plans restore.",
    shape="x[B, T, D] -> out[B, T, D]",
    args={
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT,
                         help="Hidden width as a multiple of D: the hidden layer has expansion * D units."),
        "activation": Arg(str, "gelu", choices=ACTIVATIONS_V2, positional=False, help=ACTIVATION_HELP_V2),
        "bias": Arg(bool, True, positional=False, help="Whether both linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("feed_forward_v2()", ("B", 16, 32), ("B", 16, 32),
                note="The same network as feed_forward() with its new arguments at their defaults."),
        Example("feed_forward_v2(2, activation='silu', bias=False)", ("B", 6, 8), ("B", 6, 8),
                note="A bias-free SiLU network with hidden width 16."),
    ),
    reference=spec_of(FeedForward).reference,
)
class FeedForwardV2(FeedForward):
    """`feed_forward@2`, frozen: `fc2(activation(fc1(x)))` with `fc1 = Linear(D, expansion * D)`,
    `fc2 = Linear(expansion * D, D)` and one of the activations 'gelu', 'gelu_tanh', 'relu',
    'silu'.

    This is the declaration `feed_forward` had before version 3 added `hidden`, `gated` and
    `"quick_gelu"`. Its arguments, plan records and parameters are exactly version 2's, so a
    plan saved with `feed_forward@2` restores byte for byte, builds this module and loads the
    state dict it was saved with. It computes what `feed_forward` computes with the same
    expansion, activation and bias. Write `feed_forward` in new specifications; this alias
    exists for saved plans (which record the identity `feed_forward@2`, not the alias).
    """

    def __init__(self, *, expansion: int = 4, activation: str = "gelu", bias: bool = True, D: int) -> None:
        super().__init__(expansion=expansion, activation=activation, bias=bias, D=D)
