"""conv1d@1 (alias conv1d_v1): conv1d as version 1 declared it, before padding took torch's strings.

Kept so that plans saved with ``conv1d@1`` still restore byte for byte, rebuild and load their
state. New specifications use ``conv1d``.
"""

from __future__ import annotations

from hndl import Example, operator
from hndl.declaration import spec_of

from .conv1d import Conv1d
from .convolution import conv1d_relation, convolution1d_args


@operator(
    "conv1d_v1",
    identity="conv1d",
    version=1,
    summary="Version 1 of conv1d (padding an int only), kept so saved conv1d@1 plans restore.",
    shape="x[B, C_in, L] -> out[B, C_out, L_out]",
    relation=conv1d_relation,
    shape_text="Rank 3 read as [B, C, L]; L_out = floor((L + 2p - d(k - 1) - 1) / s + 1), inverted as an interval.",
    args=convolution1d_args(),
    category="convolution",
    examples=(
        Example("conv1d_v1(16, kernel_size=3, padding=1)", ("B", 4, 32), ("B", 16, 32),
                note="The same convolution as conv1d(16, kernel_size=3, padding=1)."),
    ),
    reference=spec_of(Conv1d).reference,
)
class Conv1dV1(Conv1d):
    """`conv1d@1`, frozen: a 1-D convolution (torch.nn.Conv1d) over `[B, C, L]` whose `padding`
    is an int.

    This is the declaration `conv1d` had before version 2 let `padding` take torch's `"same"`
    and `"valid"`. Its arguments, plan records and parameters are exactly version 1's, so a
    plan saved with `conv1d@1` restores byte for byte, builds this module and loads its state;
    it computes what `conv1d` computes with the same numbers. Write `conv1d` in new
    specifications; this alias exists for saved plans (which record the identity `conv1d@1`)."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=1, padding=0, dilation=1, groups=1,
                 bias=True) -> None:
        super().__init__(out_channels=out_channels, kernel_size=kernel_size, in_channels=in_channels, stride=stride,
                         padding=padding, dilation=dilation, groups=groups, bias=bias)
