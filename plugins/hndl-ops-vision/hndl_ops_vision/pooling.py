"""The window arithmetic max_pool and avg_pool share, in floor and in ceil mode.

Floor mode (the default) follows the conv2d equation of §6 per spatial axis, with the channel
count passed through:

    O = floor((I + 2p - d(k - 1) - 1) / s + 1)     (d = 1 for avg_pool)

Ceil mode (``ceil_mode=True``, torch's) rounds the division up, so a last, partial window
that hangs over the end of the input still produces an output, except that every window must
start inside the input or its left padding: torch drops a last window that would start in the
right padding. Window j starts at ``j * s`` in padded coordinates, so the output counts the
starts j >= 0 with ``j * s < I + 2p - d(k - 1) - 1 + s`` (the rounded-up equation) and
``j * s < I + p`` (the start rule), which is one closed form:

    O = ceil((I + m) / s),     m = min(2p - d(k - 1) - 1 + s, p)

Backward, in both modes a known output bounds the input to an interval of s values
(``(O - 1)s - m + 1 <= I <= Os - m`` in ceil mode), intersected with other facts and fixed
once it collapses, exactly as for conv; with stride 1 the two modes agree. An omitted stride
equals kernel_size; the relation fills it into the plan, where it is recorded as inferred.
"""

from __future__ import annotations

from typing import Iterable

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


def ceil_mode_arg() -> Arg:
    """The ``ceil_mode`` flag of every pool from version 2 on (torch's meaning and default)."""
    return Arg(bool, False, positional=False,
               help="Round the output extent up instead of down, so a last partial window still produces an "
                    "output, as long as it starts inside the input or its left padding (torch's ceil_mode).")


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


def ceil_offset(k: int, s: int, p: int, d: int) -> int:
    """m in the ceil-mode equation O = ceil((I + m) / s)."""
    return min(2 * p - d * (k - 1) - 1 + s, p)


def ceil_output(extent: int, k: int, s: int, p: int, d: int) -> int:
    """The ceil-mode output extent of torch's pooling for an input extent (at most 0 when none fits)."""
    return -((-(extent + ceil_offset(k, s, p, d))) // s)


def ceil_input_interval(out: int, k: int, s: int, p: int, d: int) -> tuple[int, int]:
    """The inclusive interval of input extents that ceil mode maps to ``out`` (low clamped to 1; empty,
    high < low, when no positive input gives ``out``, which the resolver reports as E_CONSTRAINT)."""
    m = ceil_offset(k, s, p, d)
    return max((out - 1) * s - m + 1, 1), out * s - m


def ceil_window_relation(s, windows: Iterable[tuple[int, int, int, int, int]]) -> None:
    """The ceil-mode equation on each ``(axis, k, s, p, d)`` of ``windows``, between ports x and
    out: forward exactly, backward as the interval of inputs that produce the known output (the
    walk of convolution.window_relation with the ceil-mode equation and its inverse)."""
    window_relation(s, windows, ceil_output, ceil_input_interval, " even in ceil mode")


def pool_windows(s, windows: Iterable[tuple[int, int, int, int, int]]) -> None:
    """Apply the equation of the node's mode (ceil_mode, False when the version has none) to ``windows``."""
    if s.args.get("ceil_mode", False):
        ceil_window_relation(s, windows)
    else:
        window_relation(s, windows)


def pool_relation(s) -> None:
    """Fill an omitted stride with kernel_size, then apply the window equation per spatial axis."""
    args = s.args
    if "stride" not in args:
        s.arg("stride", args["kernel_size"])
    dilation = args.get("dilation", (1, 1))
    pool_windows(s, spatial_windows(args["kernel_size"], args["stride"], args["padding"], dilation))

