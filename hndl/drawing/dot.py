"""A plan as Graphviz DOT text: a top-down DAG of inputs, nodes and outputs with resolved shapes.

Every node is a box naming its id, its operator and the shape of each output port; every edge
is labelled with the shape that flows along it (prefixed by the reading port when the node reads
several, and by the producing port when its producer has several); named inputs sit on the top rank, named outputs on the bottom one. Graph keys are the
plan's own references (``input:x``, ``node:n0``, ``output:y``), quoted, so a node named like an
input can never collide with it. The plan is read through its public fields only (this module
must not import :mod:`hndl.plan`, whose ``_repr_html_`` uses it).
"""

from __future__ import annotations

import html
from typing import Any

from ..shape_text import format_shape

#: Graph, node and edge defaults: a white card (readable on light and dark pages), compact ranks.
_HEADER = (
    "digraph plan {",
    '    graph [rankdir=TB, bgcolor="white", pad=0.2, nodesep=0.4, ranksep=0.45, fontname="Helvetica"];',
    '    node [shape=box, style="rounded,filled", fillcolor="#eef2f8", color="#4a5f80", fontname="Helvetica",'
    ' fontsize=11, margin="0.15,0.06"];',
    '    edge [color="#5a6a80", fontcolor="#2b3440", fontname="Helvetica", fontsize=9];',
)
_INPUT_STYLE = 'shape=ellipse, fillcolor="#e3f2e3", color="#4f7f4f"'
_OUTPUT_STYLE = 'shape=ellipse, fillcolor="#f9eedb", color="#8a6a30"'


def quote(text: object) -> str:
    """A DOT double-quoted string (ID or label); a newline stays a DOT line break."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _html(text: object) -> str:
    """Text safe inside a DOT HTML-like label."""
    return html.escape(str(text), quote=True)


def source_key(ref: str) -> str:
    """The graph key that produces ``ref``: ``input:x`` stays, ``node:n0/out`` -> ``node:n0``."""
    return ref.split("/", 1)[0] if ref.startswith("node:") else ref


def node_edges(plan: Any) -> list[tuple[str, str, str]]:
    """``(source reference, node id, label)`` per node input; the label is the resolved shape,
    prefixed by the port name when the node reads several."""
    return [(ref, node.id, (f"{port} " if len(node.inputs) > 1 else "") + format_shape(node.input_shapes[port]))
            for node in plan.nodes for port, ref in node.inputs.items()]


def node_label(node: Any) -> str:
    """``<b>n0</b>: linear`` over one line per output port with its shape (the port named when
    there are several)."""
    ports = [(port, node.output_shapes[port]) for port in node.outputs]
    shapes = [(f"{_html(port)} " if len(ports) > 1 else "") + _html(format_shape(shape)) for port, shape in ports]
    rows = "".join(f'<br/><font point-size="10">{text}</font>' for text in shapes)
    return f"<<b>{_html(node.id)}</b>: {_html(node.alias)}{rows}>"


def plan_dot(plan: Any) -> str:
    """DOT text for ``plan`` (a :class:`~hndl.plan.ResolvedPlan`): render it with
    :func:`hndl.drawing.graphviz.render`."""
    lines = list(_HEADER)
    inputs = []
    for item in plan.inputs:
        label = f"<<b>{_html(item['name'])}</b><br/>{_html(format_shape(item['shape']))} {_html(item['dtype'])}>"
        lines.append(f"    {quote('input:' + item['name'])} [{_INPUT_STYLE}, label={label}];")
        inputs.append(quote("input:" + item["name"]))
    for node in plan.nodes:
        lines.append(f"    {quote('node:' + node.id)} [label={node_label(node)}];")
    outputs = []
    for item in plan.outputs:
        label = f"<<b>{_html(item['name'])}</b><br/>{_html(format_shape(item['shape']))}>"
        lines.append(f"    {quote('output:' + item['name'])} [{_OUTPUT_STYLE}, label={label}];")
        outputs.append(quote("output:" + item["name"]))
    lines.append("    { rank=min; " + " ".join(f"{key};" for key in inputs) + " }")
    lines.append("    { rank=max; " + " ".join(f"{key};" for key in outputs) + " }")
    several = {f"node:{node.id}" for node in plan.nodes if len(node.outputs) > 1}
    for ref, node_id, label in node_edges(plan):
        source = source_key(ref)
        if source in several:  # name the producing port too: "first → x [B, 2]"
            label = f"{ref.split('/', 1)[1]} \u2192 {label}"
        lines.append(f"    {quote(source)} -> {quote('node:' + node_id)} [label={quote(label)}];")
    for item in plan.outputs:
        lines.append(f"    {quote(source_key(item['ref']))} -> {quote('output:' + item['name'])}"
                     f" [label={quote(format_shape(item['shape']))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def drawn_edges(plan: Any) -> list[tuple[str, str]]:
    """``(source key, target key)`` for every edge :func:`plan_dot` draws: node inputs, then outputs."""
    edges = [(source_key(ref), "node:" + node.id) for node in plan.nodes for ref in node.inputs.values()]
    return edges + [(source_key(item["ref"]), "output:" + item["name"]) for item in plan.outputs]


def layout_size(plan: Any) -> int:
    """How many nodes Graphviz's ``dot`` lays out for :func:`plan_dot`: one per input, node and
    output, plus one "virtual" node for every rank an edge passes without ending there.

    Layout time grows with this count far faster than with the plan's node count (a chain of
    1,000 nodes counts 1,002 and lays out in 0.1 s; 200 ``relu(x)`` branches joined by a chain of
    ``add``s count 20,103 and took over a minute), so drawings are bounded by it. Ranks are
    longest-path ranks with the outputs on the last one, as :func:`plan_dot` asks: never fewer
    crossings than dot's own ranking keeps. Linear in the plan's size.
    """
    keys = ["input:" + item["name"] for item in plan.inputs] + ["node:" + node.id for node in plan.nodes]
    outputs = ["output:" + item["name"] for item in plan.outputs]
    edges = drawn_edges(plan)
    rank = longest_path_ranks(keys + outputs, edges)
    bottom = max(rank.values(), default=0)
    rank.update(dict.fromkeys(outputs, bottom))  # { rank=max; outputs }
    crossed = sum(max(rank.get(target, 0) - rank.get(source, 0) - 1, 0) for source, target in edges)
    return len(keys) + len(outputs) + crossed


def longest_path_ranks(keys: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Each key's rank: 0 for a key nothing points to, else one below its lowest predecessor (a
    topological sweep; keys on a cycle, which a plan never has, keep rank 0)."""
    successors: dict[str, list[str]] = {key: [] for key in keys}
    waiting = dict.fromkeys(keys, 0)
    for source, target in edges:
        successors.setdefault(source, []).append(target)
        waiting.setdefault(source, 0)
        waiting[target] = waiting.get(target, 0) + 1
    rank = dict.fromkeys(waiting, 0)
    ready = [key for key, count in waiting.items() if count == 0]
    while ready:
        key = ready.pop()
        for target in successors.get(key, ()):
            rank[target] = max(rank[target], rank[key] + 1)
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    return rank


__all__ = ["plan_dot", "node_edges", "node_label", "quote", "source_key", "drawn_edges", "layout_size",
           "longest_path_ranks"]
