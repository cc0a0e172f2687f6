"""A plan as Mermaid flowchart text (``hndl graph -o plan.mmd``): nodes with their operation, edges with
resolved shapes. The documentation site and ``-o .svg/.png`` draw with Graphviz (:mod:`hndl.drawing`)."""

from __future__ import annotations

from ..drawing.dot import node_edges
from ..graph import Ref
from ..plan import ResolvedPlan, format_shape


def _node_key(ref: str) -> str:
    """``input:x`` -> ``in_x``, ``node:n0/out`` -> ``n0`` (Mermaid identifiers)."""
    parsed = Ref.parse(ref)
    return f"in_{parsed.port}" if parsed.node is None else parsed.node


def mermaid(plan: ResolvedPlan) -> str:
    """Mermaid ``flowchart TD`` (top-down: long chains stay readable) text: one box per input, node and
    output; each edge carries its shape."""
    lines = ["flowchart TD"]
    for item in plan.inputs:
        lines.append(f'    in_{item["name"]}(["{item["name"]} {format_shape(item["shape"])} {item["dtype"]}"])')
    lines += [f'    {node.id}["{node.id}: {node.alias}"]' for node in plan.nodes]
    lines += [f'    {_node_key(ref)} -- "{label}" --> {node_id}' for ref, node_id, label in node_edges(plan)]
    for item in plan.outputs:
        lines.append(f'    out_{item["name"]}(["{item["name"]} {format_shape(item["shape"])}"])')
        lines.append(f'    {_node_key(item["ref"])} --> out_{item["name"]}')
    return "\n".join(lines)
