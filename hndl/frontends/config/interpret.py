"""Interpret a validated python_config@1 program by driving the binder, statement by statement.

The program arrives fully validated (grammar.py builds the ir.py records), so this walk only
evaluates: call arguments in Python order, nested calls first, locals as plain references. It
never executes code.
"""

from __future__ import annotations

from typing import Any

from ...construction import make_scheme
from ...errors import HNDLError
from ...graph import Graph
from ...registry import Registry
from ...suggestions import torch_spelling
from ..binder import Binder, Symbol
from .grammar import GRAMMAR_VERSION
from .ir import Assign, Call, Literal, Name, Pack, Program, SchemeCall


def interpret(program: Program, binder: Binder, registry: Registry) -> Graph:
    """Build the author graph of ``program``; output selection follows §7."""
    local: dict[str, Any] = dict(binder.inputs)
    operators = _Operators(registry)
    for statement in program.statements:
        if type(statement) is Assign:
            value = _evaluate(statement.value, local, binder, operators)
            _bind(statement, value, local)
        else:
            _evaluate(statement.call, local, binder, operators)
    provenance = {"kind": GRAMMAR_VERSION, "source": program.source.original}
    if program.source.file is not None:
        provenance["file"] = program.source.file
    if binder.contracts.named_outputs:
        chosen = {name: local[name] for name in binder.contracts.output_names if name in local}
        outputs = binder.select_named(chosen, what="configuration")
    else:
        outputs = {"output": binder.select_single(local.get("out"), what="the final value of out")}
    return binder.graph(outputs, frontend=GRAMMAR_VERSION, provenance=provenance)


class _Operators(dict):
    """The registry's declaration per alias, looked up once per program instead of per call."""

    def __init__(self, registry: Registry) -> None:
        super().__init__()
        self.registry = registry

    def __missing__(self, alias: str):
        spec = self[alias] = self.registry.get(alias)
        return spec


def _evaluate(expr: Any, local: dict, binder: Binder, operators: _Operators) -> Any:
    kind = type(expr)
    if kind is Call:
        spec = operators[expr.alias]
        args = [_evaluate(arg, local, binder, operators) for arg in expr.args]
        kwargs = {key: _evaluate(value, local, binder, operators) for key, value in expr.kwargs}
        return binder.call(spec, args, kwargs, line=expr.pos.line, column=expr.pos.column)
    if kind is Literal:
        value = expr.value
        return value if type(value) in _SCALARS else _literal(value)
    if kind is Name:
        return local[expr.name]
    if kind is Pack:
        return tuple(local[item.name] for item in expr.items)
    raise AssertionError(f"HNDL bug: unexpected configuration expression {expr!r}")


#: Literal values that need no conversion.
_SCALARS = frozenset({int, float, str, bool, type(None)})


def _literal(value: Any) -> Any:
    """Literal values, with init-mapping scheme calls turned into scheme records."""
    if isinstance(value, SchemeCall):
        try:
            return make_scheme(value.scheme, dict(value.kwargs))
        except HNDLError as error:
            raise error.located(line=value.pos.line, column=value.pos.column) from None
    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_literal(item) for item in value)
    return value


def _bind(statement: Assign, value: Any, local: dict) -> None:
    if not statement.unpack:
        local[statement.targets[0]] = value
        return
    if isinstance(value, Symbol):
        raise HNDLError(
            "E_OUTPUT_ARITY",
            f"cannot unpack one tensor into {len(statement.targets)} names",
            line=statement.pos.line,
            column=statement.pos.column,
            remedies=_single_output_remedies(value, statement),
        )
    if len(value) != len(statement.targets):
        raise HNDLError(
            "E_OUTPUT_ARITY",
            f"{len(value)} outputs cannot be unpacked into {len(statement.targets)} names",
            line=statement.pos.line,
            column=statement.pos.column,
            remedies=(f"Unpack exactly {len(value)} names.",),
        )
    for target, item in zip(statement.targets, value):
        local[target] = item


def _single_output_remedies(value: Symbol, statement: Assign) -> tuple[str, ...]:
    """"Assign a single-output call to one name", naming the operator; torch's ``values, indices =
    x.max(dim)`` is told that ``max`` returns the values only."""
    node = next((node for node in value.owner.nodes if node.id == value.ref.node), None)
    if node is None:
        return ("Assign a single-output call to one name.",)
    alias = node.spec.alias
    first = statement.targets[0]
    remedy = f"{alias} has one output: assign it to one name, e.g. {first} = {alias}(...)."
    declared = torch_spelling(node.spec)
    if declared is not None and declared.unpack:
        remedy += f" {declared.unpack}"
    return (remedy,)
