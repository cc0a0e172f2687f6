"""The port/relation shape DSL of operator declarations (§8 "The shape DSL").

A declaration's ``shape=`` string such as ``"x[B, ..., D_in] -> out[B, ..., D_out]"`` names
the input ports before the arrow and the output ports after it, each with an optional axis
pattern and dtype. This module turns that text into immutable data (``ShapeSignature``) and
nothing more: the grammar is finite data, not an expression language, and resolving symbols
against real extents is the resolver's business.

The parser is deliberately small and exact. Every malformed string fails with
``E_REGISTRY`` (a malformed shape string fails registration), quoting the text, naming the
problem, and pointing a caret at the offending 1-based column.

Grammar (whitespace is free between tokens)::

    signature := ports '->' ports
    ports     := port (',' port)*
    port      := NAME ['*' | '?'] ( ['[' dims ']'] [':' DTYPE] | ':' DTYPE '[' dims ']' )
    dims      := entry (',' entry)*          -- first entry is B
    entry     := 'B' | '...' | SYMBOL | K '*' SYMBOL | LITERAL

``name?`` marks an optional input port: it follows every required input, is never the first
input (which receives current), never variadic, and never an output. A call may leave it
unbound; the node then simply lacks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .errors import HNDLError

#: Port dtypes a pattern may declare; "compute" (the default) is the plan's compute dtype and
#: "any" accepts whatever the producer carries.
DTYPES: tuple[str, ...] = (
    "compute", "any", "float32", "float16", "bfloat16", "int64", "int32", "bool",
)
#: Ports per side of one declaration.
MAX_PORTS = 32
#: Distinct dimension symbols (batch excluded) per declaration.
MAX_SYMBOLS = 64
#: Characters in a port name or a dimension symbol.
MAX_NAME = 64
#: Largest dimension literal and largest symbol scale.
MAX_LITERAL = 2**31 - 1
#: Characters in one shape string; longer text is rejected before it is scanned.
MAX_TEXT = 4096

_PORT_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
_SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_DIGITS = re.compile(r"[0-9]+\Z")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SPACE_CHARS = frozenset(" \t\r\n")
_PUNCTUATION = frozenset("[],*:?")

_EXAMPLE = "x[B, ..., D_in] -> out[B, ..., D_out]"


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class Dim:
    """One axis entry of a pattern: the batch axis, the shared ellipsis run, a (scaled)
    node-local symbol, or a positive literal extent."""

    kind: str  # "batch" | "symbol" | "literal" | "ellipsis"
    symbol: Optional[str] = None
    scale: int = 1
    value: Optional[int] = None

    def __str__(self) -> str:
        if self.kind == "batch":
            return "B"
        if self.kind == "ellipsis":
            return "..."
        if self.kind == "literal":
            return str(self.value)
        return self.symbol if self.scale == 1 else f"{self.scale}*{self.symbol}"


@dataclass(frozen=True)
class PortPattern:
    """One declared port: its name (the prefix, for a variadic port), its axis pattern or
    ``None`` when the DSL leaves it to ``relation=``, its dtype, and whether it is an optional
    input (``name?``) a call may leave unbound."""

    name: str
    dims: Optional[tuple[Dim, ...]]
    dtype: str = "compute"
    variadic: bool = False
    optional: bool = False

    @property
    def has_ellipsis(self) -> bool:
        """Whether the pattern contains the shared ``...`` run of middle axes."""
        return self.dims is not None and any(d.kind == "ellipsis" for d in self.dims)

    @property
    def fixed_rank(self) -> Optional[int]:
        """The rank the pattern fixes (batch included), or ``None`` when it fixes none."""
        if self.dims is None or self.has_ellipsis:
            return None
        return len(self.dims)

    def __str__(self) -> str:
        text = self.name + ("*" if self.variadic else "") + ("?" if self.optional else "")
        if self.dims is not None:
            text += "[" + ", ".join(str(d) for d in self.dims) + "]"
        if self.dtype != "compute":
            text += ":" + self.dtype
        return text


@dataclass(frozen=True)
class ShapeSignature:
    """A parsed ``shape=`` declaration: ordered input and output ports, and the distinct
    dimension symbols they use in first-appearance order."""

    text: str
    inputs: tuple[PortPattern, ...]
    outputs: tuple[PortPattern, ...]
    symbols: tuple[str, ...]

    @property
    def variadic_input(self) -> bool:
        """Whether the sole input port is variadic (``x*`` expanding to x0, x1, ...)."""
        return any(p.variadic for p in self.inputs)

    @property
    def variadic_output(self) -> bool:
        """Whether the sole output port is variadic (``out*`` expanding to out0, out1, ...)."""
        return any(p.variadic for p in self.outputs)

    @property
    def optional_inputs(self) -> tuple[str, ...]:
        """Names of the optional input ports (``name?``), in declared order."""
        return tuple(p.name for p in self.inputs if p.optional)

    @property
    def required_inputs(self) -> tuple[PortPattern, ...]:
        """The input ports every call binds, in declared order (all of them but the optional)."""
        return tuple(p for p in self.inputs if not p.optional)

    def __str__(self) -> str:
        inputs = ", ".join(str(p) for p in self.inputs)
        outputs = ", ".join(str(p) for p in self.outputs)
        return f"{inputs} -> {outputs}"


# --------------------------------------------------------------------------- scanning


@dataclass(frozen=True)
class _Token:
    """A lexical token: kind is "word", "end" or the punctuation itself; start/end are
    0-based offsets into the text (end exclusive)."""

    kind: str
    text: str
    start: int
    end: int

    @property
    def column(self) -> int:
        return self.start + 1


def _display(text: str) -> str:
    """The text as one printable line of the same length, so a caret lines up under it."""
    return "".join(
        " " if ch in _SPACE_CHARS else (ch if ch.isprintable() else "?") for ch in text
    )


def _fail(text: str, problem: str, column: int, remedy: str) -> HNDLError:
    """Build the E_REGISTRY error for ``problem`` at 1-based ``column`` of ``text``."""
    line = _display(text)
    message = f"shape '{line}': {problem} at column {column}\n  {line}\n  {' ' * (column - 1)}^"
    return HNDLError("E_REGISTRY", message, field="shape", column=column, remedies=(remedy,))


def _scan(text: str) -> list[_Token]:
    """Split the text into words, punctuation, '->' and '...'; anything else is an error."""
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE_CHARS:
            i += 1
        elif ch in _WORD_CHARS:
            j = i
            while j < n and text[j] in _WORD_CHARS:
                j += 1
            tokens.append(_Token("word", text[i:j], i, j))
            i = j
        elif ch in _PUNCTUATION:
            tokens.append(_Token(ch, ch, i, i + 1))
            i += 1
        elif text.startswith("->", i):
            tokens.append(_Token("->", "->", i, i + 2))
            i += 2
        elif text.startswith("...", i):
            tokens.append(_Token("...", "...", i, i + 3))
            i += 3
        elif ch == ".":
            raise _fail(text, "stray '.'; the ellipsis is written '...'", i + 1,
                        "Write the run of middle axes as exactly three dots: '...'.")
        elif ch == "-":
            raise _fail(text, "stray '-'; the arrow is written '->' and extents are positive",
                        i + 1, "Separate inputs from outputs with '->'.")
        else:
            raise _fail(text, f"unexpected character {ch!r}", i + 1,
                        f"Use only names, integers, '[', ']', ',', '*', '?', ':', '...' and '->', "
                        f"as in '{_EXAMPLE}'.")
    tokens.append(_Token("end", "", n, n))
    return tokens


# --------------------------------------------------------------------------- parsing


class _Parser:
    """Recursive-descent parser over the token list; one instance parses one string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _scan(text)
        self.index = 0
        self.symbols: list[str] = []

    # -- token helpers

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def error(self, problem: str, column: int, remedy: str) -> HNDLError:
        return _fail(self.text, problem, column, remedy)

    def missing(self, what: str, remedy: str) -> HNDLError:
        """An "expected ..." error, placed right after the last token read (where the
        missing piece belongs), or at the first token when nothing was read yet."""
        column = self.tokens[self.index - 1].end + 1 if self.index else self.peek().column
        return self.error(f"expected {what}", column, remedy)

    # -- grammar

    def signature(self) -> ShapeSignature:
        inputs = self.ports("input")
        if self.peek().kind != "->":
            raise self.missing("',' or '->'", f"Write the shape as 'inputs -> outputs', "
                               f"as in '{_EXAMPLE}'.")
        self.take()
        outputs = self.ports("output")
        token = self.peek()
        if token.kind == "->":
            raise self.error("more than one '->'", token.column,
                             "Write exactly one '->' between the inputs and the outputs.")
        if token.kind != "end":
            raise self.missing("',' or end of shape",
                               "Separate ports with ',' and end the shape after the outputs.")
        return ShapeSignature(self.text, inputs, outputs, tuple(self.symbols))

    def ports(self, side: str) -> tuple[PortPattern, ...]:
        """A non-empty comma-separated list of ports for one side of the arrow."""
        ports: list[PortPattern] = []
        columns: list[int] = []
        while True:
            column = self.peek().column
            port = self.port(side)
            if len(ports) == MAX_PORTS:
                raise self.error(f"more than {MAX_PORTS} {side} ports", column,
                                 f"Declare at most {MAX_PORTS} {side} ports, or one "
                                 f"variadic port.")
            if any(p.name == port.name for p in ports):
                raise self.error(f"duplicate {side} port '{port.name}'", column,
                                 f"Give every {side} port its own name.")
            ports.append(port)
            columns.append(column)
            if self.peek().kind != ",":
                break
            self.take()
        for port, column in zip(ports, columns):
            if port.variadic and len(ports) > 1:
                raise self.error(f"variadic port '{port.name}*' must be the sole {side} port",
                                 column, f"Declare '{port.name}*' alone on the {side} side.")
        for index, (port, column) in enumerate(zip(ports, columns)):
            if not port.optional:
                if any(p.optional for p in ports[:index]):
                    raise self.error(f"required {side} port '{port.name}' follows an optional "
                                     f"port", column,
                                     "Declare every optional port ('name?') after the required "
                                     "input ports.")
                continue
            if side == "output":
                raise self.error(f"output port '{port.name}?' cannot be optional", column,
                                 "Only input ports may be optional; every output is produced.")
            if index == 0:
                raise self.error(f"the first input port '{port.name}' cannot be optional; it "
                                 f"receives current", column,
                                 "Declare a required input port first and the optional ports "
                                 "after it.")
        return tuple(ports)

    def port(self, side: str) -> PortPattern:
        """NAME ['*' | '?'] then a pattern and a dtype, each optional, in either order."""
        name = self.port_name()
        variadic = False
        optional = False
        dims: Optional[tuple[Dim, ...]] = None
        dtype: Optional[str] = None
        while self.peek().kind in ("*", "?", "[", ":"):
            token = self.take()
            if token.kind == "*":
                if optional:
                    raise self.error(f"port '{name}' cannot be both optional and variadic",
                                     token.column,
                                     f"Declare '{name}' either as '{name}?' or as '{name}*'.")
                if variadic or dims is not None or dtype is not None:
                    raise self.error("'*' must directly follow the port name", token.column,
                                     f"Write a variadic port as '{name}*', before any "
                                     f"pattern or dtype.")
                variadic = True
            elif token.kind == "?":
                if variadic:
                    raise self.error(f"port '{name}' cannot be both optional and variadic",
                                     token.column,
                                     f"Declare '{name}' either as '{name}?' or as '{name}*'.")
                if optional or dims is not None or dtype is not None:
                    raise self.error("'?' must directly follow the port name", token.column,
                                     f"Write an optional port as '{name}?', before any "
                                     f"pattern or dtype.")
                optional = True
            elif token.kind == "[":
                if dims is not None:
                    raise self.error(f"port '{name}' has a second pattern", token.column,
                                     "Give each port at most one '[...]' pattern.")
                if variadic and side == "output":
                    raise self.error(f"variadic output '{name}*' carries no shape pattern",
                                     token.column,
                                     f"Declare '{name}*' without '[...]' and pair it with "
                                     f"relation=.")
                dims = self.pattern(token)
            else:
                if dtype is not None:
                    raise self.error(f"port '{name}' has a second dtype", token.column,
                                     "Give each port at most one ':dtype'.")
                dtype = self.dtype()
        return PortPattern(name, dims, dtype or "compute", variadic, optional)

    def port_name(self) -> str:
        token = self.peek()
        if token.kind != "word":
            raise self.missing("a port name", "Name every port, as in 'x[B, C]'.")
        self.take()
        if not _PORT_NAME.match(token.text):
            raise self.error(f"invalid port name '{token.text}'; port names match "
                             f"[a-z][a-z0-9_]*", token.column,
                             "Start the port name with a lowercase letter and use only "
                             "lowercase letters, digits and '_'.")
        if len(token.text) > MAX_NAME:
            raise self.error(f"port name is {len(token.text)} characters, more than "
                             f"{MAX_NAME}", token.column,
                             f"Shorten the port name to at most {MAX_NAME} characters.")
        return token.text

    def dtype(self) -> str:
        token = self.peek()
        if token.kind != "word":
            raise self.missing("a dtype after ':'", f"Write one of {', '.join(DTYPES)}.")
        self.take()
        if token.text not in DTYPES:
            raise self.error(f"unknown dtype '{token.text}'; expected one of "
                             f"{', '.join(DTYPES)}", token.column,
                             f"Write one of {', '.join(DTYPES)}.")
        return token.text

    def pattern(self, opening: _Token) -> tuple[Dim, ...]:
        """The axis entries between '[' and ']', checked entry by entry and then for rank."""
        if self.peek().kind == "]":
            raise self.error("empty pattern; a pattern starts with the batch axis 'B'",
                             self.peek().column, "Write at least '[B, ...]' or drop the '[]'.")
        dims: list[Dim] = []
        fixed_columns: list[int] = []
        while True:
            column = self.peek().column
            dim = self.entry()
            self.place(dim, dims, column)
            dims.append(dim)
            if dim.kind != "ellipsis":
                fixed_columns.append(column)
            token = self.peek()
            if token.kind == ",":
                self.take()
                continue
            if token.kind == "]":
                closing = self.take()
                break
            expected = "','" if token.kind in ("word", "...") else "']'"
            raise self.missing(expected, f"Separate axes with ',' and close the pattern "
                               f"opened at column {opening.column} with ']'.")
        self.check_rank(dims, fixed_columns, closing)
        return tuple(dims)

    def place(self, dim: Dim, dims: list[Dim], column: int) -> None:
        """Positional rules: B first and only first, '...' at most once."""
        if not dims and dim.kind != "batch":
            raise self.error(f"the first axis must be the batch axis 'B', not '{dim}'",
                             column, "Start every pattern with 'B'.")
        if dims and dim.kind == "batch":
            raise self.error("'B' is the batch axis and may only be the first axis", column,
                             "Name other axes with their own symbol, such as 'C'.")
        if dim.kind == "ellipsis" and any(d.kind == "ellipsis" for d in dims):
            raise self.error("'...' may appear only once per pattern", column,
                             "Keep one '...' and name the other axes with symbols.")

    def check_rank(self, dims: list[Dim], fixed_columns: list[int], closing: _Token) -> None:
        """Without '...' the rank is 2, 3 or 4; with it, at most 4 axes are fixed."""
        if any(d.kind == "ellipsis" for d in dims):
            if len(fixed_columns) > 4:
                raise self.error(f"pattern fixes {len(fixed_columns)} axes besides '...'; "
                                 f"at most 4 are supported (batch included)",
                                 fixed_columns[4], "Fix at most four axes, batch included.")
            return
        if len(dims) < 2:
            raise self.error(f"pattern has rank {len(dims)}; a pattern without '...' must "
                             f"have rank 2, 3 or 4 (batch included)", closing.column,
                             "Add the feature axis, as in '[B, C]', or use '[B, ...]'.")
        if len(dims) > 4:
            raise self.error(f"pattern has rank {len(dims)}; a pattern without '...' must "
                             f"have rank 2, 3 or 4 (batch included)", fixed_columns[4],
                             "Use at most four axes, batch included.")

    def entry(self) -> Dim:
        """One axis entry: 'B', '...', SYMBOL, K*SYMBOL or a positive literal."""
        token = self.peek()
        if token.kind == "...":
            self.take()
            return Dim("ellipsis")
        if token.kind != "word":
            raise self.missing("an axis entry", "Write 'B', '...', a symbol such as 'C', "
                               "a multiple such as '2*C', or a positive integer.")
        self.take()
        if self.peek().kind == "*":
            return self.scaled(token, self.take())
        if _DIGITS.match(token.text):
            return Dim("literal", value=self.integer(token, "dimension literal", 1))
        if token.text == "B":
            return Dim("batch")
        return self.symbol(token, 1)

    def scaled(self, factor: _Token, star: _Token) -> Dim:
        """K*SYMBOL with K >= 2; a multiple of the batch axis is never written."""
        if not _DIGITS.match(factor.text):
            raise self.error(f"'{factor.text}*' is not a multiple; write the integer "
                             f"scale first, as in '2*C'", factor.column,
                             "Write an exact multiple as 'K*SYMBOL' with an integer K >= 2.")
        scale = self.integer(factor, "scale", 2)
        token = self.peek()
        if token.kind != "word":
            raise self.missing("a dimension symbol after '*'",
                               "Write an exact multiple as 'K*SYMBOL', as in '2*C'.")
        self.take()
        if token.text == "B":
            raise self.error(f"'{scale}*B': a pattern never spells a multiple of the "
                             f"batch axis", factor.column,
                             "Write 'B'; the resolver supplies the node's shared batch entry.")
        if _DIGITS.match(token.text):
            raise self.error(f"'{scale}*{token.text}' multiplies two literals",
                             factor.column, "Write the product as one literal.")
        return self.symbol(token, scale)

    def symbol(self, token: _Token, scale: int) -> Dim:
        """A node-local dimension symbol, registered in first-appearance order."""
        name = token.text
        if not _SYMBOL.match(name):
            raise self.error(f"invalid axis entry '{name}'", token.column,
                             "Write 'B', '...', a symbol matching [A-Za-z][A-Za-z0-9_]*, "
                             "a multiple such as '2*C', or a positive integer.")
        if len(name) > MAX_NAME:
            raise self.error(f"dimension symbol is {len(name)} characters, more than "
                             f"{MAX_NAME}", token.column,
                             f"Shorten the symbol to at most {MAX_NAME} characters.")
        if name not in self.symbols:
            if len(self.symbols) == MAX_SYMBOLS:
                raise self.error(f"more than {MAX_SYMBOLS} distinct dimension symbols",
                                 token.column,
                                 f"Use at most {MAX_SYMBOLS} symbols, or move the rule into "
                                 f"relation=.")
            self.symbols.append(name)
        return Dim("symbol", symbol=name, scale=scale)

    def integer(self, token: _Token, what: str, minimum: int) -> int:
        """A decimal integer in minimum..MAX_LITERAL without leading zeros."""
        digits = token.text
        if len(digits) > 1 and digits[0] == "0":
            raise self.error(f"{what} '{digits}' has a leading zero", token.column,
                             f"Write the {what} without leading zeros.")
        if len(digits) > len(str(MAX_LITERAL)) or int(digits) > MAX_LITERAL:
            raise self.error(f"{what} {digits} exceeds 2**31 - 1", token.column,
                             f"Keep every {what} at most {MAX_LITERAL}.")
        value = int(digits)
        if value < minimum:
            if what == "scale":
                problem = (f"scale {value} is less than 2; a multiple is written "
                           f"K*SYMBOL with K >= 2")
                remedy = ("Write the symbol alone for one times it ('C', not '1*C'); "
                          "an extent is never zero times a symbol.")
            else:
                problem = f"{what} {value} is not positive"
                remedy = "Use a positive extent."
            raise self.error(problem, token.column, remedy)
        return value


def parse_shape(text: str) -> ShapeSignature:
    """Parse a declaration's ``shape=`` string into a ``ShapeSignature``.

    Raises ``HNDLError("E_REGISTRY")`` for anything malformed, with the offending column.
    """
    if not isinstance(text, str):
        raise HNDLError("E_REGISTRY", f"shape must be a str, not {type(text).__name__}",
                        field="shape", remedies=(f"Write the shape as text, as in "
                                                 f"'{_EXAMPLE}'.",))
    if len(text) > MAX_TEXT:
        raise HNDLError("E_REGISTRY",
                        f"shape '{_display(text[:40])}...' is {len(text)} characters; at "
                        f"most {MAX_TEXT} are allowed", field="shape", column=MAX_TEXT + 1,
                        remedies=(f"Shorten the shape to at most {MAX_TEXT} characters, or "
                                  f"use a variadic port.",))
    return _Parser(text).signature()
