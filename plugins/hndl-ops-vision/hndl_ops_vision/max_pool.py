"""max_pool2d@2 (alias max_pool): the maximum over sliding windows of each channel, in floor or ceil mode.

Version 2 added ``ceil_mode``; version 1 stays registered as ``max_pool_v1`` (max_pool_v1.py)
so plans saved with ``max_pool2d@1`` restore.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .pooling import ceil_mode_arg, pool_relation, pooling_args, validate_padding


def _reference(module):
    return lambda x: F.max_pool2d(x, module.kernel_size, module.stride, module.padding, module.dilation,
                                  ceil_mode=module.ceil_mode)


@operator(
    "max_pool",
    torch=TorchSpelling(
        signature="nn.MaxPool2d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, "
                  "ceil_mode=False)",
        hint="torch's MaxPool2d(3, 2, 1) is max_pool(3, stride=2, padding=1) here: only the kernel "
             "size is positional.",
        names=("max_pool2d", "maxpool2d"),
        call="max_pool(kernel_size, stride=...)",
    ),
    identity="max_pool2d",
    version=2,
    summary="Maximum over sliding spatial windows of each channel of [B, C, H, W].",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=pool_relation,
    validate=validate_padding,
    shape_text="O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis, stride defaulting to the kernel; "
               "with ceil_mode, O = ceil((I + m) / s), m = min(2p - d(k - 1) - 1 + s, p) (rounded up, every window "
               "starting inside the input or its left padding); inverted as an interval of s inputs.",
    args=pooling_args(
        dilation=Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Spacing between the taps of a window."),
        ceil_mode=ceil_mode_arg(),
    ),
    category="pooling",
    examples=(
        Example("max_pool(2)", ("B", 4, 8, 8), ("B", 4, 4, 4), note="Stride defaults to the kernel: halves 8 x 8."),
        Example("max_pool(3, stride=2, padding=1)", ("B", 4, 9, 9), ("B", 4, 5, 5),
                note="Overlapping windows, as in the ResNet stem."),
        Example("linear()\nreshape(4)\nmax_pool(3, stride=1, padding=1)", ("B", 8), ("B", 4, 6, 6),
                note="With stride 1 the output fixes the input: projection width 4 * 6 * 6 = 144."),
        Example("max_pool(3, stride=2, ceil_mode=True)", ("B", 64, 112, 112), ("B", 64, 56, 56),
                note="GoogLeNet's stem pool: ceil((112 - 3) / 2) + 1 = 56, where floor mode gives 55."),
    ),
    reference=_reference,
)
class MaxPool(nn.MaxPool2d):
    """Max pooling (torch.nn.MaxPool2d) over each channel of `[B, C, H, W]`.

    Each output element is the maximum of a `kernel_size` window whose taps are `dilation`
    apart; windows start every `stride` elements (by default `stride = kernel_size`, so
    windows tile without overlap). Padding is implicit negative infinity, so it never wins,
    and may be at most half the kernel. Channels pass through unchanged; spatial extents
    follow `O = floor((I + 2p - d(k - 1) - 1) / s + 1)`, and an omitted input extent is
    bounded by the interval that produces a known output, fixed once it holds one value.
    The gradient flows to the maximal element of each window (the first one on ties). No
    parameters; identical in train and eval mode.

    **ceil_mode.** With `ceil_mode=True` (torch's flag, used by GoogLeNet, SqueezeNet and
    Caffe-converted networks) the division rounds up, so a last window that runs past the end
    of the input still yields an output: the maximum of the elements it does cover. torch
    drops such a window if it would start in the right padding, so every window starts inside
    the input or its left padding; together, `O = ceil((I + m) / s)` with
    `m = min(2p - d(k - 1) - 1 + s, p)`. An input smaller than the kernel can then still give
    one output. Backward inference bounds the input to `s` values, as in floor mode; with
    stride 1 the two modes agree."""

    def __init__(self, *, kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int] = (0, 0),
                 dilation: tuple[int, int] = (1, 1), ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
