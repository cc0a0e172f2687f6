"""avg_pool2d@1 (alias avg_pool_v1): average pooling as version 1 declared it, floor mode only.

Kept so that plans saved before ``avg_pool`` gained ``ceil_mode`` (version 2) still restore and
rebuild. New specifications use ``avg_pool``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.declaration import spec_of

from .avg_pool import AvgPool
from .pooling import pool_relation, pooling_args, validate_padding


@operator(
    "avg_pool_v1",
    identity="avg_pool2d",
    version=1,
    summary="Version 1 of avg_pool (floor mode only), kept so saved avg_pool2d@1 plans restore.",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=pool_relation,
    validate=validate_padding,
    shape_text="O = floor((I + 2p - k) / s + 1) per spatial axis, stride defaulting to the kernel; "
               "inverted as an interval.",
    args=pooling_args(
        count_include_pad=Arg(bool, True, positional=False,
                              help="Whether padded zeros count in the divisor of a window that overlaps the padding."),
    ),
    category="pooling",
    examples=(
        Example("avg_pool_v1(2)", ("B", 4, 8, 8), ("B", 4, 4, 4),
                note="The same pooling as avg_pool(2): stride defaults to the kernel."),
        Example("avg_pool_v1(3, stride=1, padding=1, count_include_pad=False)", ("B", 2, 5, 5), ("B", 2, 5, 5),
                note="Border windows average only their real elements."),
    ),
    reference=spec_of(AvgPool).reference,
)
class AvgPoolV1(AvgPool):
    """`avg_pool2d@1`, frozen: torch.nn.AvgPool2d in floor mode over each channel of `[B, C, H, W]`.

    This is the declaration `avg_pool` had before version 2 added the `ceil_mode` argument.
    Its arguments and plan records are exactly version 1's, so a plan saved with
    `avg_pool2d@1` restores byte for byte and builds this module, which computes what
    `avg_pool(..., ceil_mode=False)` computes: the mean of each window (`count_include_pad`
    as in PyTorch), spatial extents `O = floor((I + 2p - k) / s + 1)`. Write `avg_pool` in new
    specifications; this alias exists for saved plans (which record the identity
    `avg_pool2d@1`, not the alias).
    """

    def __init__(self, *, kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int] = (0, 0),
                 count_include_pad: bool = True) -> None:
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding, count_include_pad=count_include_pad)
