"""The bounded JSON encoding of the statement IR and of errors, between parser worker and host.

The worker sends plain JSON data, never pickles. The host decodes it strictly: every node
kind, field, type and position is checked, and anything unexpected is rejected with
E_RESOURCE as a malformed worker reply, so a compromised or confused worker cannot hand
the interpreter an object it would not have produced itself.
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import CODES, HNDLError
from .grammar import Assign, Call, Evaluate, Literal, Name, Pack, Pos, Program, SchemeCall
from .source import Source

#: Deepest value nesting a reply may carry (calls inside calls, literals inside literals).
MAX_DEPTH = 200


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


def decode_program(data: Any, source: Source) -> Program:
    statements = tuple(_decode_statement(item) for item in _list(data, "statements"))
    return Program(statements=statements, source=source)


def decode_error(data: Any) -> HNDLError:
    record = _dict(data, ("code", "message", "line", "column", "node", "field", "chain", "remedies"))
    code = record["code"]
    if code not in CODES:
        raise malformed(f"unknown error code {code!r}")
    return HNDLError(
        code,
        _str(record["message"]),
        line=_optional_int(record["line"]),
        column=_optional_int(record["column"]),
        node=_optional_str(record["node"]),
        field=_optional_str(record["field"]),
        file=None,
        chain=tuple(_str(item) for item in _list(record["chain"], "chain")),
        remedies=tuple(_str(item) for item in _list(record["remedies"], "remedies")),
    )


def _decode_statement(data: Any):
    kind = _kind(data)
    if kind == "assign":
        record = _dict(data, ("k", "targets", "unpack", "value", "pos"))
        targets = tuple(_identifier(item) for item in _list(record["targets"], "targets"))
        unpack = record["unpack"]
        if type(unpack) is not bool or not targets or (not unpack and len(targets) != 1):
            raise malformed("bad assignment targets")
        value = _decode_expr(record["value"], 0)
        if isinstance(value, Literal):
            raise malformed("literal assignment value")
        return Assign(targets=targets, unpack=unpack, value=value, pos=_decode_pos(record["pos"]))
    if kind == "eval":
        record = _dict(data, ("k", "call", "pos"))
        call = _decode_expr(record["call"], 0)
        if not isinstance(call, Call):
            raise malformed("expression statement that is not a call")
        return Evaluate(call=call, pos=_decode_pos(record["pos"]))
    raise malformed(f"unknown statement kind {kind!r}")


def _decode_expr(data: Any, depth: int):
    if depth > MAX_DEPTH:
        raise malformed("nesting too deep")
    kind = _kind(data)
    if kind == "name":
        record = _dict(data, ("k", "name", "pos"))
        return Name(name=_identifier(record["name"]), pos=_decode_pos(record["pos"]))
    if kind == "pack":
        record = _dict(data, ("k", "items", "pos"))
        items = tuple(_decode_expr(item, depth + 1) for item in _list(record["items"], "items"))
        if not all(isinstance(item, Name) for item in items):
            raise malformed("pack of non-names")
        return Pack(items=items, pos=_decode_pos(record["pos"]))
    if kind == "call":
        record = _dict(data, ("k", "alias", "args", "kwargs", "pos"))
        args = tuple(_decode_expr(item, depth + 1) for item in _list(record["args"], "args"))
        kwargs = []
        for pair in _list(record["kwargs"], "kwargs"):
            key, value = _pair(pair)
            kwargs.append((_identifier(key), _decode_expr(value, depth + 1)))
        if any(isinstance(item, Pack) for item in args) or any(isinstance(v, Pack) for _, v in kwargs):
            raise malformed("pack inside a call")
        return Call(alias=_identifier(record["alias"]), args=args, kwargs=tuple(kwargs), pos=_decode_pos(record["pos"]))
    if kind == "literal":
        record = _dict(data, ("k", "value", "pos"))
        return Literal(value=_decode_value(record["value"], depth + 1), pos=_decode_pos(record["pos"]))
    raise malformed(f"unknown expression kind {kind!r}")


def _decode_value(data: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise malformed("nesting too deep")
    if data is None or type(data) in (bool, int, str):
        return data
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
        return number
    if set(data) == {"tuple"}:
        return tuple(_decode_value(item, depth + 1) for item in _list(data["tuple"], "tuple"))
    if set(data) == {"list"}:
        return [_decode_value(item, depth + 1) for item in _list(data["list"], "list")]
    if set(data) == {"dict"}:
        result = {}
        for pair in _list(data["dict"], "dict"):
            key, value = _pair(pair)
            if not isinstance(key, str) or key in result:
                raise malformed("bad dict key")
            result[key] = _decode_value(value, depth + 1)
        return result
    if set(data) == {"scheme", "kwargs", "pos"}:
        kwargs = []
        for pair in _list(data["kwargs"], "kwargs"):
            key, value = _pair(pair)
            kwargs.append((_identifier(key), _decode_value(value, depth + 1)))
        return SchemeCall(scheme=_identifier(data["scheme"]), kwargs=tuple(kwargs), pos=_decode_pos(data["pos"]))
    raise malformed("bad literal")


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


def _identifier(data: Any) -> str:
    if type(data) is not str or not data.isidentifier():
        raise malformed("expected an identifier")
    return data


def _optional_int(data: Any):
    if data is not None and type(data) is not int:
        raise malformed("expected an int")
    return data


def _optional_str(data: Any):
    return None if data is None else _str(data)


def _decode_pos(data: Any) -> Pos:
    if type(data) is not list or len(data) != 2 or not all(type(item) is int and item >= 0 for item in data):
        raise malformed("bad position")
    return Pos(line=data[0], column=data[1])
