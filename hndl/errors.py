"""HNDLError and the closed catalog of diagnostic codes.

Every failure HNDL reports carries one code from ``CODES``, where it happened (source
line/column, node, field), the chain of facts that led there, and at least one remedy the
author can apply by hand. Constructing an error with a code outside the catalog is a bug in
HNDL itself and fails loudly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

#: The closed catalog, in the order the specification lists it, with a default remedy each.
CODES: dict[str, str] = {
    "E_CONSTRAINT": "Change a literal or a contract so the declared relations agree.",
    "E_RESHAPE": "Make the reshape factors multiply to the element count that reaches them.",
    "E_AMBIGUOUS": "Give the dimension explicitly, or select a policy that fixes it.",
    "E_UNRESOLVED": "Give the argument explicitly; no relation determines it.",
    "E_DTYPE": "Connect a producer whose dtype matches the port, or change the declared dtype.",
    "E_POLICY_CONFLICT": "Remove the conflicting literal or select a different policy.",
    "E_ARGUMENT": "Check the operator's argument list in its catalog page.",
    "E_PRETRAINED": "Check the checkpoint source and install the hndl[pretrained] extra.",
    "E_INITIALIZATION": "Name an existing parameter and give a finite number or one scheme call.",
    "E_TRAINABILITY": "Give a boolean, or one boolean per parameter name, without conflicts.",
    "E_BINDING": "Bind every declared port to a tensor that exists earlier in the graph.",
    "E_NAME": "Use a name defined earlier that is neither an operator alias nor reserved.",
    "E_OUTPUT_ARITY": "Unpack exactly as many names as the operator has outputs.",
    "E_OUTPUT": "Select one tensor for every declared output.",
    "E_CURRENT": "Pass the tensor explicitly; the previous multi-output call cleared current.",
    "E_SYNTAX": "Use only operator calls and simple assignments of python_config@1.",
    "E_CAPTURE": "Use symbolic tensors only as operator arguments inside their own capture.",
    "E_REGISTRY": "Fix the operator declaration or register each alias and identity once.",
    "E_OPERATOR": "Register the operator, or opt its pack into the registry.",
    "E_SCHEMA": "Correct the malformed contract, field, dtype or device.",
    "E_INTEGRITY": "Restore the plan from an unmodified file.",
    "E_RESOURCE": "Shrink the specification or raise the corresponding limit explicitly.",
    "E_STATE_VERSION": "Register the operator version the saved plan names, or re-resolve.",
    "E_RUNTIME": "Call the module with tensors that match its declared contract and device.",
}


@dataclass(frozen=True)
class Location:
    """Where a failure applies: source position, node and field, each optional."""

    line: Optional[int] = None
    column: Optional[int] = None
    node: Optional[str] = None
    field: Optional[str] = None
    file: Optional[str] = None

    def __str__(self) -> str:
        parts = []
        if self.node is not None:
            parts.append(f"node {self.node}")
        if self.field is not None:
            parts.append(f"field {self.field}")
        if self.line is not None:
            where = f"line {self.line}"
            if self.column is not None:
                where += f", column {self.column}"
            if self.file is not None:
                where = f"{self.file}, {where}"
            parts.append(where)
        return "; ".join(parts)


class HNDLError(Exception):
    """A failure with a stable code, a location, a constraint chain and remedies."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        line: Optional[int] = None,
        column: Optional[int] = None,
        node: Optional[str] = None,
        field: Optional[str] = None,
        file: Optional[str] = None,
        chain: Iterable[str] = (),
        remedies: Iterable[str] = (),
    ) -> None:
        if code not in CODES:
            raise AssertionError(f"HNDL bug: {code!r} is not in the closed error catalog")
        self.code = code
        self.message = _bounded(message, MAX_MESSAGE_CHARS)
        self.location = Location(line=line, column=column, node=_name(node), field=_name(field), file=_name(file))
        self.chain = _bounded_lines(chain, "fact")
        self.remedies = _bounded_lines(remedies, "remedy") or (CODES[code],)
        super().__init__(self._render())

    def _render(self) -> str:
        where = str(self.location)
        text = f"{self.code}" + (f" ({where})" if where else "") + f": {self.message}"
        for fact in self.chain:
            text += f"\n  because: {fact}"
        for remedy in self.remedies:
            text += f"\n  remedy: {remedy}"
        return text

    def __reduce__(self):
        """Rebuild from the fields, so errors survive pickling (worker processes) and copying."""
        location = self.location
        return (
            _rebuild,
            (self.code, self.message, (location.line, location.column, location.node, location.field, location.file),
             self.chain, self.remedies),
        )

    def located(self, **where) -> "HNDLError":
        """Return a copy with location fields that are still unknown filled in."""
        current = self.location
        fields = {
            name: getattr(current, name) if getattr(current, name) is not None else where.get(name)
            for name in ("line", "column", "node", "field", "file")
        }
        return HNDLError(
            self.code, self.message, chain=self.chain, remedies=self.remedies, **fields
        )


#: How much of an untrusted value a message shows (``shown``, ``echo``).
SHOWN_CHARS = 60
#: The most characters one message, fact or remedy carries; the rest is counted, not shown.
MAX_MESSAGE_CHARS = 4000
#: The most characters a location's node, field or file name carries.
MAX_NAME_CHARS = 200
#: The most items ``listed`` shows before "... and N more".
MAX_LISTED = 20

#: Characters a terminal may act on (C0 and C1 controls, DEL, bidirectional overrides and
#: isolates, line and paragraph separators); messages carry them as visible escapes instead.
_TERMINAL_ACTIVE = "\\x7f-\\x9f\\u200e\\u200f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069"
_CONTROLS = re.compile(f"[\\x00-\\x1f{_TERMINAL_ACTIVE}]")
#: The same, less the line breaks and tabs that lay out HNDL's own multi-line messages.
_CONTROLS_BUT_LAYOUT = re.compile(f"[\\x00-\\x08\\x0b-\\x1f{_TERMINAL_ACTIVE}]")


def escaped(text: str, *, keep_layout: bool = False) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b``, ``\\u202e``).

    An echoed state key or policy text may hold terminal escapes (an OSC 52 clipboard write,
    a bidirectional override): shown raw, printing the message would act on the terminal.
    """
    pattern = _CONTROLS_BUT_LAYOUT if keep_layout else _CONTROLS
    return pattern.sub(_escape_one, text)


def _escape_one(match: "re.Match[str]") -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def echo(text: Any, limit: int = SHOWN_CHARS) -> str:
    """An untrusted name shown in a message: escaped, and cut to ``limit`` characters with its length."""
    text = escaped(text if isinstance(text, str) else shown(text))
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def listed(items: Iterable[Any], *, limit: int = MAX_LISTED, show: Callable[[Any], str] = echo) -> str:
    """A comma-separated listing of at most ``limit`` items, each bounded by ``show``, then "... and N more"."""
    items = list(items)
    text = ", ".join(show(item) for item in items[:limit])
    if len(items) > limit:
        text += f", ... and {len(items) - limit} more"
    return text


_CUT_NOTE_ROOM = 40


def _bounded(text: Any, limit: int) -> str:
    """Message text escaped (layout kept) and capped: the safety net under every echo site."""
    text = escaped(str(text), keep_layout=True)
    if len(text) <= limit + _CUT_NOTE_ROOM:  # within the room a cut's own note takes: bounding twice changes nothing
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _bounded_lines(lines: Iterable[Any], kind: str) -> tuple[str, ...]:
    """At most ``MAX_LISTED`` facts or remedies, each bounded, then one line counting the rest."""
    lines = [_bounded(line, MAX_MESSAGE_CHARS) for line in lines]
    if len(lines) <= MAX_LISTED + 1:
        return tuple(lines)
    return tuple(lines[:MAX_LISTED]) + (f"... and {len(lines) - MAX_LISTED} more ({kind} lines not shown)",)


def _name(value: Optional[str]) -> Optional[str]:
    """A location's node, field or file name, escaped and cut; a name cut before stays as it is."""
    if value is None:
        return None
    text = escaped(str(value))
    return text if len(text) <= MAX_NAME_CHARS + _CUT_NOTE_ROOM else echo(text, MAX_NAME_CHARS)


def shown(value: object) -> str:
    """``repr(value)`` for a message about untrusted input, never long and never failing.

    A huge int cannot even be turned into text (Python's 4,300-digit limit), and a long string
    would turn a one-line diagnostic into a page, so both are described instead of shown whole.
    """
    if type(value) is int and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except ValueError:  # a container holding such an int
        return f"a {type(value).__name__} holding an integer too long to show"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _rebuild(code: str, message: str, where: tuple, chain: tuple, remedies: tuple) -> HNDLError:
    line, column, node, field, file = where
    return HNDLError(code, message, line=line, column=column, node=node, field=field, file=file,
                     chain=chain, remedies=remedies)
