"""A plan drawn within the render budget: a layout Graphviz cannot draw quickly is refused before it starts.

The refusal reads the plan once (:func:`hndl.drawing.dot.layout_size`, linear in its size); what
passes is drawn by :func:`hndl.drawing.graphviz.render`, whose time, CPU and memory stay bounded.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import HNDLError
from .dot import layout_size, plan_dot
from .graphviz import SMALLER_REMEDY, RenderBudget, checked, current, render


def check_drawable(plan: Any, budget: Optional[RenderBudget] = None) -> None:
    """Raise E_RESOURCE naming ``max_layout_nodes`` when ``plan``'s layout is larger than ``budget``
    (default: :func:`hndl.drawing.graphviz.current`) allows."""
    budget = checked(budget) if budget is not None else current()
    size = layout_size(plan)
    if size > budget.max_layout_nodes:
        raise HNDLError(
            "E_RESOURCE",
            f"the plan's diagram needs {size} layout nodes ({len(plan.nodes)} plan nodes plus one for every rank "
            f"an edge crosses), above max_layout_nodes={budget.max_layout_nodes}; Graphviz's layout time grows "
            "much faster than that count",
            field="max_layout_nodes",
            remedies=(SMALLER_REMEDY,
                      f"raise the bound with hndl.drawing.graphviz.configure(max_layout_nodes={size}); the layout may "
                      "then take minutes, within timeout_seconds, cpu_seconds and memory_bytes"),
        )


def draw_plan(plan: Any, format: str = "svg", *, program: Optional[str] = None,
              budget: Optional[RenderBudget] = None) -> bytes:
    """``plan``'s diagram as ``format`` (``svg`` or ``png``) bytes, refused with E_RESOURCE before
    Graphviz starts when its layout is over budget (see :func:`check_drawable`)."""
    budget = budget or current()
    check_drawable(plan, budget)
    return render(plan_dot(plan), format, program=program, budget=budget)


__all__ = ["check_drawable", "draw_plan"]
