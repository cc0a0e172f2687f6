"""The window arithmetic max_pool and avg_pool share.

Pooling (floor mode) follows the conv2d equation of §6 per spatial axis, with the channel
count passed through:

    O = floor((I + 2p - d(k - 1) - 1) / s + 1)     (d = 1 for avg_pool)

An omitted stride equals kernel_size; the relation fills it into the plan, where it is
recorded as inferred. Backward, a known output bounds the input to an interval of s values,
intersected with other facts and fixed once it collapses, exactly as for conv.
"""

from __future__ import annotations

from hndl import Arg, HNDLError
from hndl.arg import MAX_EXTENT

from .convolution import spatial_windows, window_relation


def pooling_args(**extra: Arg) -> dict[str, Arg]:
    """kernel_size, stride and padding; ``extra`` entries follow them."""
    return {
        "kernel_size": Arg("pair", min=1, max=MAX_EXTENT, help="Window extent per spatial axis."),
        "stride": Arg("pair", min=1, max=MAX_EXTENT, inferable=True, positional=False,
                      help="Step between windows. Omitted, it equals kernel_size (recorded in the plan as inferred)."),
        "padding": Arg("pair", 0, min=0, max=MAX_EXTENT, positional=False,
                       help="Implicit padding on both sides of each spatial axis; at most half the kernel."),
        **extra,
    }


def validate_padding(args) -> None:
    """The backend pads by at most half a window: 2 * padding <= kernel_size on each axis."""
    for j in range(2):
        padding, kernel = args["padding"][j], args["kernel_size"][j]
        if 2 * padding > kernel:
            raise HNDLError(
                "E_ARGUMENT",
                f"padding {padding} is more than half of kernel_size {kernel}",
                field="padding",
                remedies=(f"Use padding of at most {kernel // 2}, or a larger kernel.",),
            )


def pool_relation(s) -> None:
    """Fill an omitted stride with kernel_size, then apply the window equation per spatial axis."""
    args = s.args
    if "stride" not in args:
        s.arg("stride", args["kernel_size"])
    dilation = args.get("dilation", (1, 1))
    window_relation(s, spatial_windows(args["kernel_size"], args["stride"], args["padding"], dilation))
