"""A plan drawn as a Mermaid flowchart: nodes with their operation, edges with resolved shapes."""

from __future__ import annotations

from ..graph import Ref
from ..plan import ResolvedPlan, format_shape


def node_edges(plan: ResolvedPlan) -> list[tuple[str, str, str]]:
    """``(source reference, node id, label)`` per node input; the label is the resolved shape,
    prefixed by the port name when the node reads several."""
    return [(ref, node.id, (f"{port} " if len(node.inputs) > 1 else "") + format_shape(node.input_shapes[port]))
            for node in plan.nodes for port, ref in node.inputs.items()]


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
