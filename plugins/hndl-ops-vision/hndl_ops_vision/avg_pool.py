"""avg_pool2d@1 (alias avg_pool): the mean over sliding windows of each channel."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator

from .pooling import pool_relation, pooling_args, validate_padding


def _reference(module):
    return lambda x: F.avg_pool2d(x, module.kernel_size, module.stride, module.padding,
                                  count_include_pad=module.count_include_pad)


@operator(
    "avg_pool",
    identity="avg_pool2d",
    summary="Mean over sliding spatial windows of each channel of [B, C, H, W].",
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
        Example("avg_pool(2)", ("B", 4, 8, 8), ("B", 4, 4, 4), note="Stride defaults to the kernel: halves 8 x 8."),
        Example("conv(6, kernel_size=5)\ntanh()\navg_pool(2)", ("B", 1, 32, 32), ("B", 6, 14, 14),
                note="The first LeNet-5 stage: 32 -> 28 -> 14."),
        Example("avg_pool(3, stride=1, padding=1, count_include_pad=False)", ("B", 2, 5, 5), ("B", 2, 5, 5),
                note="Border windows average only their real elements."),
    ),
    reference=_reference,
)
class AvgPool(nn.AvgPool2d):
    """Average pooling (torch.nn.AvgPool2d, floor mode) over each channel of `[B, C, H, W]`.

    Each output element is the mean of a `kernel_size` window; windows start every `stride`
    elements (by default `stride = kernel_size`, so windows tile without overlap). Padding is
    implicit zeros, at most half the kernel; with `count_include_pad=True` (the default, as
    in PyTorch) a window overlapping the padding still divides by the full window size, with
    `False` only by its real elements. Channels pass through unchanged; spatial extents
    follow `O = floor((I + 2p - k) / s + 1)`, and an omitted input extent is bounded by the
    interval that produces a known output, fixed once it holds one value. No parameters;
    identical in train and eval mode."""

    def __init__(self, *, kernel_size, stride, padding=(0, 0), count_include_pad=True) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, count_include_pad=count_include_pad)
