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
from .facts import Facts, Mark, TensorFacts


class NodeState:
    """The solver's working state for one node: its ports' tensors and its local symbols."""

    __slots__ = ("node", "spec", "args", "origins", "derivations", "policy", "inputs", "outputs", "facts",
                 "actor", "patterns", "symbols", "batch", "ellipsis", "dim_args", "_pending_ports",
                 "_pending_batch", "_pending_args", "_prefixes", "mark", "spent")

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
        spec = node.spec
        self.node = node
        self.spec: OperatorSpec = spec
        self.args = args
        self.origins = origins
        #: For each inferred argument, the facts it was derived from (kept in the plan's source).
        self.derivations: dict[str, tuple[str, ...]] = {}
        self.policy = policy
        self.inputs = inputs
        self.outputs = outputs
        self.facts = facts
        #: How this node signs the facts it adds (Facts.actor), so contradictions can blame it.
        self.actor = (f"node {node.id} ({spec.alias})", {"node": node.id, "line": node.line, "column": node.column})
        layout = _layout(spec, tuple(inputs), tuple(outputs))
        self.patterns = layout.patterns
        self.symbols: dict[str, int] = {}
        self.batch = facts.new(f"{node.id}.B")
        self.ellipsis: Optional[list[int]] = None
        self.dim_args = spec.dim_args
        # What the patterns still have to contribute; once all empty the node's patterns are spent.
        self._pending_ports = set(layout.patterned)
        # Patterned ports meet the node batch through their leading B entry already.
        self._pending_batch = set(layout.unpatterned_batch)
        self._pending_args = dict(self.dim_args) if self.dim_args else {}
        self._prefixes: dict[str, str] = {}
        #: Dirty when something this node reads (a port's rank or rendering, its own arguments)
        #: changed since it was last applied; the sweep applies only dirty nodes.
        self.mark = mark = Mark()
        #: Set once applying the node can add nothing more: its patterns are spent and it has no relation.
        self.spent = False
        for tensor in (*inputs.values(), *outputs.values()):
            readers = tensor.watch.readers
            if not readers or readers[-1] is not mark:  # a tensor on several ports is read once
                readers.append(mark)

    def tensor(self, port: str) -> TensorFacts:
        return self.inputs[port] if port in self.inputs else self.outputs[port]

    def symbol(self, name: str) -> int:
        """The variable standing for a node-local shape symbol."""
        if name not in self.symbols:
            self.symbols[name] = self.facts.new(f"{self.node.id}.{name}")
        return self.symbols[name]

    def reason(self, port: str, text: str) -> str:
        return self.prefix(port) + text

    def prefix(self, port: str) -> str:
        """``node <id> (<alias>) <port>: ``, the start of every pattern reason, built once per port."""
        prefix = self._prefixes.get(port)
        if prefix is None:
            prefix = self._prefixes[port] = f"node {self.node.id} ({self.spec.alias}) {port}: "
        return prefix

    def patterns_pending(self) -> bool:
        """Whether the declared patterns still have facts to add."""
        return bool(self._pending_ports or self._pending_batch or self._pending_args)


class CompiledPort:
    """One port's declared pattern, with the text of every reason it gives precomputed."""

    __slots__ = ("port", "pattern", "has_ellipsis", "text", "rank_text", "fixed", "_entries")

    def __init__(self, port: str, pattern: PortPattern) -> None:
        self.port = port
        self.pattern = pattern
        self.has_ellipsis = pattern.has_ellipsis
        self.text = str(pattern)
        self.rank_text = f"pattern {self.text}"
        #: The number of entries besides the ``...`` run (the rank when there is none).
        self.fixed = len(pattern.dims) - 1 if self.has_ellipsis else len(pattern.dims)
        self._entries: dict[int, tuple] = {}

    def entries(self, run: int) -> tuple:
        """(kind, axis, payload, reason text) per axis once the ``...`` run has ``run`` axes."""
        cached = self._entries.get(run)
        if cached is not None:
            return cached
        entries = []
        axis = 0
        for dim in self.pattern.dims:
            if dim.kind == "ellipsis":
                for index in range(run):
                    entries.append(("ellipsis", axis, index, f"axis {axis} is part of '...'"))
                    axis += 1
                continue
            text = f"axis {axis} is {dim} in {self.text}"
            if dim.kind == "batch":
                entries.append(("batch", axis, None, text))
            elif dim.kind == "symbol":
                entries.append(("symbol", axis, (dim.symbol, dim.scale), text))
            elif dim.kind == "literal":
                entries.append(("literal", axis, dim.value, text))
            axis += 1
        result = self._entries[run] = tuple(entries)
        return result


class _Layout:
    """What a declaration's patterns say about one binding of port names, shared by its nodes."""

    __slots__ = ("patterns", "patterned", "unpatterned_batch")

    def __init__(self, spec: OperatorSpec, inputs: tuple, outputs: tuple) -> None:
        patterns = []
        for declared, ports in ((spec.shape.inputs, inputs), (spec.shape.outputs, outputs)):
            by_name = {pattern.name: pattern for pattern in declared}
            for port in ports:
                pattern = by_name.get(port)
                if pattern is None and len(declared) == 1 and declared[0].variadic:
                    pattern = declared[0]
                if pattern is not None and pattern.dims is not None:
                    patterns.append(CompiledPort(port, pattern))
        self.patterns = tuple(patterns)
        self.patterned = frozenset(entry.port for entry in patterns)
        self.unpatterned_batch = (
            frozenset((*inputs, *outputs)) - self.patterned if spec.batch == "shared" else frozenset()
        )


_LAYOUTS: dict = {}


def _layout(spec: OperatorSpec, inputs: tuple, outputs: tuple) -> _Layout:
    """The layout of ``spec`` for these port names, compiled once."""
    key = (spec, inputs, outputs)
    cached = _LAYOUTS.get(key)
    if cached is None:
        cached = _Layout(spec, inputs, outputs)
        if len(_LAYOUTS) < 4096:
            _LAYOUTS[key] = cached
    return cached


def apply_patterns(state: NodeState) -> None:
    """Add every fact the node's declared patterns imply about its ports."""
    if not (state._pending_ports or state._pending_batch or state._pending_args):
        return
    facts = state.facts
    if state.ellipsis is None:
        _settle_ellipsis(state)
    for entry in state.patterns:
        port = entry.port
        if port not in state._pending_ports:
            continue
        if not entry.has_ellipsis:
            rank = entry.fixed
        elif state.ellipsis is not None:
            rank = entry.fixed + len(state.ellipsis)
        else:
            continue
        tensor = state.tensor(port)
        prefix = state.prefix(port)
        tensor.set_rank(rank, prefix + entry.rank_text)
        _apply_entries(state, prefix, entry, tensor)
        state._pending_ports.discard(port)
    for port in tuple(state._pending_batch):
        tensor = state.tensor(port)
        if tensor.rank is not None:
            facts.equate(tensor.dims[0], state.batch, state.reason(port, "shares the node's batch"))
            state._pending_batch.discard(port)
    for symbol, name in tuple(state._pending_args.items()):
        if name in state.args:
            facts.set_value(state.symbol(symbol), state.args[name], argument_reason(state, name))
            del state._pending_args[symbol]


def argument_reason(state: NodeState, name: str) -> str:
    """The fact a dimension-bound argument adds: ``node n2 (linear) out_features=100 (explicit)``.
    Remedies find an author's literal in a contradiction's chain by this exact text."""
    return f"node {state.node.id} ({state.spec.alias}) {name}={state.args[name]} ({state.origins[name]})"


def _settle_ellipsis(state: NodeState) -> None:
    """Learn the length of the shared ``...`` run from any port whose rank is known."""
    for entry in state.patterns:
        tensor = state.tensor(entry.port)
        if not entry.has_ellipsis or tensor.rank is None:
            continue
        length = tensor.rank - entry.fixed
        if length < 0:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{state.spec.alias} port {entry.port!r} needs at least rank {entry.fixed}, got rank {tensor.rank}",
                chain=(tensor.rank_reason, _rank_reason(state, entry, tensor)),
            )
        if state.ellipsis is None:
            state.ellipsis = [state.facts.new(f"{state.node.id}....[{i}]") for i in range(length)]
            state.facts.version += 1
        elif len(state.ellipsis) != length:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{state.spec.alias} port {entry.port!r} has rank {tensor.rank}, which does not match the "
                f"other ports sharing its '...' run",
                chain=(tensor.rank_reason, _rank_reason(state, entry, tensor)),
            )


def _rank_reason(state: NodeState, entry: CompiledPort, tensor: TensorFacts) -> str:
    return state.reason(entry.port, f"rank {tensor.rank} against pattern {entry.text}")


def _apply_entries(state: NodeState, prefix: str, entry: CompiledPort, tensor: TensorFacts) -> None:
    facts = state.facts
    dims = tensor.dims
    shared = state.spec.batch == "shared"
    for kind, axis, payload, text in entry.entries(len(state.ellipsis) if entry.has_ellipsis else 0):
        if kind == "ellipsis":
            facts.equate(dims[axis], state.ellipsis[payload], prefix + text)
        elif kind == "batch":
            if shared:
                facts.equate(dims[axis], state.batch, prefix + text)
        elif kind == "symbol":
            facts.equate(dims[axis], state.symbol(payload[0]), prefix + text, ratio=payload[1])
        else:
            facts.set_value(dims[axis], payload, prefix + text)
