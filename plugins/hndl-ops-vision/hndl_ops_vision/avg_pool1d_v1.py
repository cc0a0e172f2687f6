"""avg_pool1d@1 (alias avg_pool1d_v1): 1-D average pooling as version 1 declared it, floor mode only.

Kept so that plans saved before ``avg_pool1d`` gained ``ceil_mode`` (version 2) still restore
and rebuild. New specifications use ``avg_pool1d``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.declaration import spec_of

from .avg_pool1d import AvgPool1d
from .pooling1d import pool1d_relation, pooling1d_args, validate_padding1d


@operator(
    "avg_pool1d_v1",
    identity="avg_pool1d",
    version=1,
    summary="Version 1 of avg_pool1d (floor mode only), kept so saved avg_pool1d@1 plans restore.",
    shape="x[B, C, L] -> out[B, C, L_out]",
    relation=pool1d_relation,
    validate=validate_padding1d,
    shape_text="Rank 3 read as [B, C, L]; L_out = floor((L + 2p - k) / s + 1), stride defaulting to the kernel; "
               "inverted as an interval.",
    args=pooling1d_args(
        count_include_pad=Arg(bool, True, positional=False,
                              help="Whether padded zeros count in the divisor of a window that overlaps the padding."),
    ),
    category="pooling",
    examples=(
        Example("avg_pool1d_v1(2)", ("B", 4, 16), ("B", 4, 8),
                note="The same pooling as avg_pool1d(2): stride defaults to the kernel."),
        Example("avg_pool1d_v1(3, stride=1, padding=1, count_include_pad=False)", ("B", 2, 5), ("B", 2, 5),
                note="Border windows average only their real elements."),
    ),
    reference=spec_of(AvgPool1d).reference,
)
class AvgPool1dV1(AvgPool1d):
    """`avg_pool1d@1`, frozen: torch.nn.AvgPool1d in floor mode along the length of `[B, C, L]`.

    Rank 3 is read as a signal `[B, C, L]` (batch, channels, length), not the `[B, T, D]`
    sequence layout. This is the declaration `avg_pool1d` had before version 2 added the
    `ceil_mode` argument. Its arguments and plan records are exactly version 1's, so a plan
    saved with `avg_pool1d@1` restores byte for byte and builds this module, which computes
    what `avg_pool1d(..., ceil_mode=False)` computes: `L_out = floor((L + 2p - k) / s + 1)`,
    `count_include_pad` as in PyTorch. Write `avg_pool1d` in new specifications; this alias
    exists for saved plans (which record the identity `avg_pool1d@1`, not the alias).
    """

    def __init__(self, *, kernel_size: int, stride: int, padding: int = 0, count_include_pad: bool = True) -> None:
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding, count_include_pad=count_include_pad)
