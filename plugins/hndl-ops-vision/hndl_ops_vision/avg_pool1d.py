"""avg_pool1d@1: the mean over sliding windows of each channel of a [B, C, L] signal."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator

from .pooling1d import pool1d_relation, pooling1d_args, validate_padding1d


def _reference(module):
    return lambda x: F.avg_pool1d(x, module.kernel_size, module.stride, module.padding,
                                  count_include_pad=module.count_include_pad)


@operator(
    "avg_pool1d",
    summary="Mean over sliding windows along the length axis of each channel of a [B, C, L] signal.",
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
        Example("avg_pool1d(2)", ("B", 4, 16), ("B", 4, 8), note="Stride defaults to the kernel: halves L = 16."),
        Example("conv1d(6, kernel_size=5)\ntanh()\navg_pool1d(2)", ("B", 1, 32), ("B", 6, 14),
                note="A LeNet-like stage on a signal: 32 -> 28 -> 14."),
        Example("avg_pool1d(3, stride=1, padding=1, count_include_pad=False)", ("B", 2, 5), ("B", 2, 5),
                note="Border windows average only their real elements."),
    ),
    reference=_reference,
)
class AvgPool1d(nn.AvgPool1d):
    """Average pooling (torch.nn.AvgPool1d, floor mode) along the length of a `[B, C, L]` signal.

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
    identical in train and eval mode."""

    def __init__(self, *, kernel_size: int, stride: int, padding: int = 0, count_include_pad: bool = True) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, count_include_pad=count_include_pad)
