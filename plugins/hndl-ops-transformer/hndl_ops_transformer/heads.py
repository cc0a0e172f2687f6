"""The shared rules for operators that split the feature axis into attention heads."""

from __future__ import annotations

from typing import Optional

from hndl import HNDLError

#: The ports whose last axis is the model width D (other ports, such as an additive attention bias
#: or a rotary table, have other last axes).
WIDTH_PORTS = ("x", "out")


def heads_divide_width(s) -> None:
    """Fail with E_CONSTRAINT as soon as a known width D is not a multiple of ``heads``.

    Only the ``x`` and ``out`` ports carry the width D; an operator whose ``head_dim`` argument
    is given (not None) sets the head width itself and D need not divide.
    """
    heads = s.args["heads"]
    if s.args.get("head_dim") is not None:
        return
    for port in (*s.inputs, *s.outputs):
        if port not in WIDTH_PORTS:
            continue
        shape = s.shape(port)
        width = shape[-1] if shape else None
        if width is not None and width % heads:
            s.error(
                "E_CONSTRAINT",
                f"{s.spec.alias} splits the width D={width} of port {port!r} into heads={heads} equal "
                f"heads, but {width} is not divisible by {heads}",
            )


def check_heads(width: int, heads: int, head_dim: Optional[int] = None) -> int:
    """The per-head width, for a module constructed directly outside a resolved plan: ``head_dim``
    when given, else ``width / heads`` (E_CONSTRAINT when ``heads`` does not divide ``width``)."""
    if head_dim is not None:
        return head_dim
    if width % heads:
        raise HNDLError(
            "E_CONSTRAINT",
            f"the width D={width} is not divisible by heads={heads}",
            field="heads",
            remedies=("Choose heads that divides the feature width, or give head_dim= explicitly.",),
        )
    return width // heads
