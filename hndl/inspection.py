"""plan.describe() and plan.diff(): provenance you can read, and why two plans differ (§13).

``describe`` adds to the shape table the semantic digest and, per node, each argument's value,
origin and derivation plus the canonical initialization and trainability records.
``diff`` lists every node and field that differs between two separately resolved plans,
with the origin of each value on both sides, so "why did this width change?" has an answer.
Both show a restored plan's text (policy names, derivations) with control characters escaped,
so printing them never acts on the terminal and no value forges a line.

``describe`` fits its argument lines to ``WIDTH`` (100) columns (issue 30 item 12): a derivation
chain, which can run to thousands of characters, continues on lines indented under its first
fact (a hanging indent), broken between facts where a whole fact fits and between words where
one does not; an argument whose value is very long does not widen the alignment of the others.
The machine-readable parts keep their form: the shape table, the digest line and the
initialization and trainability records (one JSON document per line) are never wrapped, and
``source["derivations"]`` holds every fact unchanged.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any, Optional

from .errors import HNDLError, escaped
from .plan_tables import shape_table
from .plan_values import thaw

NODE_FIELDS = ("op", "inputs", "outputs", "input_shapes", "output_shapes", "initialization", "trainability")

#: The columns describe() fits an argument line into (wrapping derivations with a hanging indent).
WIDTH = 100
#: Arguments whose "name = value" text is longer than this are left out of the column alignment,
#: so one long value does not push every other argument's origin off the line.
_ALIGNED = 40
#: The deepest hanging indent of a wrapped derivation; an argument whose "<- " sits further right
#: continues at ``_FALLBACK_INDENT`` columns instead, leaving room to read.
_DEEPEST_INDENT = 52
_FALLBACK_INDENT = 6


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
        width = max((len(entry) for entry in entries.values() if len(entry) <= _ALIGNED), default=0)
        derivations = node.source.get("derivations", {})
        for name, entry in entries.items():
            head = f"  {entry.ljust(width)}  {escaped(node.provenance[name])}"
            lines += _argument_lines(head, [escaped(fact) for fact in derivations.get(name, ())])
        unbound = _unbound_optional(declared, node)
        if unbound:
            lines += _wrapped(escaped(f"  unbound optional ports: {', '.join(unbound)}"), 4)
        if node.source.get("policy"):
            lines += _wrapped(f"  policy: {escaped(node.source['policy'])}", 4)
        lines.append(f"  initialization: {escaped(_text(node.initialization))}")
        lines.append(f"  trainability: {escaped(_text(node.trainability))}")
    return "\n".join(lines)


def _wrapped(text: str, indent: int) -> list[str]:
    """``text`` in lines of at most ``WIDTH`` columns, broken at spaces (inside a word only when the
    word alone is wider), every line after the first indented by ``indent``; the first line keeps
    its own leading indent and the spaces inside a line are kept as they are."""
    if len(text) <= WIDTH:
        return [text]
    return textwrap.wrap(text, width=WIDTH, subsequent_indent=" " * indent, break_long_words=True,
                         break_on_hyphens=False) or [text]


def _argument_lines(head: str, facts: list[str]) -> list[str]:
    """One argument: ``head`` (name, value, origin) and, when it was derived, ``<-`` and its
    facts joined by "; ", in lines of at most ``WIDTH`` columns.

    Continuation lines start under the first fact (``_FALLBACK_INDENT`` columns in, when that
    column is right of ``_DEEPEST_INDENT``). Facts are packed whole into lines; a fact that does
    not fit where it would start is broken between words, never inside a bracket
    (``out[B, C_out, H_out, W_out]`` stays on one line) unless a bracket alone is wider.
    """
    if not facts:
        return _wrapped(head, _FALLBACK_INDENT)
    *lines, first = _wrapped(head + "  <-", _FALLBACK_INDENT)
    indent = len(first) + 1 if not lines and len(first) + 1 <= _DEEPEST_INDENT else _FALLBACK_INDENT
    packed = _Lines(lines, first + " ", " " * indent)
    for index, fact in enumerate(facts):
        packed.add(fact + (";" if index < len(facts) - 1 else ""))
    return packed.done()


class _Lines:
    """Pieces of text joined by single spaces into lines of at most ``WIDTH`` columns: ``lines``
    are finished, ``current`` is being filled, a new line starts with ``hanging``."""

    def __init__(self, lines: list[str], current: str, hanging: str) -> None:
        self.lines, self.current, self.hanging = lines, current, hanging
        self.empty = True  # nothing added to ``current`` yet

    def add(self, piece: str) -> None:
        """Append ``piece`` where it fits: on this line, else on a new line, split at its spaces
        outside brackets where it is wider than a line, and a word wider than a line broken by
        ``textwrap``."""
        joined = self.current + piece if self.empty else f"{self.current} {piece}"
        if len(joined) <= WIDTH:
            self.current, self.empty = joined, False
            return
        words = _words(piece)
        if not self.empty and (len(words) > 1 or len(self.hanging) + len(piece) <= WIDTH):
            self._new_line()  # a piece that does not fit starts a line of its own
            self.add(piece)
            return
        if len(words) > 1:
            for word in words:
                self.add(word)
            return
        if not self.empty or len(self.current) > WIDTH - 20:
            self._new_line()
            if len(self.current) + len(piece) <= WIDTH:
                self.current, self.empty = self.current + piece, False
                return
        *broken, self.current = textwrap.wrap(piece, width=WIDTH, initial_indent=self.current,
                                              subsequent_indent=self.hanging, break_long_words=True,
                                              break_on_hyphens=False) or [self.current + piece]
        self.lines += broken
        self.empty = False

    def _new_line(self) -> None:
        self.lines.append(self.current.rstrip())
        self.current, self.empty = self.hanging, True

    def done(self) -> list[str]:
        return self.lines + [self.current.rstrip()]


_OPENING, _CLOSING = "([{", ")]}"


def _words(text: str) -> list[str]:
    """``text`` split at its spaces outside brackets (a shape pattern is one word)."""
    words, depth, start = [], 0, 0
    for position, character in enumerate(text):
        if character in _OPENING:
            depth += 1
        elif character in _CLOSING:
            depth = max(depth - 1, 0)
        elif character == " " and depth == 0:
            if position > start:
                words.append(text[start:position])
            start = position + 1
    if start < len(text):
        words.append(text[start:])
    return words


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
