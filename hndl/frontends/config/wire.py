"""The bounded JSON encoding of the statement IR and of errors, between parser worker and host.

The worker sends plain JSON data, never pickles. The host decodes it strictly: every node
kind, field, type and position is checked, and anything unexpected is rejected with
E_RESOURCE as a malformed worker reply, so a compromised or confused worker cannot hand
the interpreter an object it would not have produced itself.
"""

from __future__ import annotations

import math
from keyword import iskeyword
from typing import Any, Optional

from ...errors import CODES, HNDLError
from ...limits import SOURCE_BUDGETS
from .grammar import SCHEME_NAMES, Assign, Call, Evaluate, Literal, Name, Pack, Pos, Program, SchemeCall
from .source import Source

#: Deepest value nesting a reply may carry (calls inside calls, literals inside literals).
MAX_DEPTH = 200
#: The worker parses with the default source budgets, so no reply value may exceed them.
_INT_BOUND = 10 ** SOURCE_BUDGETS["max_int_digits"]
_STRING_BYTES = SOURCE_BUDGETS["max_string_bytes"]


# -- encoding (worker side) --------------------------------------------------------------------
def encode_program(program: Program) -> list:
    return [_statement(statement) for statement in program.statements]


def _statement(statement) -> dict:
    if isinstance(statement, Assign):
        return {"k": "assign", "targets": list(statement.targets), "unpack": statement.unpack,
                "value": _expr(statement.value), "pos": _pos(statement.pos)}
    return {"k": "eval", "call": _expr(statement.call), "pos": _pos(statement.pos)}


def _expr(expr) -> dict:
    if isinstance(expr, Name):
        return {"k": "name", "name": expr.name, "pos": _pos(expr.pos)}
    if isinstance(expr, Pack):
        return {"k": "pack", "items": [_expr(item) for item in expr.items], "pos": _pos(expr.pos)}
    if isinstance(expr, Call):
        return {"k": "call", "alias": expr.alias, "args": [_expr(arg) for arg in expr.args],
                "kwargs": [[key, _expr(value)] for key, value in expr.kwargs], "pos": _pos(expr.pos)}
    return {"k": "literal", "value": _value(expr.value), "pos": _pos(expr.pos)}


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
    lines = source.text.count("\n") + 1
    calls = _Calls(max_nodes)
    statements = tuple(_decode_statement(item, lines, calls) for item in _list(data, "statements"))
    return Program(statements=statements, source=source)


class _Calls:
    """Counts the call records of one reply against the worker's ``max_nodes``."""

    __slots__ = ("bound", "count")

    def __init__(self, bound: Optional[int]) -> None:
        self.bound = bound
        self.count = 0

    def take(self) -> None:
        self.count += 1
        if self.bound is not None and self.count > self.bound:
            raise malformed(f"more than {self.bound} operator calls, above max_nodes={self.bound}")


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


def _decode_statement(data: Any, lines: int, calls: _Calls):
    kind = _kind(data)
    if kind == "assign":
        record = _dict(data, ("k", "targets", "unpack", "value", "pos"))
        targets = tuple(_local(item) for item in _list(record["targets"], "targets"))
        unpack = record["unpack"]
        if type(unpack) is not bool or not targets or (not unpack and len(targets) != 1):
            raise malformed("bad assignment targets")
        if len(set(targets)) != len(targets):
            raise malformed("repeated assignment target")
        value = _decode_expr(record["value"], 0, lines, calls)
        if isinstance(value, Literal):
            raise malformed("literal assignment value")
        return Assign(targets=targets, unpack=unpack, value=value, pos=_decode_pos(record["pos"], lines))
    if kind == "eval":
        record = _dict(data, ("k", "call", "pos"))
        call = _decode_expr(record["call"], 0, lines, calls)
        if not isinstance(call, Call):
            raise malformed("expression statement that is not a call")
        return Evaluate(call=call, pos=_decode_pos(record["pos"], lines))
    raise malformed(f"unknown statement kind {kind!r}"[:200])


def _decode_expr(data: Any, depth: int, lines: int, calls: _Calls):
    if depth > MAX_DEPTH:
        raise malformed("nesting too deep")
    kind = _kind(data)
    if kind == "name":
        record = _dict(data, ("k", "name", "pos"))
        return Name(name=_local(record["name"]), pos=_decode_pos(record["pos"], lines))
    if kind == "pack":
        record = _dict(data, ("k", "items", "pos"))
        items = tuple(_decode_expr(item, depth + 1, lines, calls) for item in _list(record["items"], "items"))
        if not items or not all(isinstance(item, Name) for item in items):
            raise malformed("pack that is not a non-empty tuple of names")
        return Pack(items=items, pos=_decode_pos(record["pos"], lines))
    if kind == "call":
        record = _dict(data, ("k", "alias", "args", "kwargs", "pos"))
        calls.take()
        args = tuple(_decode_expr(item, depth + 1, lines, calls) for item in _list(record["args"], "args"))
        kwargs = []
        seen = set()
        for pair in _list(record["kwargs"], "kwargs"):
            key, value = _pair(pair)
            key = _identifier(key)
            if key in seen:
                raise malformed("repeated keyword argument")
            seen.add(key)
            if key == "init" and _kind(value) == "literal":
                # Only the direct values of an init mapping may be scheme calls (grammar.py).
                record_value = _dict(value, ("k", "value", "pos"))
                decoded = Literal(value=_decode_value(record_value["value"], depth + 2, lines, init=True),
                                  pos=_decode_pos(record_value["pos"], lines))
            else:
                decoded = _decode_expr(value, depth + 1, lines, calls)
            kwargs.append((key, decoded))
        if any(isinstance(item, Pack) for item in args) or any(isinstance(v, Pack) for _, v in kwargs):
            raise malformed("pack inside a call")
        return Call(alias=_identifier(record["alias"]), args=args, kwargs=tuple(kwargs),
                    pos=_decode_pos(record["pos"], lines))
    if kind == "literal":
        record = _dict(data, ("k", "value", "pos"))
        return Literal(value=_decode_value(record["value"], depth + 1, lines), pos=_decode_pos(record["pos"], lines))
    raise malformed(f"unknown expression kind {kind!r}"[:200])


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
    if type(data) is not dict or type(data.get("k")) is not str:
        raise malformed("missing node kind")
    return data["k"]


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
