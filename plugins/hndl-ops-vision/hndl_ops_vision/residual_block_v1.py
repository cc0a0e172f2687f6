"""residual_block@1 (alias residual_block_v1): the ResNet basic block as version 1 declared it.

Kept so that plans saved before ``residual_block`` gained ``norm_eps``, ``norm_momentum`` and
``stochastic_depth_prob`` (version 2) still restore, rebuild and load their state dictionaries.
New specifications use ``residual_block``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.declaration import spec_of

from .residual_block import ResidualBlock


def _relation(s) -> None:
    """Version 2's relation: the spatial equation did not change."""
    spec_of(ResidualBlock).relation(s)


@operator(
    "residual_block_v1",
    identity="residual_block",
    version=1,
    summary="Version 1 of residual_block (batch norms with eps 1e-5 and momentum 0.1, no stochastic depth), kept "
            "so saved residual_block@1 plans restore.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    shape_text="H_out = floor((H - 1) / stride) + 1, the same for W; inverted as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels of both convolutions. Omit them to infer them from what consumes "
                                 "the result."),
        "stride": Arg(int, 1, min=1, max=2, positional=False,
                      help="Stride of the first convolution and of the projection: 1 keeps H and W, 2 halves them "
                           "(rounding up)."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    },
    category="block",
    examples=(
        Example("residual_block_v1(16, stride=2)", ("B", 8, 8, 8), ("B", 16, 4, 4),
                note="The same block as residual_block(16, stride=2)."),
        Example("residual_block_v1()", ("B", 8, 6, 6), ("B", 8, 6, 6), note="An identity skip."),
    ),
    reference=spec_of(ResidualBlock).reference,
)
class ResidualBlockV1(ResidualBlock):
    """`residual_block@1`, frozen: torchvision's `BasicBlock`,
    `relu(bn2(conv2(relu(bn1(conv1(x))))) + skip)`, with batch norms of eps 1e-5 and momentum
    0.1 and no stochastic depth.

    This is the declaration `residual_block` had before version 2 added `norm_eps`,
    `norm_momentum` and `stochastic_depth_prob`. Its arguments, plan records and parameters
    (names, order and shapes) are exactly version 1's, so a plan saved with `residual_block@1`
    restores byte for byte, builds this module and loads the state dictionary it was saved
    with. It computes what `residual_block` computes with its defaults. Write `residual_block`
    in new specifications; this alias exists for saved plans (which record the identity
    `residual_block@1`, not the alias)."""

    def __init__(self, *, out_channels: int, in_channels: int, stride: int = 1) -> None:
        super().__init__(out_channels=out_channels, in_channels=in_channels, stride=stride)
