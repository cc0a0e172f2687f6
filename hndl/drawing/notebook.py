"""Jupyter's rich display of a plan: its diagram as inline SVG above its shape table.

A notebook calls ``_repr_html_`` while printing a cell's result, where an exception would hide
the result itself, so drawing failures of any kind fall back to the table alone.
"""

from __future__ import annotations

import html
from typing import Any

from .dot import plan_dot
from .graphviz import render

#: A notebook repr must stay interactive: give up on the picture well before a user would wait.
NOTEBOOK_TIMEOUT_SECONDS = 10.0


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
    """``plan``'s diagram above ``table``; the table alone when the diagram cannot be drawn."""
    try:
        picture = inline_svg(render(plan_dot(plan), "svg", timeout=NOTEBOOK_TIMEOUT_SECONDS))
    except Exception:  # noqa: BLE001 - a display hook must never raise; the table still shows the plan
        return table_html(table)
    return f'<div class="hndl-plan">{picture}\n{table_html(table)}</div>'


__all__ = ["diagram_html", "inline_svg", "table_html", "NOTEBOOK_TIMEOUT_SECONDS"]
