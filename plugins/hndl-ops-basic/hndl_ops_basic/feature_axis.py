"""The shared rule for operators that act on the last axis of rank-2 and rank-3 tensors (§6)."""

from __future__ import annotations

FEATURE_RANKS = (2, 3)


def feature_axis_only(s) -> None:
    """Reject rank-4 inputs instead of flattening them implicitly."""
    for port in (*s.inputs, *s.outputs):
        shape = s.shape(port)
        if shape is not None and len(shape) not in FEATURE_RANKS:
            s.error(
                "E_CONSTRAINT",
                f"{s.spec.alias} acts on the last axis of [B, F] or [B, T, D] tensors, but port "
                f"{port!r} has rank {len(shape)}; HNDL never flattens implicitly",
            )
