"""The shared rule for operators that split the feature axis into attention heads."""

from __future__ import annotations

from hndl import HNDLError


def heads_divide_width(s) -> None:
    """Fail with E_CONSTRAINT as soon as a known width D is not a multiple of ``heads``."""
    heads = s.args["heads"]
    for port in (*s.inputs, *s.outputs):
        shape = s.shape(port)
        width = shape[-1] if shape else None
        if width is not None and width % heads:
            s.error(
                "E_CONSTRAINT",
                f"{s.spec.alias} splits the width D={width} of port {port!r} into heads={heads} equal "
                f"heads, but {width} is not divisible by {heads}",
            )


def check_heads(width: int, heads: int) -> int:
    """The per-head width, for a module constructed directly outside a resolved plan."""
    if width % heads:
        raise HNDLError(
            "E_CONSTRAINT",
            f"the width D={width} is not divisible by heads={heads}",
            field="heads",
            remedies=("Choose heads that divides the feature width.",),
        )
    return width // heads
