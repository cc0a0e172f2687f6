"""max_pool1d@2: the maximum over sliding windows of each channel of a [B, C, L] signal, in floor or ceil
mode.

Version 2 added ``ceil_mode``; version 1 stays registered as ``max_pool1d_v1`` (max_pool1d_v1.py)
so plans saved with ``max_pool1d@1`` restore.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .pooling import ceil_mode_arg
from .pooling1d import pool1d_relation, pooling1d_args, validate_padding1d


def _reference(module):
    return lambda x: F.max_pool1d(x, module.kernel_size, module.stride, module.padding, module.dilation,
                                  ceil_mode=module.ceil_mode)


@operator(
    "max_pool1d",
    torch=TorchSpelling(
        signature="nn.MaxPool1d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, "
                  "ceil_mode=False)",
        hint="torch's MaxPool1d(3, 2, 1) is max_pool1d(3, stride=2, padding=1) here: only the "
             "kernel size is positional.",
    ),
    version=2,
    summary="Maximum over sliding windows along the length axis of each channel of a [B, C, L] signal.",
    shape="x[B, C, L] -> out[B, C, L_out]",
    relation=pool1d_relation,
    validate=validate_padding1d,
    shape_text="Rank 3 read as [B, C, L]; L_out = floor((L + 2p - d(k - 1) - 1) / s + 1), stride defaulting "
               "to the kernel; with ceil_mode, L_out = ceil((L + m) / s), m = min(2p - d(k - 1) - 1 + s, p) "
               "(rounded up, every window starting inside the signal or its left padding); inverted as an "
               "interval of s lengths.",
    args=pooling1d_args(
        dilation=Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                     help="Spacing between the taps of a window along L."),
        ceil_mode=ceil_mode_arg(),
    ),
    category="pooling",
    examples=(
        Example("max_pool1d(2)", ("B", 4, 16), ("B", 4, 8), note="Stride defaults to the kernel: halves L = 16."),
        Example("conv1d(8, kernel_size=16, stride=4)\nbatch_norm1d()\nrelu()\nmax_pool1d(4)", ("B", 1, 160),
                ("B", 8, 9), note="An M5-style audio stem on [B, C, L]: 160 -> 37 -> 9, no reshape to rank 4."),
        Example("linear()\nreshape(4)\nmax_pool1d(3, stride=1, padding=1)", ("B", 8), ("B", 4, 6),
                note="With stride 1 the output fixes the input length: projection width 4 * 6 = 24."),
        Example("max_pool1d(3, stride=2, ceil_mode=True)", ("B", 4, 16), ("B", 4, 8),
                note="ceil mode keeps the last partial window: 16 -> 8, where floor mode gives 7."),
    ),
    reference=_reference,
)
class MaxPool1d(nn.MaxPool1d):
    """Max pooling (torch.nn.MaxPool1d) along the length of a `[B, C, L]` signal.

    **Axis order.** max_pool1d reads a rank-3 tensor as a one-dimensional signal
    `[B, C, L]`: batch, channels, then length, and pools along the last axis, like conv1d.
    This is *not* the `[B, T, D]` sequence layout that linear, the normalizations and the
    activations use (there the features are last); rank alone does not name the axes.

    Each output element is the maximum of a `kernel_size` window whose taps are `dilation`
    apart; windows start every `stride` elements (by default `stride = kernel_size`, so
    windows tile without overlap). Padding is implicit negative infinity, so it never wins,
    and may be at most half the kernel. Channels pass through unchanged; the length follows
    `L_out = floor((L + 2p - d(k - 1) - 1) / s + 1)` (the equation max_pool applies per
    spatial axis), and an omitted input length is bounded by the interval that produces a
    known output, fixed once it holds one value (always with stride 1). The gradient flows to
    the maximal element of each window (the first one on ties). No parameters; identical in
    train and eval mode.

    **ceil_mode.** With `ceil_mode=True` (torch's flag) the division rounds up, so a last
    window that runs past the end of the signal still yields the maximum of what it covers, as
    long as it starts inside the signal or its left padding: `L_out = ceil((L + m) / s)` with
    `m = min(2p - d(k - 1) - 1 + s, p)`, the equation max_pool applies per spatial axis.
    Backward inference bounds the length to `s` values; with stride 1 the modes agree."""

    def __init__(self, *, kernel_size: int, stride: int, padding: int = 0, dilation: int = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
