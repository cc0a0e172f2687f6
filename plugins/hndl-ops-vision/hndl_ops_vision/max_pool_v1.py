"""max_pool2d@1 (alias max_pool_v1): max pooling as version 1 declared it, floor mode only.

Kept so that plans saved before ``max_pool`` gained ``ceil_mode`` (version 2) still restore and
rebuild. New specifications use ``max_pool``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .max_pool import MaxPool
from .pooling import pool_relation, pooling_args, validate_padding


@operator(
    "max_pool_v1",
    identity="max_pool2d",
    version=1,
    summary="Version 1 of max_pool (floor mode only), kept so saved max_pool2d@1 plans restore.",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=pool_relation,
    validate=validate_padding,
    shape_text="O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis, stride defaulting to the kernel; "
               "inverted as an interval.",
    args=pooling_args(
        dilation=Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Spacing between the taps of a window."),
    ),
    category="pooling",
    examples=(
        Example("max_pool_v1(2)", ("B", 4, 8, 8), ("B", 4, 4, 4),
                note="The same pooling as max_pool(2): stride defaults to the kernel."),
        Example("max_pool_v1(3, stride=2, padding=1)", ("B", 4, 9, 9), ("B", 4, 5, 5),
                note="Overlapping windows, as in the ResNet stem."),
    ),
    reference=spec_of(MaxPool).reference,
)
class MaxPoolV1(MaxPool):
    """`max_pool2d@1`, frozen: torch.nn.MaxPool2d in floor mode over each channel of `[B, C, H, W]`.

    This is the declaration `max_pool` had before version 2 added the `ceil_mode` argument.
    Its arguments and plan records are exactly version 1's, so a plan saved with
    `max_pool2d@1` restores byte for byte and builds this module, which computes what
    `max_pool(..., ceil_mode=False)` computes: the maximum of each window, spatial extents
    `O = floor((I + 2p - d(k - 1) - 1) / s + 1)`. Write `max_pool` in new specifications; this
    alias exists for saved plans (which record the identity `max_pool2d@1`, not the alias).
    """

    def __init__(self, *, kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int] = (0, 0),
                 dilation: tuple[int, int] = (1, 1)) -> None:
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
