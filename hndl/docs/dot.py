"""A plan drawn as a Graphviz DOT digraph: nodes with their operation, edges with resolved shapes.

The same picture as :func:`hndl.docs.diagram.mermaid`, for tools that speak DOT (``dot -Tsvg``).
Graph keys are the plan's own references (``input:x``, ``node:n0``, ``output:y``), quoted, so a
node named like an input can never collide with it.
"""

from __future__ import annotations

from ..plan import ResolvedPlan, format_shape
from ..graph import Ref
from .diagram import node_edges


def _quote(text: str) -> str:
    """A DOT double-quoted string (ID or label); ``\\n`` stays a DOT line break."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _source_key(ref: str) -> str:
    """``input:x`` -> ``input:x``, ``node:n0/out`` -> ``node:n0``."""
    parsed = Ref.parse(ref)
    return ref if parsed.node is None else f"node:{parsed.node}"


def dot(plan: ResolvedPlan) -> str:
    """DOT text: one ellipse per input and output, one box per node, each edge labelled by its shape."""
    lines = ["digraph plan {", "    rankdir=LR;", '    node [fontname="Helvetica"];',
             '    edge [fontname="Helvetica", fontsize=10];']
    for item in plan.inputs:
        label = f"{item['name']}\n{format_shape(item['shape'])} {item['dtype']}"
        lines.append(f"    {_quote('input:' + item['name'])} [shape=ellipse, label={_quote(label)}];")
    for node in plan.nodes:
        lines.append(f"    {_quote('node:' + node.id)} [shape=box, label={_quote(f'{node.id}: {node.alias}')}];")
    for item in plan.outputs:
        label = f"{item['name']}\n{format_shape(item['shape'])}"
        lines.append(f"    {_quote('output:' + item['name'])} [shape=ellipse, label={_quote(label)}];")
    for ref, node_id, label in node_edges(plan):
        lines.append(f"    {_quote(_source_key(ref))} -> {_quote('node:' + node_id)} [label={_quote(label)}];")
    for item in plan.outputs:
        lines.append(f"    {_quote(_source_key(item['ref']))} -> {_quote('output:' + item['name'])}"
                     f" [label={_quote(format_shape(item['shape']))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["dot"]
