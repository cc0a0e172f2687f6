"""The window arithmetic max_pool1d and avg_pool1d share: pooling.py's, on one axis.

A 1-D pool reads rank 3 as a signal ``[B, C, L]`` (spec §3) and applies the conv2d equation
of §6 to the length axis, with the channel count passed through:

    L_out = floor((L + 2p - d(k - 1) - 1) / s + 1)     (d = 1 for avg_pool1d)

or, with ``ceil_mode`` (version 2), pooling.py's ceil-mode form L_out = ceil((L + m) / s),
m = min(2p - d(k - 1) - 1 + s, p): rounded up, every window starting inside the signal or its
left padding.

As for the 2-D pools, an omitted stride equals kernel_size and is recorded as inferred, and
a known output length bounds the input to an interval of s lengths, intersected with other
facts and fixed once it collapses. The equations are pooling.pool_windows' (floor mode is
convolution.window_relation) and the padding rule is pooling.validate_padding; this module
only maps one integer per field onto them.
"""

from __future__ import annotations

from typing import Any, Mapping

from hndl import Arg
from hndl.arg import MAX_EXTENT

from .convolution import SIGNAL_AXIS
from .pooling import pool_windows, validate_padding


def pooling1d_args(**extra: Arg) -> dict[str, Arg]:
    """kernel_size, stride and padding as single integers; ``extra`` entries follow them."""
    return {
        "kernel_size": Arg(int, min=1, max=MAX_EXTENT, help="Window extent along the length axis L."),
        "stride": Arg(int, min=1, max=MAX_EXTENT, inferable=True, positional=False,
                      help="Step between windows along L. Omitted, it equals kernel_size "
                           "(recorded in the plan as inferred)."),
        "padding": Arg(int, 0, min=0, max=MAX_EXTENT, positional=False,
                       help="Implicit padding on both ends of L; at most half the kernel."),
        **extra,
    }


def validate_padding1d(args: Mapping[str, Any]) -> None:
    """The 2-D rule on the one axis: 2 * padding <= kernel_size (E_ARGUMENT on field padding)."""
    validate_padding({"padding": (args["padding"],) * 2, "kernel_size": (args["kernel_size"],) * 2})


def pool1d_relation(s) -> None:
    """Fill an omitted stride with kernel_size, then apply the window equation of the node's mode to L."""
    args = s.args
    if "stride" not in args:
        s.arg("stride", args["kernel_size"])
    pool_windows(s, ((SIGNAL_AXIS, args["kernel_size"], args["stride"], args["padding"], args.get("dilation", 1)),))
