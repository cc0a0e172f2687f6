"""The bounded JSON encoding of the statement IR and of errors, between parser worker and host.

The worker sends plain JSON data, never pickles. The host decodes it strictly: every node
kind, field, type and position is checked, and anything unexpected is rejected with
E_RESOURCE as a malformed worker reply, so a compromised or confused worker cannot hand
the interpreter an object it would not have produced itself.

Statements and expressions are flat JSON arrays, a kind tag first and the 1-based line and
column next (a reply holds one per operator call, so they are kept short to write, read and
check):

    ["e", line, column, call]                          an expression statement
    ["a", line, column, [target, ...], unpack, value]  an assignment
    ["c", line, column, alias, [arg, ...], [[keyword, value], ...]]
    ["n", line, column, name]      ["p", line, column, [name, ...]]      ["l", line, column, value]

Literal values are JSON scalars, or objects tagged where JSON would lose the distinction:
``{"float": repr}``, ``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[key, value], ...]}``
and, only as direct values of an ``init`` mapping, ``{"scheme": name, "kwargs": [...], "pos": [line, column]}``.
"""

from __future__ import annotations

import math
from keyword import iskeyword
from typing import Any, Optional

from ...construction import SCHEME_NAMES
from ...errors import CODES, HNDLError
from ...limits import SOURCE_BUDGETS
from .ir import Assign, Call, Evaluate, Literal, Name, Pack, Pos, Program, SchemeCall
from .source import Source

#: Deepest value nesting a reply may carry (calls inside calls, literals inside literals).
MAX_DEPTH = 200
#: The worker parses with the default source budgets, so no reply value may exceed them.
_INT_BOUND = 10 ** SOURCE_BUDGETS["max_int_digits"]
_STRING_BYTES = SOURCE_BUDGETS["max_string_bytes"]


# -- encoding (worker side) --------------------------------------------------------------------
def encode_program(program: Program) -> list:
    return [_statement(statement) for statement in program.statements]


def _statement(statement) -> list:
    pos = (statement.pos.line, statement.pos.column)
    if type(statement) is Assign:
        return Wire.assign(list(statement.targets), statement.unpack, _expr(statement.value), pos)
    return Wire.evaluate(_expr(statement.call), pos)


def _expr(expr) -> list:
    kind, pos = type(expr), (expr.pos.line, expr.pos.column)
    if kind is Call:
        return Wire.call(expr.alias, [_expr(arg) for arg in expr.args],
                         [[key, _expr(value)] for key, value in expr.kwargs], pos)
    if kind is Name:
        return Wire.name(expr.name, pos)
    if kind is Pack:
        return Wire.pack([_expr(item) for item in expr.items], pos)
    return Wire.literal(expr.value, pos)


class Wire:
    """The one place the records above are laid out. The validator builds with it in the
    worker (``grammar.validate_config(..., build=Wire)``), so the worker never builds an IR only
    to encode it; ``encode_program`` walks an IR through it. Records are lists (the validator's
    argument tuples inside them), which JSON writes as the arrays above."""

    @staticmethod
    def position(line: int, column: int) -> tuple[int, int]:
        return line, column

    @staticmethod
    def name(name: str, pos: tuple[int, int]) -> list:
        return ["n", pos[0], pos[1], name]

    @staticmethod
    def literal(value: Any, pos: tuple[int, int]) -> list:
        return ["l", pos[0], pos[1], value if type(value) is int else _value(value)]

    @staticmethod
    def call(alias: str, args: tuple, kwargs: tuple, pos: tuple[int, int]) -> list:
        return ["c", pos[0], pos[1], alias, args, kwargs]

    @staticmethod
    def pack(items: tuple, pos: tuple[int, int]) -> list:
        return ["p", pos[0], pos[1], items]

    @staticmethod
    def assign(targets: tuple, unpack: bool, value: list, pos: tuple[int, int]) -> list:
        return ["a", pos[0], pos[1], targets, unpack, value]

    @staticmethod
    def evaluate(call: list, pos: tuple[int, int]) -> list:
        return ["e", pos[0], pos[1], call]

    @staticmethod
    def program(statements: tuple, source: Source) -> tuple:
        return statements


def _value(value) -> Any:
    """Literal values, tagged where JSON would lose the distinction (tuple/list/dict/scheme)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, tuple):
        return {"tuple": [_value(item) for item in value]}
    if isinstance(value, list):
        return {"list": [_value(item) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[key, _value(item)] for key, item in value.items()]}
    if isinstance(value, SchemeCall):
        return {"scheme": value.scheme, "kwargs": [[key, _value(item)] for key, item in value.kwargs],
                "pos": _pos(value.pos)}
    raise TypeError(f"unencodable literal {value!r}")


def _pos(pos: Pos) -> list:
    return [pos.line, pos.column]


def encode_error(error: HNDLError) -> dict:
    where = error.location
    return {"code": error.code, "message": error.message, "line": where.line, "column": where.column,
            "node": where.node, "field": where.field, "chain": list(error.chain),
            "remedies": list(error.remedies)}


# -- decoding (host side) ----------------------------------------------------------------------
def malformed(detail: str) -> HNDLError:
    return HNDLError(
        "E_RESOURCE",
        f"the configuration parser worker returned a malformed reply ({detail})",
        remedies=("Retry; the worker is restarted after every failure.",),
    )


def decode_program(data: Any, source: Source, *, max_nodes: Optional[int] = None) -> Program:
    """The Program a worker reply describes; ``source`` is the host's own copy of the text.

    ``max_nodes`` is the bound the worker was given: it refuses the first operator call past
    it, so a reply holding more calls is malformed, and is refused as each call record is
    reached, before that call is built.
    """
    reader = _Reader(source.text.count("\n") + 1, max_nodes)
    statement = reader.statement
    statements = tuple([statement(item) for item in _list(data, "statements")])
    return Program(statements=statements, source=source)


def decode_error(data: Any, *, file: Optional[str] = None) -> HNDLError:
    """The HNDLError a worker reply describes; ``file`` is the host-supplied path, if any
    (the worker only ever sees text, so the host re-attaches the path it read)."""
    record = _dict(data, ("code", "message", "line", "column", "node", "field", "chain", "remedies"))
    code = record["code"]
    if type(code) is not str or code not in CODES:
        raise malformed(f"unknown error code {code!r}"[:200])
    remedies = tuple(_str(item) for item in _list(record["remedies"], "remedies"))
    if not remedies:
        raise malformed("error without a remedy")
    return HNDLError(
        code,
        _str(record["message"]),
        line=_optional_position(record["line"]),
        column=_optional_position(record["column"]),
        node=_optional_str(record["node"]),
        field=_optional_str(record["field"]),
        file=file,
        chain=tuple(_str(item) for item in _list(record["chain"], "chain")),
        remedies=remedies,
    )


class _Reader:
    """Decodes the records of one reply in one pass with every check, cheaply: counts its call
    records against the worker's ``max_nodes`` and shares one Pos per distinct position (a
    call and its statement start at the same place)."""

    __slots__ = ("lines", "bound", "count", "positions")

    def __init__(self, lines: int, bound: Optional[int]) -> None:
        self.lines = lines
        self.bound = bound
        self.count = 0
        self.positions: dict[tuple[int, int], Pos] = {}

    def take(self) -> None:
        """Count one call record; the first past the bound is refused before it is built."""
        self.count += 1
        if self.bound is not None and self.count > self.bound:
            raise malformed(f"more than {self.bound} operator calls, above max_nodes={self.bound}")

    def pos(self, line: Any, column: Any) -> Pos:
        """A 1-based (line, column) on one of the source's lines."""
        if type(line) is int and type(column) is int and line >= 1 and column >= 1:
            if line > self.lines:
                raise malformed("position past the end of the source")
            key = (line, column)
            pos = self.positions.get(key)
            if pos is None:
                pos = self.positions[key] = Pos(line, column)
            return pos
        raise malformed("bad position")

    def statement(self, data: Any):
        kind = _kind(data)
        if kind == "e":
            if len(data) != 4:
                raise malformed("expression statement of the wrong length")
            _, line, column, call = data
            pos = self.pos(line, column)
            call = self.expr(call, 0)
            if type(call) is not Call:
                raise malformed("expression statement that is not a call")
            return Evaluate(call, pos)
        if kind == "a":
            if len(data) != 6:
                raise malformed("assignment of the wrong length")
            _, line, column, targets, unpack, value = data
            pos = self.pos(line, column)
            targets = tuple([_local(item) for item in _list(targets, "targets")])
            if type(unpack) is not bool or not targets or (not unpack and len(targets) != 1):
                raise malformed("bad assignment targets")
            if len(targets) > 1 and len(set(targets)) != len(targets):
                raise malformed("repeated assignment target")
            value = self.expr(value, 0)
            if type(value) is Literal:
                raise malformed("literal assignment value")
            return Assign(targets, unpack, value, pos)
        raise malformed(f"unknown statement kind {kind!r}"[:200])

    def expr(self, data: Any, depth: int):
        if depth > MAX_DEPTH:
            raise malformed("nesting too deep")
        kind = _kind(data)
        if kind == "c":
            if len(data) != 6:
                raise malformed("call of the wrong length")
            return self.call(data, depth)
        if kind == "l":
            if len(data) != 4:
                raise malformed("literal of the wrong length")
            _, line, column, value = data
            pos = self.pos(line, column)
            # A plain in-bound int is the common literal; everything else takes the full check.
            if type(value) is not int or not -_INT_BOUND < value < _INT_BOUND or depth >= MAX_DEPTH:
                value = _decode_value(value, depth + 1, self.lines)
            return Literal(value, pos)
        if kind == "n":
            if len(data) != 4:
                raise malformed("name of the wrong length")
            _, line, column, name = data
            return Name(_local(name), self.pos(line, column))
        if kind == "p":
            if len(data) != 4:
                raise malformed("pack of the wrong length")
            _, line, column, items = data
            pos = self.pos(line, column)
            items = tuple([self.expr(item, depth + 1) for item in _list(items, "items")])
            if not items or not all(type(item) is Name for item in items):
                raise malformed("pack that is not a non-empty tuple of names")
            return Pack(items=items, pos=pos)
        raise malformed(f"unknown expression kind {kind!r}"[:200])

    def call(self, data: list, depth: int) -> Call:
        """A call record: counted first, then its position, alias and arguments in order."""
        self.take()
        _, line, column, alias, args, pairs = data
        pos = self.pos(line, column)
        alias = _identifier(alias)
        inner = depth + 1
        expr = self.expr
        args = tuple([expr(item, inner) for item in _list(args, "args")])
        kwargs = []
        if _list(pairs, "kwargs"):
            seen = set()
            for pair in pairs:
                key, value = _pair(pair)
                key = _identifier(key)
                if key in seen:
                    raise malformed("repeated keyword argument")
                seen.add(key)
                if key == "init" and _kind(value) == "l":
                    # Only the direct values of an init mapping may be scheme calls (grammar.py).
                    if len(value) != 4:
                        raise malformed("literal of the wrong length")
                    decoded = Literal(_decode_value(value[3], depth + 2, self.lines, init=True),
                                      self.pos(value[1], value[2]))
                else:
                    decoded = expr(value, inner)
                kwargs.append((key, decoded))
        if Pack in map(type, args) or (kwargs and any(type(value) is Pack for _, value in kwargs)):
            raise malformed("pack inside a call")
        return Call(alias, args, tuple(kwargs), pos)


def _decode_value(data: Any, depth: int, lines: int, *, init: bool = False) -> Any:
    """A literal value. ``init``: this is the dict of an init keyword, whose direct values
    may be scheme calls; nothing else may hold one."""
    if depth > MAX_DEPTH:
        raise malformed("nesting too deep")
    if data is None or type(data) is bool:
        return data
    if type(data) is int:
        if abs(data) >= _INT_BOUND:
            raise malformed("integer beyond the literal bound")
        return data
    if type(data) is str:
        return _text(data)
    if type(data) is not dict or len(data) not in (1, 3):
        raise malformed("bad literal")
    if set(data) == {"float"}:
        text = _str(data["float"])
        try:
            number = float(text)
        except ValueError:
            raise malformed("bad float") from None
        if not math.isfinite(number):
            raise malformed("non-finite float")
        if repr(number) != text:
            raise malformed("float not in its canonical form")
        return number
    if set(data) == {"tuple"}:
        return tuple(_decode_value(item, depth + 1, lines) for item in _list(data["tuple"], "tuple"))
    if set(data) == {"list"}:
        return [_decode_value(item, depth + 1, lines) for item in _list(data["list"], "list")]
    if set(data) == {"dict"}:
        result = {}
        for pair in _list(data["dict"], "dict"):
            key, value = _pair(pair)
            if type(key) is not str or key in result:
                raise malformed("bad dict key")
            if init and type(value) is dict and set(value) == {"scheme", "kwargs", "pos"}:
                result[_text(key)] = _decode_scheme(value, depth + 1, lines)
            else:
                result[_text(key)] = _decode_value(value, depth + 1, lines)
        return result
    if set(data) == {"scheme", "kwargs", "pos"}:
        raise malformed("initializer scheme call outside an init mapping")
    raise malformed("bad literal")


def _decode_scheme(data: dict, depth: int, lines: int) -> SchemeCall:
    scheme = _identifier(data["scheme"])
    if scheme not in SCHEME_NAMES:
        raise malformed(f"unknown initializer scheme {scheme!r}")
    kwargs = []
    for pair in _list(data["kwargs"], "kwargs"):
        key, value = _pair(pair)
        key = _identifier(key)
        if any(key == seen for seen, _ in kwargs):
            raise malformed("repeated scheme keyword")
        kwargs.append((key, _decode_value(value, depth + 1, lines)))
    return SchemeCall(scheme=scheme, kwargs=tuple(kwargs), pos=_decode_pos(data["pos"], lines))


# -- strict primitives -------------------------------------------------------------------
def _kind(data: Any) -> str:
    """The kind tag of a statement or expression record (a non-empty list)."""
    if type(data) is not list or not data or type(data[0]) is not str:
        raise malformed("missing node kind")
    return data[0]


def _dict(data: Any, keys: tuple[str, ...]) -> dict:
    if type(data) is not dict or set(data) != set(keys):
        raise malformed(f"expected fields {', '.join(keys)}")
    return data


def _list(data: Any, what: str) -> list:
    if type(data) is not list:
        raise malformed(f"{what} is not a list")
    return data


def _pair(data: Any) -> tuple:
    if type(data) is not list or len(data) != 2:
        raise malformed("bad key/value pair")
    return data[0], data[1]


def _str(data: Any) -> str:
    if type(data) is not str:
        raise malformed("expected text")
    return data


def _text(data: str) -> str:
    """Literal text: valid Unicode (no lone surrogates) within the string budget."""
    if len(data) > _STRING_BYTES or len(data.encode("utf-8", "surrogatepass")) > _STRING_BYTES:
        raise malformed("string beyond the literal bound")
    if any("\ud800" <= char <= "\udfff" for char in data):
        raise malformed("string with a lone surrogate")
    return data


def _identifier(data: Any) -> str:
    """An alias or keyword-argument name: a Python identifier that is not a keyword."""
    if type(data) is not str or not data.isidentifier() or iskeyword(data):
        raise malformed("expected an identifier")
    return data


def _local(data: Any) -> str:
    """A tensor local or input name: also never a reserved double-underscore name."""
    name = _identifier(data)
    if name.startswith("__"):
        raise malformed("reserved double-underscore name")
    return name


def _optional_position(data: Any):
    if data is not None and (type(data) is not int or data < 1):
        raise malformed("bad error position")
    return data


def _optional_str(data: Any):
    return None if data is None else _str(data)


def _decode_pos(data: Any, lines: int) -> Pos:
    """A 1-based (line, column) on one of the source's ``lines``."""
    if type(data) is not list or len(data) != 2 or not all(type(item) is int and item >= 1 for item in data):
        raise malformed("bad position")
    if data[0] > lines:
        raise malformed("position past the end of the source")
    return Pos(line=data[0], column=data[1])
