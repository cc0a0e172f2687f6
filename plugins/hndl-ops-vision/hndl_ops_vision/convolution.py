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

from typing import Any, Optional

from hndl import Arg, HNDLError
from hndl.arg import MAX_EXTENT

SPATIAL_AXES = (2, 3)
#: The length axis of a [B, C, L] signal (conv1d).
SIGNAL_AXIS = 2


#: The padding strings torch's Conv1d/Conv2d accept besides numbers.
PADDING_STRINGS = ("same", "valid")


class Padding(Arg):
    """A convolution's ``padding``: an int (or a pair of ints for conv) as before, or one of
    torch's strings. ``"same"`` stays ``"same"`` in the plan (a stride-1 convolution whose output
    extent equals its input's, padded asymmetrically by torch for an even span); ``"valid"`` is
    no padding and normalizes to 0, so it records exactly what ``padding=0`` records."""

    __slots__ = ()

    def normalize(self, value: Any, *, name: str, node: Optional[str] = None) -> Any:
        if isinstance(value, str):
            if value == "same":
                return "same"
            if value == "valid":
                return super().normalize(0, name=name, node=node)
            self._fail(name, node, f"{value[:40]!r} is not one of 'same', 'valid' (torch's padding strings)")
        return super().normalize(value, name=name, node=node)

    def _expectation(self) -> str:
        return super()._expectation() + ', or "same" (stride 1) or "valid"'

    def _key(self) -> tuple:
        return ("padding-strings", *super()._key())

    def __reduce__(self):
        kwargs = {slot: getattr(self, slot) for slot in Arg.__slots__[2:]}
        return (_rebuild_padding, (self.type, self.default, kwargs))


class TransposedPadding(Arg):
    """deconv's ``padding``: ints only, exactly as before; a string is refused with the reason
    (torch's ConvTranspose2d has no ``"same"``: it accepts the string and then fails on the first
    call) and the numbers that give what ``"same"`` would mean. It accepts what a plain pair
    argument accepts and compares equal to one, so deconv's declaration is unchanged."""

    __slots__ = ()

    def normalize(self, value: Any, *, name: str, node: Optional[str] = None) -> Any:
        if isinstance(value, str):
            raise HNDLError(
                "E_ARGUMENT",
                f"deconv's padding takes ints only, not {value[:40]!r}: a transposed convolution's padding trims its "
                "output, and torch's ConvTranspose2d has no padding strings",
                field=name,
                node=node,
                remedies=("For an output of stride * input, give kernel_size = stride + 2 * padding, e.g. "
                          "kernel_size=4, stride=2, padding=1 (policy=\"up2\"); at stride 1, padding=(kernel_size - 1) "
                          "// 2 keeps the extent of an odd kernel.",),
            )
        return super().normalize(value, name=name, node=node)

    def __reduce__(self):
        kwargs = {slot: getattr(self, slot) for slot in Arg.__slots__[2:]}
        return (_rebuild_transposed_padding, (self.type, self.default, kwargs))


def _rebuild_transposed_padding(type_: Any, default: Any, kwargs: dict) -> TransposedPadding:
    """Unpickle helper for :class:`TransposedPadding`."""
    return TransposedPadding(type_, default, **kwargs)


def _rebuild_padding(type_: Any, default: Any, kwargs: dict) -> Padding:
    """Unpickle helper for :class:`Padding`."""
    return Padding(type_, default, **kwargs)


def check_same_padding(args) -> None:
    """``padding="same"`` only at stride 1 on every axis, as torch requires (E_ARGUMENT otherwise)."""
    if args.get("padding") != "same":
        return
    stride = args["stride"]
    if any(step != 1 for step in (stride if isinstance(stride, tuple) else (stride,))):
        kernel, dilation = args["kernel_size"], args["dilation"]
        k = kernel[0] if isinstance(kernel, tuple) else kernel
        d = dilation[0] if isinstance(dilation, tuple) else dilation
        explicit = d * (k - 1) // 2
        raise HNDLError(
            "E_ARGUMENT",
            f"padding='same' needs stride 1, got stride={stride!r}: no padding keeps the extent of a strided "
            "convolution (torch refuses it too)",
            field="padding",
            remedies=(f"Give the padding as a number: padding={explicit} (dilation * (kernel_size - 1) // 2) makes "
                      f"the output extent ceil(input / stride) for an odd kernel; or keep padding=\"same\" with "
                      f"stride=1.",),
        )


def convolution_args(*, same: bool = False, transposed: bool = False, **extra: Arg) -> dict[str, Arg]:
    """The argument schema conv and deconv share; ``extra`` entries go before groups. With
    ``same``, ``padding`` also takes torch's ``"same"`` and ``"valid"`` (conv@2); with
    ``transposed`` (deconv), a padding string is refused with its reason."""
    padding_help = "Padding per spatial axis: added to the input by conv, trimmed from the output by deconv."
    kind = TransposedPadding if transposed else Arg
    padding = kind("pair", 0, min=0, max=MAX_EXTENT, positional=False, help=padding_help)
    if same:
        padding = Padding("pair", 0, min=0, max=MAX_EXTENT, positional=False,
                          help='Zeros added to both sides of each spatial axis (an int or a pair), or "same": the '
                               'output keeps H and W (stride 1 only, as in torch, which puts the extra zero after when '
                               'dilation * (kernel_size - 1) is odd), or "valid": no padding.')
    return {
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels. Omit them to infer them from what consumes the result."),
        "kernel_size": Arg("pair", min=1, max=MAX_EXTENT, positional=False,
                           help="Kernel extent per spatial axis; required unless a policy supplies it."),
        "stride": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Step between kernel applications."),
        "padding": padding,
        **extra,
        "dilation": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Spacing between kernel taps."),
        "groups": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Channel groups; both channel counts must divide by it."),
        "bias": Arg(bool, True, positional=False, help="Whether to learn an additive bias per output channel."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    }


def convolution1d_args(*, same: bool = False) -> dict[str, Arg]:
    """conv1d's argument schema: conv's, with one int per field instead of a pair; with ``same``,
    ``padding`` also takes ``"same"`` and ``"valid"`` (conv1d@2)."""
    padding = Arg(int, 0, min=0, max=MAX_EXTENT, positional=False, help="Zeros added to both ends of L.")
    if same:
        padding = Padding(int, 0, min=0, max=MAX_EXTENT, positional=False,
                          help='Zeros added to both ends of L, or "same": L_out = L (stride 1 only, as in torch, which '
                               'puts the extra zero at the end when dilation * (kernel_size - 1) is odd), or "valid": '
                               'no padding.')
    return {
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels. Omit them to infer them from what consumes the result."),
        "kernel_size": Arg(int, min=1, max=MAX_EXTENT, positional=False, help="Kernel extent along the length axis L."),
        "stride": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Step between kernel applications along L."),
        "padding": padding,
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


def window_relation(s, windows, output=conv_output, input_interval=conv_input_interval, mode: str = "",
                    advise: Optional[tuple[str, ...]] = None) -> None:
    """The conv2d equation (or another window equation given as ``output`` and its inverse
    ``input_interval``) on each ``(axis, k, s, p, d)`` of ``windows``, between ports x and out:
    forward exactly, backward as the interval of inputs that produce the known output.

    A known input fixes the output, and the interval of that output always holds the input, so
    the backward step only runs for an unknown input. An axis whose output is already the one
    produced teaches nothing and costs a few int operations. Known extents never change, so the
    shapes are read again only for an unknown input after an earlier axis added a fact.

    With ``advise`` (the conv2d equation only; the argument names the operator takes, from
    ``("padding", "stride")``), an output the contract or a consumer already fixed to another
    extent fails with the equation written out with its numbers and the padding or stride that
    gives the required extent (:func:`window_mismatch`).
    """
    if advise is not None:
        windows = tuple(windows)
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
            if advise is not None and (produced < 1 or out[axis] is not None):
                window_mismatch(s, windows, axis, advise)
            if produced < 1:
                s.error("E_CONSTRAINT", f"input extent {extent} on axis {axis} is too small for kernel {k}, "
                                        f"dilation {d}, padding {p}{mode}")
            s.axis("out", axis, produced)  # adds the extent, or reports the contradiction
            stale = True
        elif out[axis] is not None:
            s.interval("x", axis, *input_interval(out[axis], k, st, p, d))
            stale = True


# -- what to change when the conv2d equation misses the required extent -------------------------
def conv_equation(extent: int, k: int, s: int, p: int, d: int) -> str:
    """The conv2d equation with its numbers: ``floor((30 + 2*0 - 1*(3 - 1) - 1) / 1 + 1) = 28``."""
    return f"floor(({extent} + 2*{p} - {d}*({k} - 1) - 1) / {s} + 1) = {conv_output(extent, k, s, p, d)}"


def fitting_padding(extent: int, target: int, k: int, s: int, d: int) -> Optional[int]:
    """The smallest padding, at most the full span d(k - 1), that gives ``target`` from ``extent``.

    Closed form (no search, whatever the kernel): the output is ``target`` exactly when
    ``2p`` lies in ``[(target - 1)s - extent + d(k - 1) + 1, target * s - extent + d(k - 1)]``.
    """
    span = d * (k - 1)
    low = (target - 1) * s - extent + span + 1
    padding = max(0, -(-low // 2))
    if target < 1 or padding > min(span, MAX_EXTENT) or 2 * padding > target * s - extent + span:
        return None
    return padding


def fitting_stride(extent: int, target: int, k: int, p: int, d: int) -> Optional[int]:
    """The smallest stride that gives ``target`` from ``extent`` with padding ``p``; None when
    none does, or when only a stride past the whole span would (a target of 1: pool instead)."""
    if conv_output(extent, k, 1, p, d) == target:
        return 1
    span = extent + 2 * p - d * (k - 1) - 1
    if target < 2 or span < 0:
        return None
    stride = span // target + 1
    return stride if stride <= MAX_EXTENT and conv_output(extent, k, stride, p, d) == target else None


def _written(values: list[int]) -> str:
    """One argument value as an author writes it: ``2`` when every axis agrees, else ``(2, 1)``."""
    return str(values[0]) if len(set(values)) == 1 else f"({', '.join(map(str, values))})"


def window_mismatch(s, windows, failing: int, arguments: tuple[str, ...]) -> None:
    """Fail with the conv2d equation of axis ``failing`` written out, and remedies that name the
    ``padding`` (same stride) or ``stride`` (with the current or the centring padding) giving every
    axis with a known input and output its required extent, when one exists."""
    x, out = s.shape("x"), s.shape("out")
    axes = [window for window in windows if x[window[0]] is not None and out[window[0]] is not None]
    by_axis = {window[0]: window for window in axes}
    axis, k, st, p, d = by_axis[failing]
    extent, target = x[axis], out[axis]
    produced = conv_output(extent, k, st, p, d)
    symbol = _output_symbol(s, axis)
    equation = conv_equation(extent, k, st, p, d)
    if produced < 1:
        message = (f"{s.spec.alias}: {symbol} = {equation}: input extent {extent} on axis {axis} is too small for "
                   f"kernel_size {k}, dilation {d}, padding {p}")
    else:
        message = (f"{s.spec.alias}: {symbol} = {equation} from input extent {extent} (kernel_size {k}, stride {st}, "
                   f"padding {p}, dilation {d}), but out[{axis}] must be {target}")
    remedies = []
    if "padding" in arguments:
        paddings = [p_ if conv_output(x[a], k_, s_, p_, d_) == out[a] else fitting_padding(x[a], out[a], k_, s_, d_)
                    for a, k_, s_, p_, d_ in axes]
        if None not in paddings:
            fixed = paddings[[window[0] for window in axes].index(axis)]
            text = f"Give padding={_written(paddings)}: {symbol} = {conv_equation(extent, k, st, fixed, d)}"
            if all(window[2] == 1 for window in axes) and all(x[a] == out[a] for a, *_ in axes):
                text += ' (padding="same" keeps every extent of a stride-1 convolution)'
            remedies.append(text + ".")
        producer = s.fixed_by("x", axis)
        if extent < target and all(window[2] == 1 for window in axes) and producer is not None:
            remedies.insert(0, f"The input extent is already {extent}, not {target}: {producer} made it "
                               f"{extent} (see the chain). To keep {target} throughout, give every stride-1 "
                               f'convolution padding="same" (padding=dilation * (kernel_size - 1) // 2 for an odd '
                               f"kernel).")
    if "stride" in arguments:
        current = [p_ for _, _, _, p_, _ in axes]
        centring = [d_ * (k_ - 1) // 2 for _, k_, _, _, d_ in axes]
        for pads in (current, centring) if centring != current else (current,):
            strides = [fitting_stride(x[a], out[a], k_, pad, d_) for (a, k_, _, _, d_), pad in zip(axes, pads)]
            here = [window[0] for window in axes].index(axis)
            step = None if None in strides else strides[here]
            if step is None or (step == st and "padding" in arguments):
                continue  # no stride fits, or the padding remedy already says it
            padding = "" if pads is current else f", padding={_written(pads)}"
            remedies.append(f"Give stride={_written(strides)}{padding}: {symbol} = "
                            f"{conv_equation(extent, k, step, pads[here], d)}.")
            break
    keeps = all(x[a] == out[a] and d_ * (k_ - 1) <= x[a] for a, k_, _, _, d_ in axes)  # kernels within the input
    if keeps and not remedies and isinstance(s.spec.args.get("padding"), Padding):
        stride = "" if all(window[2] == 1 for window in axes) else "stride=1, "
        remedies.append(f'Give {stride}padding="same": a stride-1 convolution then keeps every extent, even with '
                        f"kernel_size {k} (torch pads dilation * (kernel_size - 1) zeros, the odd one after).")
    if s.policy is not None:  # the policy supplies these arguments: writing one beside it is a conflict
        name = next((key for key, policy in s.spec.policies.items() if policy.identity == s.policy), s.policy)
        remedies = [f'Drop policy="{name}" and g{text[1:]}' if text.startswith("Give ") else text
                    for text in remedies]
    s.error("E_CONSTRAINT", message, remedies=remedies, because=(("x", axis), ("out", axis)))


def _output_symbol(s, axis: int) -> str:
    """How the declaration names axis ``axis`` of ``out`` (``H_out``), else ``out[axis]``."""
    for pattern in s.spec.shape.outputs:
        if pattern.name == "out" and pattern.dims is not None and axis < len(pattern.dims):
            dim = pattern.dims[axis]
            if getattr(dim, "kind", None) == "symbol":
                return str(dim)
    return f"out[{axis}]"


def conv_relation(s) -> None:
    """Spatial extents of an ordinary convolution, forward exactly and backward as intervals;
    ``padding="same"`` keeps each extent. A required extent the equation misses fails naming the
    padding or stride that gives it."""
    check_groups(s)
    args = s.args
    if args["padding"] == "same":
        _same_extents(s, SPATIAL_AXES)
        return
    window_relation(s, spatial_windows(args["kernel_size"], args["stride"], args["padding"], args["dilation"]),
                    advise=("padding", "stride"))


def conv1d_relation(s) -> None:
    """The one length axis of [B, C, L], by the same equation as each axis of conv2d."""
    check_groups(s)
    args = s.args
    if args["padding"] == "same":
        _same_extents(s, (SIGNAL_AXIS,))
        return
    window_relation(s, ((SIGNAL_AXIS, args["kernel_size"], args["stride"], args["padding"], args["dilation"]),),
                    advise=("padding", "stride"))


def _same_extents(s, axes) -> None:
    """padding="same" at stride 1: each axis of out equals that axis of x, both ways."""
    if s.shape("x") is None or s.shape("out") is None:
        return
    for axis in axes:
        s.scale("out", axis, "x", axis)


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
