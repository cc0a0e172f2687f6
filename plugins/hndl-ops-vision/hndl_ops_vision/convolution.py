"""The convolution arithmetic shared by conv, conv1d, deconv, the pools and residual_block
(§6), one spatial axis at a time.

conv2d:           O = floor((I + 2p - d(k - 1) - 1) / s + 1)
conv_transpose2d: O = (I - 1)s - 2p + d(k - 1) + output_padding + 1

Forward, a known input extent fixes the output. Backward, an ordinary convolution only
bounds its input to an interval of s values, fixed only once the interval collapses; a
transposed convolution inverts exactly when the division is exact. Max and average pooling
(without ceil mode) follow the conv2d equation, and conv1d applies it to the one axis of
[B, C, L].
"""

from __future__ import annotations

from hndl import Arg
from hndl.arg import MAX_EXTENT

SPATIAL_AXES = (2, 3)
#: The length axis of a [B, C, L] signal (conv1d).
SIGNAL_AXIS = 2


def convolution_args(**extra: Arg) -> dict[str, Arg]:
    """The argument schema conv and deconv share; ``extra`` entries go before groups."""
    return {
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels. Omit them to infer them from what consumes the result."),
        "kernel_size": Arg("pair", min=1, max=MAX_EXTENT, positional=False,
                           help="Kernel extent per spatial axis; required unless a policy supplies it."),
        "stride": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Step between kernel applications."),
        "padding": Arg("pair", 0, min=0, max=MAX_EXTENT, positional=False,
                       help="Padding per spatial axis: added to the input by conv, trimmed from the output by deconv."),
        **extra,
        "dilation": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Spacing between kernel taps."),
        "groups": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Channel groups; both channel counts must divide by it."),
        "bias": Arg(bool, True, positional=False, help="Whether to learn an additive bias per output channel."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    }


def convolution1d_args() -> dict[str, Arg]:
    """conv1d's argument schema: conv's, with one int per field instead of a pair."""
    return {
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels. Omit them to infer them from what consumes the result."),
        "kernel_size": Arg(int, min=1, max=MAX_EXTENT, positional=False, help="Kernel extent along the length axis L."),
        "stride": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Step between kernel applications along L."),
        "padding": Arg(int, 0, min=0, max=MAX_EXTENT, positional=False, help="Zeros added to both ends of L."),
        "dilation": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False, help="Spacing between kernel taps along L."),
        "groups": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Channel groups; both channel counts must divide by it."),
        "bias": Arg(bool, True, positional=False, help="Whether to learn an additive bias per output channel."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    }


def conv_output(extent: int, k: int, s: int, p: int, d: int) -> int:
    return (extent + 2 * p - d * (k - 1) - 1) // s + 1


def conv_input_interval(out: int, k: int, s: int, p: int, d: int) -> tuple[int, int]:
    low = (out - 1) * s - 2 * p + d * (k - 1) + 1
    return max(low, 1), low + s - 1


def transposed_offset(k: int, s: int, p: int, d: int, output_padding: int) -> int:
    """c in O = s * I + c."""
    return -s - 2 * p + d * (k - 1) + output_padding + 1


def spatial_windows(kernel, stride, padding, dilation) -> tuple[tuple[int, int, int, int, int], ...]:
    """The ``(axis, k, s, p, d)`` of both spatial axes from four per-axis pairs, for window_relation."""
    first, second = SPATIAL_AXES
    return (
        (first, kernel[0], stride[0], padding[0], dilation[0]),
        (second, kernel[1], stride[1], padding[1], dilation[1]),
    )


def _per_axis(args, axis: int) -> tuple[int, int, int, int]:
    j = axis - SPATIAL_AXES[0]
    return args["kernel_size"][j], args["stride"][j], args["padding"][j], args["dilation"][j]


def check_groups(s) -> None:
    """Channels on both sides must divide evenly into groups."""
    groups = s.args["groups"]
    for port, name in (("x", "input"), ("out", "output")):
        shape = s.shape(port)
        if shape is not None and shape[1] is not None and shape[1] % groups:
            s.error(
                "E_CONSTRAINT",
                f"{s.spec.alias}: {name} channels {shape[1]} are not divisible by groups={groups}",
            )


def window_relation(s, windows, output=conv_output, input_interval=conv_input_interval, mode: str = "") -> None:
    """The conv2d equation (or another window equation given as ``output`` and its inverse
    ``input_interval``) on each ``(axis, k, s, p, d)`` of ``windows``, between ports x and out:
    forward exactly, backward as the interval of inputs that produce the known output.

    A known input fixes the output, and the interval of that output always holds the input, so
    the backward step only runs for an unknown input. An axis whose output is already the one
    produced teaches nothing and costs a few int operations. Known extents never change, so the
    shapes are read again only for an unknown input after an earlier axis added a fact.
    """
    x, out = s.shape("x"), s.shape("out")
    if x is None or out is None:
        return
    stale = False
    for axis, k, st, p, d in windows:
        extent = x[axis]
        if extent is None and stale:
            x, out = s.shape("x"), s.shape("out")
            extent, stale = x[axis], False
        if extent is not None:
            produced = output(extent, k, st, p, d)
            if out[axis] == produced:
                continue  # known and agreeing (a known extent is positive, so never too small)
            if produced < 1:
                s.error("E_CONSTRAINT", f"input extent {extent} on axis {axis} is too small for kernel {k}, "
                                        f"dilation {d}, padding {p}{mode}")
            s.axis("out", axis, produced)  # adds the extent, or reports the contradiction
            stale = True
        elif out[axis] is not None:
            s.interval("x", axis, *input_interval(out[axis], k, st, p, d))
            stale = True


def conv_relation(s) -> None:
    """Spatial extents of an ordinary convolution, forward exactly and backward as intervals."""
    check_groups(s)
    args = s.args
    window_relation(s, spatial_windows(args["kernel_size"], args["stride"], args["padding"], args["dilation"]))


def conv1d_relation(s) -> None:
    """The one length axis of [B, C, L], by the same equation as each axis of conv2d."""
    check_groups(s)
    args = s.args
    window_relation(s, ((SIGNAL_AXIS, args["kernel_size"], args["stride"], args["padding"], args["dilation"]),))


def transposed_relation(s) -> None:
    """Spatial extents of a transposed convolution: O = s * I + c, exact in both directions."""
    check_groups(s)
    x, out = s.shape("x"), s.shape("out")
    if x is None or out is None:
        return
    for axis in SPATIAL_AXES:
        k, st, p, d = _per_axis(s.args, axis)
        offset = transposed_offset(k, st, p, d, s.args["output_padding"][axis - SPATIAL_AXES[0]])
        if offset == 0:
            s.scale("out", axis, "x", axis, st)
            continue
        extent, result = s.shape("x")[axis], s.shape("out")[axis]
        if extent is not None:
            s.axis("out", axis, st * extent + offset)
        elif result is not None:
            source, remainder = divmod(result - offset, st)
            if remainder or source < 1:
                s.error(
                    "E_CONSTRAINT",
                    f"output extent {result} on axis {axis} needs an input of {(result - offset) / st}, "
                    "not a positive integer",
                )
            s.axis("x", axis, source)
