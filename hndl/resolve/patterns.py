"""DSL patterns to facts: shared symbols, exact scales, literals, the ellipsis run and batch.

Applying a node's patterns is idempotent and only ever adds facts, so the solver may apply
them on every sweep, forward and backward, until nothing changes.
"""

from __future__ import annotations

from typing import Any, Optional

from ..declaration import OperatorSpec
from ..errors import HNDLError
from ..graph import Node
from ..shape_dsl import PortPattern
from .facts import Facts, TensorFacts


class NodeState:
    """The solver's working state for one node: its ports' tensors and its local symbols."""

    def __init__(
        self,
        node: Node,
        args: dict[str, Any],
        origins: dict[str, str],
        policy: Optional[str],
        inputs: dict[str, TensorFacts],
        outputs: dict[str, TensorFacts],
        facts: Facts,
    ) -> None:
        self.node = node
        self.spec: OperatorSpec = node.spec
        self.args = args
        self.origins = origins
        #: For each inferred argument, the facts it was derived from (kept in the plan's source).
        self.derivations: dict[str, tuple[str, ...]] = {}
        self.policy = policy
        self.inputs = inputs
        self.outputs = outputs
        self.facts = facts
        #: How this node signs the facts it adds (Facts.actor), so contradictions can blame it.
        self.actor = (f"node {node.id} ({node.spec.alias})", node.where())
        self.patterns = _expand_patterns(node.spec, tuple(inputs), tuple(outputs))
        self.symbols: dict[str, int] = {}
        self.batch = facts.new(f"{node.id}.B")
        self.ellipsis: Optional[list[int]] = None
        self._dim_args = {arg.dim: name for name, arg in node.spec.args.items() if arg.dim is not None}
        # What the patterns still have to contribute; once all empty the node's patterns are spent.
        self._pending_ports = {entry[0] for entry in self.patterns}
        # Patterned ports meet the node batch through their leading B entry already.
        patterned = {entry[0] for entry in self.patterns}
        self._pending_batch = (set(inputs) | set(outputs)) - patterned if node.spec.batch == "shared" else set()
        self._pending_args = dict(self._dim_args)

    def tensor(self, port: str) -> TensorFacts:
        return self.inputs[port] if port in self.inputs else self.outputs[port]

    def symbol(self, name: str) -> int:
        """The variable standing for a node-local shape symbol."""
        if name not in self.symbols:
            self.symbols[name] = self.facts.new(f"{self.node.id}.{name}")
        return self.symbols[name]

    def reason(self, port: str, text: str) -> str:
        return f"node {self.node.id} ({self.spec.alias}) {port}: {text}"


_EXPANSIONS: dict = {}


def _expand_patterns(spec: OperatorSpec, inputs: tuple, outputs: tuple) -> tuple:
    """(port, pattern, has ellipsis, pattern text) for every port the DSL constrains, cached per spec."""
    key = (spec, inputs, outputs)
    cached = _EXPANSIONS.get(key)
    if cached is not None:
        return cached
    patterns = []
    for declared, ports in ((spec.shape.inputs, inputs), (spec.shape.outputs, outputs)):
        by_name = {pattern.name: pattern for pattern in declared}
        for port in ports:
            pattern = by_name.get(port)
            if pattern is None and len(declared) == 1 and declared[0].variadic:
                pattern = declared[0]
            if pattern is not None and pattern.dims is not None:
                patterns.append((port, pattern, pattern.has_ellipsis, str(pattern)))
    result = tuple(patterns)
    if len(_EXPANSIONS) < 4096:
        _EXPANSIONS[key] = result
    return result


def apply_patterns(state: NodeState) -> None:
    """Add every fact the node's declared patterns imply about its ports."""
    if not (state._pending_ports or state._pending_batch or state._pending_args):
        return
    facts = state.facts
    if state.ellipsis is None:
        _settle_ellipsis(state)
    for port, pattern, has_ellipsis, text in state.patterns:
        if port not in state._pending_ports:
            continue
        if not has_ellipsis:
            rank = len(pattern.dims)
        elif state.ellipsis is not None:
            rank = len(pattern.dims) - 1 + len(state.ellipsis)
        else:
            continue
        tensor = state.tensor(port)
        tensor.set_rank(rank, state.reason(port, f"pattern {text}"))
        _apply_entries(state, port, pattern, text, tensor)
        state._pending_ports.discard(port)
    for port in tuple(state._pending_batch):
        tensor = state.tensor(port)
        if tensor.rank is not None:
            facts.equate(tensor.dims[0], state.batch, state.reason(port, "shares the node's batch"))
            state._pending_batch.discard(port)
    for symbol, name in tuple(state._pending_args.items()):
        if name in state.args:
            facts.set_value(
                state.symbol(symbol),
                state.args[name],
                f"node {state.node.id} ({state.spec.alias}) {name}={state.args[name]} ({state.origins[name]})",
            )
            del state._pending_args[symbol]


def _settle_ellipsis(state: NodeState) -> None:
    """Learn the length of the shared ``...`` run from any port whose rank is known."""
    for port, pattern, has_ellipsis, text in state.patterns:
        tensor = state.tensor(port)
        if not has_ellipsis or tensor.rank is None:
            continue
        length = tensor.rank - (len(pattern.dims) - 1)
        reason = state.reason(port, f"rank {tensor.rank} against pattern {text}")
        if length < 0:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{state.spec.alias} port {port!r} needs at least rank {len(pattern.dims) - 1}, got rank {tensor.rank}",
                chain=(tensor.rank_reason, reason),
            )
        if state.ellipsis is None:
            state.ellipsis = [state.facts.new(f"{state.node.id}....[{i}]") for i in range(length)]
            state.facts.version += 1
        elif len(state.ellipsis) != length:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{state.spec.alias} port {port!r} has rank {tensor.rank}, which does not match the "
                f"other ports sharing its '...' run",
                chain=(tensor.rank_reason, reason),
            )


def _apply_entries(state: NodeState, port: str, pattern: PortPattern, text: str, tensor: TensorFacts) -> None:
    facts = state.facts
    axis = 0
    for dim in pattern.dims:
        if dim.kind == "ellipsis":
            for var in state.ellipsis or ():
                facts.equate(tensor.dims[axis], var, state.reason(port, f"axis {axis} is part of '...'"))
                axis += 1
            continue
        reason = state.reason(port, f"axis {axis} is {dim} in {text}")
        if dim.kind == "batch":
            if state.spec.batch == "shared":
                facts.equate(tensor.dims[axis], state.batch, reason)
        elif dim.kind == "symbol":
            facts.equate(tensor.dims[axis], state.symbol(dim.symbol), reason, ratio=dim.scale)
        elif dim.kind == "literal":
            facts.set_value(tensor.dims[axis], dim.value, reason)
        axis += 1
