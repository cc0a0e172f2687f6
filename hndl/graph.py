"""The author graph both frontends produce, its structural validation and execution order (§4).

Nodes keep the author's explicit arguments untouched; normalization and inference happen in
the resolver. Validation rejects duplicate ids, dangling references, undeclared or missing
ports, cycles, dead nodes and unread inputs, then orders nodes topologically, breaking ties
by declaration order.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .contracts import Contracts
from .declaration import OperatorSpec
from .errors import HNDLError

NODE_ID = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class Ref:
    """A tensor of the graph: an external input, or one output port of a node."""

    node: Optional[str]  # None for an external input
    port: str

    def __str__(self) -> str:
        return f"input:{self.port}" if self.node is None else f"node:{self.node}/{self.port}"

    @classmethod
    def parse(cls, text: str) -> "Ref":
        if isinstance(text, str):
            if text.startswith("input:") and text[6:]:
                return cls(None, text[6:])
            if text.startswith("node:") and text.count("/") == 1:
                node, port = text[5:].split("/")
                if node and port:
                    return cls(node, port)
        raise HNDLError("E_BINDING", f"malformed reference {text!r}; use input:<name> or node:<id>/<port>")


@dataclass
class Node:
    """One operator call as the author wrote it."""

    id: str
    spec: OperatorSpec
    args: dict[str, Any]  # explicit author arguments, not yet normalized
    inputs: dict[str, Ref]  # port -> producer; an unbound optional port is absent
    outputs: tuple[str, ...]
    policy: Optional[str] = None
    init: Any = None  # normalized initialization record, or None for the default
    trainable: Any = None  # normalized trainability record, or None for the default
    line: Optional[int] = None
    column: Optional[int] = None

    def where(self) -> dict[str, Any]:
        """Location keywords for an HNDLError about this node."""
        return {"node": self.id, "line": self.line, "column": self.column}


@dataclass
class Graph:
    """External contracts, nodes in declaration order, and the selected public outputs."""

    contracts: Contracts
    nodes: list[Node]
    outputs: dict[str, Ref]
    frontend: str
    provenance: Mapping[str, Any] = field(default_factory=dict)


def execution_order(graph: Graph, *, max_nodes: int, max_edges: int) -> list[Node]:
    """Validate the graph structure and return its nodes in stable topological order."""
    nodes = graph.nodes
    if len(nodes) > max_nodes:
        raise HNDLError(
            "E_RESOURCE",
            f"the graph has {len(nodes)} nodes, above max_nodes={max_nodes}",
            remedies=("Shrink the graph or raise limits['max_nodes'].",),
        )
    edges = sum(len(node.inputs) for node in nodes)
    if edges > max_edges:
        raise HNDLError(
            "E_RESOURCE",
            f"the graph has {edges} edges, above max_edges={max_edges}",
            remedies=("Shrink the graph or raise limits['max_edges'].",),
        )
    index = _index_nodes(nodes)
    inputs = set(graph.contracts.input_names)
    for node in nodes:
        _check_ports(node)
        for port, ref in node.inputs.items():
            _check_ref(ref, nodes, index, inputs, f"input {port!r} of node {node.id!r}", node.where())
    _check_outputs(graph, nodes, index, inputs)
    order = _topological(nodes, index)
    _check_reachability(graph, index)
    return order


def _index_nodes(nodes: list[Node]) -> dict[str, int]:
    index: dict[str, int] = {}
    for position, node in enumerate(nodes):
        if not isinstance(node.id, str) or not NODE_ID.match(node.id):
            raise HNDLError(
                "E_NAME", f"node id {node.id!r} must match [a-z][a-z0-9_]*", **node.where(),
                remedies=("Use a lowercase identifier such as 'hidden'.",),
            )
        if node.id in index:
            raise HNDLError(
                "E_NAME",
                f"node id {node.id!r} is used twice",
                **node.where(),
                remedies=("Give every node its own name=.",),
            )
        index[node.id] = position
    return index


def _check_ports(node: Node) -> None:
    declared = node.spec.input_ports(len(node.inputs)) if node.spec.shape.variadic_input else node.spec.input_ports()
    for port in node.inputs:
        if port not in declared:
            raise HNDLError(
                "E_BINDING",
                f"{node.spec.alias} has no input port {port!r} (ports: {', '.join(declared)})",
                **node.where(),
            )
    optional = node.spec.optional_inputs
    for port in declared:
        if port not in node.inputs and port not in optional:
            raise HNDLError(
                "E_BINDING",
                f"{node.spec.alias} needs its input port {port!r} bound",
                **node.where(),
                remedies=(f"Pass a tensor for {port!r} explicitly.",),
            )


def _check_outputs(graph: Graph, nodes: list[Node], index: dict[str, int], inputs: set[str]) -> None:
    """Every declared public output selects exactly one existing tensor, and nothing else is selected."""
    declared = graph.contracts.output_names
    for name in declared:
        if name not in graph.outputs:
            raise HNDLError("E_OUTPUT", f"public output {name!r} selects no tensor", field=name)
    for name, ref in graph.outputs.items():
        if name not in declared:
            raise HNDLError(
                "E_OUTPUT", f"{name!r} is not a declared output ({', '.join(declared)})", field=name,
            )
        _check_ref(ref, nodes, index, inputs, f"public output {name!r}", {"field": name})


def _check_ref(
    ref: Ref, nodes: list[Node], index: dict[str, int], inputs: set[str], what: str, where: Mapping[str, Any]
) -> None:
    """``ref`` names a declared input, or an output port an existing node declares."""
    if ref.node is None:
        if ref.port not in inputs:
            raise HNDLError("E_BINDING", f"{what} reads undeclared input {ref.port!r}", **where)
        return
    if ref.node not in index:
        raise HNDLError("E_BINDING", f"{what} reads unknown node {ref.node!r}", **where)
    producer = nodes[index[ref.node]]
    if ref.port not in producer.outputs:
        raise HNDLError(
            "E_BINDING",
            f"{what} reads {ref}, but {producer.id!r} has outputs {', '.join(producer.outputs)}",
            **where,
        )


def _topological(nodes: list[Node], index: dict[str, int]) -> list[Node]:
    waiting = [0] * len(nodes)
    consumers: list[list[int]] = [[] for _ in nodes]
    for position, node in enumerate(nodes):
        producers = {index[ref.node] for ref in node.inputs.values() if ref.node is not None}
        for producer in producers:
            consumers[producer].append(position)
        waiting[position] = len(producers)
    ready = [position for position, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        position = heapq.heappop(ready)
        order.append(nodes[position])
        for consumer in consumers[position]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, consumer)
    if len(order) != len(nodes):
        stuck = [node.id for node, count in zip(nodes, waiting) if count]
        raise HNDLError(
            "E_BINDING",
            f"the graph contains a cycle through {', '.join(stuck)}",
            node=stuck[0],
            remedies=("Break the cycle; every node must read only tensors computed before it.",),
        )
    return order


def _check_reachability(graph: Graph, index: dict[str, int]) -> None:
    live: set[str] = set()
    read_inputs: set[str] = set()
    stack = list(graph.outputs.values())
    while stack:
        ref = stack.pop()
        if ref.node is None:
            read_inputs.add(ref.port)
            continue
        if ref.node in live:
            continue
        live.add(ref.node)
        stack.extend(graph.nodes[index[ref.node]].inputs.values())
    for node in graph.nodes:
        if node.id not in live:
            raise HNDLError(
                "E_BINDING",
                f"node {node.id!r} ({node.spec.alias}) reaches no selected output",
                **node.where(),
                remedies=("Remove the node, or use its result on the way to an output.",),
            )
    for name in graph.contracts.input_names:
        if name not in read_inputs:
            raise HNDLError(
                "E_BINDING",
                f"declared input {name!r} is never read and is not selected as an output",
                field=name,
                remedies=(f"Read {name!r} in the graph, or remove it from input_shape.",),
            )
