"""Shapes as text, ``[B, 3, 32, 32]``: one spelling for tables, diagrams and messages.

A leaf module (it imports nothing from HNDL), so the plan, its diagrams and the resolver can all
use it without importing each other.
"""

from __future__ import annotations

from typing import Iterable


def format_shape(shape: Iterable[object]) -> str:
    """``("B", 3, 32)`` -> ``[B, 3, 32]``."""
    return "[" + ", ".join(str(entry) for entry in shape) + "]"


__all__ = ["format_shape"]
