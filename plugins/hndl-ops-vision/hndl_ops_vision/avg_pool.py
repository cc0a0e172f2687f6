"""avg_pool2d@2 (alias avg_pool): the mean over sliding windows of each channel, in floor or ceil mode.

Version 2 added ``ceil_mode``; version 1 stays registered as ``avg_pool_v1`` (avg_pool_v1.py)
so plans saved with ``avg_pool2d@1`` restore.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .pooling import ceil_mode_arg, pool_relation, pooling_args, validate_padding


def _reference(module):
    return lambda x: F.avg_pool2d(x, module.kernel_size, module.stride, module.padding, ceil_mode=module.ceil_mode,
                                  count_include_pad=module.count_include_pad)


@operator(
    "avg_pool",
    torch=TorchSpelling(
        signature="nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False, "
                  "count_include_pad=True)",
        hint="torch's AvgPool2d(3, 2, 1) is avg_pool(3, stride=2, padding=1) here: only the kernel "
             "size is positional.",
        names=("avg_pool2d", "avgpool2d"),
        call="avg_pool(kernel_size, stride=...)",
    ),
    identity="avg_pool2d",
    version=2,
    summary="Mean over sliding spatial windows of each channel of [B, C, H, W].",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=pool_relation,
    validate=validate_padding,
    shape_text="O = floor((I + 2p - k) / s + 1) per spatial axis, stride defaulting to the kernel; "
               "with ceil_mode, O = ceil((I + m) / s), m = min(2p - k - 1 + s, p) (rounded up, every window "
               "starting inside the input or its left padding); inverted as an interval of s inputs.",
    args=pooling_args(
        ceil_mode=ceil_mode_arg(),
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
        Example("avg_pool(3, stride=2, padding=1, ceil_mode=True)", ("B", 2, 8, 8), ("B", 2, 5, 5),
                note="ceil mode: 8 -> 5 where floor mode gives 4. The last window starts on the last row and "
                     "runs past the padding row; with count_include_pad it divides by the 2 x 3 positions "
                     "inside the input and its padding, not by 9."),
    ),
    reference=_reference,
)
class AvgPool(nn.AvgPool2d):
    """Average pooling (torch.nn.AvgPool2d) over each channel of `[B, C, H, W]`.

    Each output element is the mean of a `kernel_size` window; windows start every `stride`
    elements (by default `stride = kernel_size`, so windows tile without overlap). Padding is
    implicit zeros, at most half the kernel; with `count_include_pad=True` (the default, as
    in PyTorch) a window overlapping the padding still divides by the full window size, with
    `False` only by its real elements. Channels pass through unchanged; spatial extents
    follow `O = floor((I + 2p - k) / s + 1)`, and an omitted input extent is bounded by the
    interval that produces a known output, fixed once it holds one value. No parameters;
    identical in train and eval mode.

    **ceil_mode.** With `ceil_mode=True` (torch's flag) the division rounds up, so a last
    window that runs past the end of the input still yields an output, as long as it starts
    inside the input or its left padding: `O = ceil((I + m) / s)` with
    `m = min(2p - k - 1 + s, p)`. The divisor of such a window is torch's: with
    `count_include_pad=True` it counts the elements inside the input *and its padding*, never
    the positions past the right padding; with `False` only the real elements. Backward
    inference bounds the input to `s` values, as in floor mode; with stride 1 the two modes
    agree."""

    def __init__(self, *, kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int] = (0, 0),
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad)
