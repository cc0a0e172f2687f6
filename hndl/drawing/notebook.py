"""Jupyter's rich display of a plan: its diagram as inline SVG above its shape table.

A notebook calls ``_repr_html_`` while printing a cell's result, where an exception would hide
the result itself and a long wait would freeze the notebook, so a layout over budget (refused
before Graphviz starts), a renderer past ``notebook_timeout_seconds`` and drawing failures of
any kind all fall back to the table alone.
"""

from __future__ import annotations

import html
from dataclasses import replace
from typing import Any

from .draw import draw_plan
from .graphviz import current


def table_html(table: str) -> str:
    """The shape table as preformatted HTML."""
    return f'<pre class="hndl-shape-table">{html.escape(table)}</pre>'


def inline_svg(svg: bytes) -> str:
    """Graphviz SVG as an HTML fragment: the XML prolog, doctype and comments before ``<svg`` dropped."""
    text = svg.decode("utf-8")
    start = text.find("<svg")
    if start < 0:
        raise ValueError("Graphviz output holds no <svg> element")
    return text[start:].strip()


def diagram_html(plan: Any, table: str) -> str:
    """``plan``'s diagram above ``table``; the table alone when the diagram cannot be drawn quickly."""
    budget = current()
    budget = replace(budget, timeout_seconds=min(budget.timeout_seconds, budget.notebook_timeout_seconds))
    try:
        picture = inline_svg(draw_plan(plan, "svg", budget=budget))
    except Exception:  # noqa: BLE001 - a display hook must never raise; the table still shows the plan
        return table_html(table)
    return f'<div class="hndl-plan">{picture}\n{table_html(table)}</div>'


__all__ = ["diagram_html", "inline_svg", "table_html"]
