"""conv1d@2: a 1-D convolution over a [B, C, L] signal; version 2 takes torch's padding="same"."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling

from .convolution import check_same_padding, conv1d_relation, convolution1d_args


def _reference(module):
    return lambda x: F.conv1d(x, module.weight, module.bias, module.stride, module.padding, module.dilation,
                              module.groups)


@operator(
    "conv1d",
    torch=TorchSpelling(
        signature="nn.Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, "
                  "groups=1, bias=True)",
    ),
    version=2,
    summary="1-D convolution over a [B, C, L] signal with learned kernels.",
    shape="x[B, C_in, L] -> out[B, C_out, L_out]",
    relation=conv1d_relation,
    validate=check_same_padding,
    shape_text='Rank 3 read as [B, C, L]; L_out = floor((L + 2p - d(k - 1) - 1) / s + 1), inverted as an interval; '
               'padding="same" (stride 1): L_out = L.',
    args=convolution1d_args(same=True),
    category="convolution",
    examples=(
        Example("conv1d(16, kernel_size=3, padding=1)", ("B", 4, 32), ("B", 16, 32),
                note="Padding 1 keeps the length of a kernel-3 convolution."),
        Example("conv1d(kernel_size=5, stride=2)", ("B", 2, 21), ("B", 8, 9),
                note="out_channels 8 comes from the contract; L_out = floor((21 - 5) / 2) + 1 = 9."),
        Example('conv1d(16, kernel_size=5, padding="same")', ("B", 4, 32), ("B", 16, 32),
                note='padding="same" keeps L at stride 1, as in torch (here 2 zeros at each end).'),
    ),
    reference=_reference,
)
class Conv1d(nn.Conv1d):
    """A 1-D convolution (torch.nn.Conv1d) with no activation inside.

    **Axis order.** conv1d reads a rank-3 tensor as a one-dimensional signal
    `[B, C, L]`: batch, channels, then length, and convolves along the last axis. This is
    *not* the `[B, T, D]` sequence layout that linear, the normalizations and the
    activations use (there the features are last); rank alone does not name the axes, so a
    `[B, T, D]` sequence must be transposed by the author before it reaches conv1d.

    The length axis follows the conv2d equation of §6 with one integer per field:
    `L_out = floor((L + 2p - d(k - 1) - 1) / s + 1)`. Inverting it from a known output
    length leaves an interval of `s` input lengths, fixed only when it collapses (always with
    stride 1). `kernel_size` is required; there is no policy. Channels on both sides must
    divide by `groups`.

    `padding` is an int or one of torch's strings: `"same"` keeps L (stride 1 only, E_ARGUMENT
    otherwise, as torch refuses it) and `"valid"` means none. An extent the equation misses
    fails with the equation's numbers and the `padding` or `stride` that gives the required one.
    HNDL's only positional argument is `out_channels`: torch's `Conv1d(4, 16, 3)` is
    `conv1d(16, kernel_size=3)`. Version 2 added the padding strings; `conv1d_v1` (conv1d@1)
    keeps version 1's declaration for saved plans."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=1, padding=0, dilation=1, groups=1,
                 bias=True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
