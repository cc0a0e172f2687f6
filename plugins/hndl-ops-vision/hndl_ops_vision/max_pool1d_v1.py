"""max_pool1d@1 (alias max_pool1d_v1): 1-D max pooling as version 1 declared it, floor mode only.

Kept so that plans saved before ``max_pool1d`` gained ``ceil_mode`` (version 2) still restore
and rebuild. New specifications use ``max_pool1d``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .max_pool1d import MaxPool1d
from .pooling1d import pool1d_relation, pooling1d_args, validate_padding1d


@operator(
    "max_pool1d_v1",
    identity="max_pool1d",
    version=1,
    summary="Version 1 of max_pool1d (floor mode only), kept so saved max_pool1d@1 plans restore.",
    shape="x[B, C, L] -> out[B, C, L_out]",
    relation=pool1d_relation,
    validate=validate_padding1d,
    shape_text="Rank 3 read as [B, C, L]; L_out = floor((L + 2p - d(k - 1) - 1) / s + 1), stride defaulting "
               "to the kernel; inverted as an interval.",
    args=pooling1d_args(
        dilation=Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                     help="Spacing between the taps of a window along L."),
    ),
    category="pooling",
    examples=(
        Example("max_pool1d_v1(2)", ("B", 4, 16), ("B", 4, 8),
                note="The same pooling as max_pool1d(2): stride defaults to the kernel."),
        Example("max_pool1d_v1(3, stride=2, padding=1)", ("B", 4, 9), ("B", 4, 5),
                note="Overlapping windows on a [B, C, L] signal."),
    ),
    reference=spec_of(MaxPool1d).reference,
)
class MaxPool1dV1(MaxPool1d):
    """`max_pool1d@1`, frozen: torch.nn.MaxPool1d in floor mode along the length of `[B, C, L]`.

    Rank 3 is read as a signal `[B, C, L]` (batch, channels, length), not the `[B, T, D]`
    sequence layout. This is the declaration `max_pool1d` had before version 2 added the
    `ceil_mode` argument. Its arguments and plan records are exactly version 1's, so a plan
    saved with `max_pool1d@1` restores byte for byte and builds this module, which computes
    what `max_pool1d(..., ceil_mode=False)` computes: `L_out = floor((L + 2p - d(k - 1) - 1) / s + 1)`.
    Write `max_pool1d` in new specifications; this alias exists for saved plans (which record
    the identity `max_pool1d@1`, not the alias).
    """

    def __init__(self, *, kernel_size: int, stride: int, padding: int = 0, dilation: int = 1) -> None:
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
