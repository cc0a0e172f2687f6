"""plan.describe() and plan.diff(): provenance you can read, and why two plans differ (§13).

``describe`` adds to the shape table the semantic digest and, per node, each argument's value,
origin and derivation plus the canonical initialization and trainability records.
``diff`` lists every node and field that differs between two separately resolved plans,
with the origin of each value on both sides, so "why did this width change?" has an answer.
Both show a restored plan's text (policy names, derivations) with control characters escaped,
so printing them never acts on the terminal and no value forges a line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from .errors import HNDLError, escaped
from .plan_tables import shape_table
from .plan_values import thaw

NODE_FIELDS = ("op", "inputs", "outputs", "input_shapes", "output_shapes", "initialization", "trainability")


def _text(value: Any) -> str:
    return json.dumps(thaw(value), sort_keys=True, ensure_ascii=False)


def describe(plan, registry=None) -> str:
    """The text of ``ResolvedPlan.describe()`` for ``plan``.

    A node whose operator declares optional input ports it leaves unbound names them; the
    declarations come from ``registry``, else the active registry, else the built-in packs (a
    node whose identity none of them holds is described without that line).
    """
    lines = [shape_table(plan), "", escaped(f"semantic digest: {plan.semantic_digest}")]
    declared = _declarations(registry)
    for node in plan.nodes:
        lines.append(escaped(f"node {node.id} ({node.op})"))
        entries = {name: escaped(f"{name} = {value!r}") for name, value in node.args.items()}
        width = max(map(len, entries.values()), default=0)
        derivations = node.source.get("derivations", {})
        for name, entry in entries.items():
            line = f"  {entry.ljust(width)}  {escaped(node.provenance[name])}"
            if name in derivations:
                line += "  <- " + escaped("; ".join(derivations[name]))
            lines.append(line)
        unbound = _unbound_optional(declared, node)
        if unbound:
            lines.append(escaped(f"  unbound optional ports: {', '.join(unbound)}"))
        if node.source.get("policy"):
            lines.append(f"  policy: {escaped(node.source['policy'])}")
        lines.append(f"  initialization: {escaped(_text(node.initialization))}")
        lines.append(f"  trainability: {escaped(_text(node.trainability))}")
    return "\n".join(lines)


def _declarations(registry):
    """A lookup from identity to declaration (None when the identity is unknown)."""
    if registry is None:
        from .registry import Registry, active_registry

        registry = active_registry()
        if registry is None:
            try:
                registry = Registry.builtins()
            except HNDLError:  # a pack that fails to load costs the describe text this one line
                return lambda identity: None

    def lookup(identity: str):
        try:
            return registry.by_identity(identity)
        except HNDLError:
            return None

    return lookup


def _unbound_optional(declared, node) -> tuple[str, ...]:
    """The optional input ports ``node``'s operator declares and the node leaves unbound."""
    spec = declared(node.op)
    if spec is None or not spec.optional_inputs:
        return ()
    return tuple(port for port in spec.input_ports() if port in spec.optional_inputs and port not in node.inputs)


@dataclass(frozen=True)
class PlanChange:
    """One difference: a node (or None for the plan itself), a field, both values and origins."""

    node: Optional[str]
    field: str
    before: Any
    after: Any
    origin_before: Optional[str] = None
    origin_after: Optional[str] = None

    def __str__(self) -> str:
        where = f"{self.node}.{self.field}" if self.node else self.field
        before = _side(self.before, self.origin_before)
        after = _side(self.after, self.origin_after)
        return escaped(f"{where}: {before} -> {after}")


def _side(value: Any, origin: Optional[str]) -> str:
    text = "(absent)" if value is _ABSENT else _text(value)
    return f"{text} ({origin})" if origin else text


_ABSENT = object()


class PlanDiff(tuple):
    """The changes between two plans; prints one change per line."""

    def __str__(self) -> str:
        return "\n".join(str(change) for change in self) if self else "no differences"


def diff(plan, other) -> PlanDiff:
    """The changes from ``plan`` to ``other`` (two ResolvedPlans), as ``ResolvedPlan.diff`` returns them."""
    changes = []
    for field, value, other_value in (
        ("dtype", plan.dtype, other.dtype),
        ("inputs", plan.inputs, other.inputs),
        ("outputs", plan.outputs, other.outputs),
    ):
        if thaw(value) != thaw(other_value):
            changes.append(PlanChange(None, field, value, other_value))
    mine = {node.id: node for node in plan.nodes}
    theirs = {node.id: node for node in other.nodes}
    for node_id in [*mine, *(node_id for node_id in theirs if node_id not in mine)]:
        left, right = mine.get(node_id), theirs.get(node_id)
        if left is None or right is None:
            changes.append(PlanChange(node_id, "node", left.op if left else _ABSENT, right.op if right else _ABSENT))
            continue
        for name in dict.fromkeys([*left.args, *right.args]):
            before, after = left.args.get(name, _ABSENT), right.args.get(name, _ABSENT)
            if thaw(before) != thaw(after) or left.provenance.get(name) != right.provenance.get(name):
                changes.append(PlanChange(node_id, f"args.{name}", before, after,
                                          left.provenance.get(name), right.provenance.get(name)))
        for field in NODE_FIELDS:
            if thaw(getattr(left, field)) != thaw(getattr(right, field)):
                changes.append(PlanChange(node_id, field, getattr(left, field), getattr(right, field)))
        if left.source.get("policy") != right.source.get("policy"):
            changes.append(PlanChange(node_id, "policy", left.source.get("policy"), right.source.get("policy")))
    return PlanDiff(changes)


__all__ = ["describe", "diff", "PlanChange", "PlanDiff"]
