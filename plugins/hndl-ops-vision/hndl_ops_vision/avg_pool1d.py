"""avg_pool1d@2: the mean over sliding windows of each channel of a [B, C, L] signal, in floor or ceil mode.

Version 2 added ``ceil_mode``; version 1 stays registered as ``avg_pool1d_v1`` (avg_pool1d_v1.py)
so plans saved with ``avg_pool1d@1`` restore.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .pooling import ceil_mode_arg
from .pooling1d import pool1d_relation, pooling1d_args, validate_padding1d


def _reference(module):
    return lambda x: F.avg_pool1d(x, module.kernel_size, module.stride, module.padding, ceil_mode=module.ceil_mode,
                                  count_include_pad=module.count_include_pad)


@operator(
    "avg_pool1d",
    torch=TorchSpelling(
        signature="nn.AvgPool1d(kernel_size, stride=None, padding=0, ceil_mode=False, "
                  "count_include_pad=True)",
        hint="torch's AvgPool1d(3, 2, 1) is avg_pool1d(3, stride=2, padding=1) here: only the "
             "kernel size is positional.",
    ),
    version=2,
    summary="Mean over sliding windows along the length axis of each channel of a [B, C, L] signal.",
    shape="x[B, C, L] -> out[B, C, L_out]",
    relation=pool1d_relation,
    validate=validate_padding1d,
    shape_text="Rank 3 read as [B, C, L]; L_out = floor((L + 2p - k) / s + 1), stride defaulting to the kernel; "
               "with ceil_mode, L_out = ceil((L + m) / s), m = min(2p - k - 1 + s, p) (rounded up, every window "
               "starting inside the signal or its left padding); inverted as an interval of s lengths.",
    args=pooling1d_args(
        ceil_mode=ceil_mode_arg(),
        count_include_pad=Arg(bool, True, positional=False,
                              help="Whether padded zeros count in the divisor of a window that overlaps the padding."),
    ),
    category="pooling",
    examples=(
        Example("avg_pool1d(2)", ("B", 4, 16), ("B", 4, 8), note="Stride defaults to the kernel: halves L = 16."),
        Example("conv1d(6, kernel_size=5)\ntanh()\navg_pool1d(2)", ("B", 1, 32), ("B", 6, 14),
                note="A LeNet-like stage on a signal: 32 -> 28 -> 14."),
        Example("avg_pool1d(3, stride=1, padding=1, count_include_pad=False)", ("B", 2, 5), ("B", 2, 5),
                note="Border windows average only their real elements."),
        Example("avg_pool1d(2, ceil_mode=True)", ("B", 4, 15), ("B", 4, 8),
                note="ceil mode keeps the last, one-element window (15 -> 8, floor mode gives 7); "
                     "it divides by 1, the positions it covers inside the signal."),
    ),
    reference=_reference,
)
class AvgPool1d(nn.AvgPool1d):
    """Average pooling (torch.nn.AvgPool1d) along the length of a `[B, C, L]` signal.

    **Axis order.** avg_pool1d reads a rank-3 tensor as a one-dimensional signal
    `[B, C, L]`: batch, channels, then length, and pools along the last axis, like conv1d.
    This is *not* the `[B, T, D]` sequence layout that linear, the normalizations and the
    activations use (there the features are last); rank alone does not name the axes.

    Each output element is the mean of a `kernel_size` window; windows start every `stride`
    elements (by default `stride = kernel_size`, so windows tile without overlap). Padding is
    implicit zeros, at most half the kernel; with `count_include_pad=True` (the default, as
    in PyTorch) a window overlapping the padding still divides by `kernel_size`, with `False`
    only by its real elements. Channels pass through unchanged; the length follows
    `L_out = floor((L + 2p - k) / s + 1)`, and an omitted input length is bounded by the
    interval that produces a known output, fixed once it holds one value. No parameters;
    identical in train and eval mode.

    **ceil_mode.** With `ceil_mode=True` (torch's flag) the division rounds up, so a last
    window that runs past the end of the signal still yields an output, as long as it starts
    inside the signal or its left padding: `L_out = ceil((L + m) / s)` with
    `m = min(2p - k - 1 + s, p)`. Such a window divides as torch does: with
    `count_include_pad=True` by the positions it covers inside the signal *and its padding*
    (never those past the right padding), with `False` by its real elements only."""

    def __init__(self, *, kernel_size: int, stride: int, padding: int = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad)
