"""conv2d@1 (alias conv_v1): conv as version 1 declared it, before padding took torch's strings.

Kept so that plans saved with ``conv2d@1`` still restore byte for byte, rebuild and load their
state. New specifications use ``conv``.
"""

from __future__ import annotations

from hndl import Example, operator
from hndl.declaration import spec_of

from .conv import DOWN2, Conv
from .convolution import conv_relation, convolution_args


@operator(
    "conv_v1",
    identity="conv2d",
    version=1,
    summary="Version 1 of conv (padding an int or a pair only), kept so saved conv2d@1 plans restore.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=conv_relation,
    shape_text="O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis; inverted as an interval.",
    args=convolution_args(),
    policies={"down2": DOWN2},
    category="convolution",
    examples=(
        Example("conv_v1(8, kernel_size=3, padding=1)", ("B", 3, 16, 16), ("B", 8, 16, 16),
                note="The same convolution as conv(8, kernel_size=3, padding=1)."),
    ),
    reference=spec_of(Conv).reference,
)
class ConvV1(Conv):
    """`conv2d@1`, frozen: a 2-D convolution (torch.nn.Conv2d) whose `padding` is an int or a
    pair of ints.

    This is the declaration `conv` had before version 2 let `padding` take torch's `"same"`
    and `"valid"`. Its arguments, plan records and parameters are exactly version 1's, so a
    plan saved with `conv2d@1` restores byte for byte, builds this module and loads its state;
    it computes what `conv` computes with the same numbers. Write `conv` in new specifications;
    this alias exists for saved plans (which record the identity `conv2d@1`, not the alias)."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, bias=True) -> None:
        super().__init__(out_channels=out_channels, kernel_size=kernel_size, in_channels=in_channels, stride=stride,
                         padding=padding, dilation=dilation, groups=groups, bias=bias)
