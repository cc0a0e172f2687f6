"""The elementwise joins' shared rule: operands and result have exactly one shape, never broadcast.

add and mul declare ``x, y -> out`` and relate the three ports here rather than in a pattern, so
that shapes only a broadcast would fit (a ``[B, C]`` or ``[B, C, 1, 1]`` operand against a
``[B, C, H, W]`` map) fail with a remedy that names the declared per-channel operator, instead
of the pattern's bare disagreement. The facts added are those of the pattern
``x[B, ...], y[B, ...] -> out[B, ...]``: one rank, and every axis equal in both directions.
"""

from __future__ import annotations

from typing import Optional

from hndl import HNDLError
from hndl.shape_text import format_shape

#: The pairs of ports compared, operands first: the message names the pair that disagrees.
PAIRS = (("x", "y"), ("x", "out"), ("y", "out"))


def same_shape(s, alias: str, remedy: str) -> None:
    """Give ``x``, ``y`` and ``out`` one shape; a per-channel mismatch fails with ``remedy``.

    ``remedy`` names the declared per-channel operator; ``{wide}`` and ``{narrow}`` in it are
    replaced by the two shapes that disagree and ``{flatten}`` by the advice to flatten a
    ``[B, C, 1, 1]`` operand first (empty for a ``[B, C]`` one).
    """
    shapes = {port: s.shape(port) for port in ("x", "y", "out")}
    for first, second in PAIRS:
        if shapes[first] is not None and shapes[second] is not None:
            _refuse_broadcast(alias, first, shapes[first], second, shapes[second], remedy)
    s.equal("y", "x")
    s.equal("out", "x")


def _refuse_broadcast(alias: str, first: str, a: list, second: str, b: list, remedy: str) -> None:
    if len(a) == len(b) and all(p is None or q is None or p == q for p, q in zip(a[1:], b[1:])):
        return
    narrow_is_second = _per_channel(a, b)
    if narrow_is_second is None:
        return  # an ordinary disagreement: the equations report it with its derivation
    (narrow, small), (wide, large) = ((second, b), (first, a)) if narrow_is_second else ((first, a), (second, b))
    flatten = (f" (flatten() the {format_shape(small)} operand to [{small[0]}, {small[1]}] first)"
               if len(small) > 2 else "")
    if wide == "out":
        message = (f"{alias} gives out the shape of its operands, but port {narrow} is {format_shape(small)} "
                   f"and out must be {format_shape(large)}: joins never broadcast")
    else:
        message = (f"{alias} operands differ: port {first} is {format_shape(a)} and port {second} is "
                   f"{format_shape(b)}, and joins never broadcast")
    raise HNDLError(
        "E_CONSTRAINT",
        message,
        remedies=(
            remedy.format(wide=format_shape(large), narrow=format_shape(small), flatten=flatten),
            "Otherwise give both operands exactly the same shape.",
        ),
    )


def _per_channel(a: list, b: list) -> Optional[bool]:
    """True when ``b`` is the narrow one, False when ``a`` is, None when neither: the narrow shape
    agrees with the wide one on [B, C] and its further axes are all 1 or missing, while the wide
    one has further axes that are not all 1."""
    for narrow_is_b, (small, large) in ((True, (b, a)), (False, (a, b))):
        if len(large) < 3 or not 2 <= len(small) <= len(large):
            continue
        if large[1] is None or small[1] != large[1]:
            continue
        if any(entry != 1 for entry in small[2:]) or all(entry == 1 for entry in large[2:]):
            continue
        return narrow_is_b
    return None


def channel_spread(rank: int) -> tuple:
    """The index that lines a ``[B, C]`` tensor up with every position of a rank-``rank``
    ``[B, C, ...]`` tensor (``y[:, :, None, None]`` for rank 4): a constant, fixed when the node
    is built, so fx's symbolic tracer and torch.export record it as it is."""
    return (slice(None), slice(None)) + (None,) * (rank - 2)
