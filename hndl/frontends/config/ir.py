"""The python_config@1 statement IR: the immutable records a validated program is made of.

The records carry syntax and name scoping only, every position in the author's original
(pre-dedent) coordinates; what a call or a value means is the interpreter's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from .source import Source

__all__ = ["Pos", "Name", "Literal", "SchemeCall", "Call", "Expr", "Pack", "Assign", "Evaluate", "Statement",
           "Program", "IR"]


# The IR is built once per statement in the worker and again in the host, so its records take
# their fields through the instance dict directly: the frozen dataclass __init__ would route
# every field through object.__setattr__, which costs about twice as much. They stay frozen.


@dataclass(frozen=True, init=False)
class Pos:
    """A position in the original source: 1-based line and 1-based column."""

    line: int
    column: int

    def __init__(self, line: int, column: int) -> None:
        fields = self.__dict__
        fields["line"] = line
        fields["column"] = column


@dataclass(frozen=True, init=False)
class Name:
    """A reference to a tensor local or external input defined earlier."""

    name: str
    pos: Pos

    def __init__(self, name: str, pos: Pos) -> None:
        fields = self.__dict__
        fields["name"] = name
        fields["pos"] = pos


@dataclass(frozen=True, init=False)
class Literal:
    """An argument literal: int/float/bool/str/None or tuple/list/dict of literals.

    Dict keys are str. The only non-literal values are ``SchemeCall`` records, and only
    as direct values of the dict given to an ``init`` keyword.
    """

    value: Any
    pos: Pos

    def __init__(self, value: Any, pos: Pos) -> None:
        fields = self.__dict__
        fields["value"] = value
        fields["pos"] = pos


@dataclass(frozen=True)
class SchemeCall:
    """An initializer scheme call such as ``xavier_uniform(gain=1.0)``; literal kwargs only."""

    scheme: str
    kwargs: tuple[tuple[str, Any], ...]
    pos: Pos


@dataclass(frozen=True, init=False)
class Call:
    """A registered operator call, with arguments in source order."""

    alias: str
    args: tuple["Expr", ...]
    kwargs: tuple[tuple[str, "Expr"], ...]
    pos: Pos

    def __init__(self, alias: str, args: tuple["Expr", ...], kwargs: tuple[tuple[str, "Expr"], ...], pos: Pos) -> None:
        fields = self.__dict__
        fields["alias"] = alias
        fields["args"] = args
        fields["kwargs"] = kwargs
        fields["pos"] = pos


Expr = Union[Name, Literal, Call]


@dataclass(frozen=True)
class Pack:
    """A flat tuple/list of tensor names used as an assignment value."""

    items: tuple[Name, ...]
    pos: Pos


@dataclass(frozen=True, init=False)
class Assign:
    """``a = value`` (``unpack=False``) or ``a, b = value`` (``unpack=True``)."""

    targets: tuple[str, ...]
    unpack: bool
    value: Union[Name, Pack, Call]
    pos: Pos

    def __init__(self, targets: tuple[str, ...], unpack: bool, value: Union[Name, Pack, Call], pos: Pos) -> None:
        fields = self.__dict__
        fields["targets"] = targets
        fields["unpack"] = unpack
        fields["value"] = value
        fields["pos"] = pos


@dataclass(frozen=True, init=False)
class Evaluate:
    """An expression statement consisting of exactly one operator call."""

    call: Call
    pos: Pos

    def __init__(self, call: Call, pos: Pos) -> None:
        fields = self.__dict__
        fields["call"] = call
        fields["pos"] = pos


Statement = Union[Assign, Evaluate]


@dataclass(frozen=True)
class Program:
    """A fully validated module: its statements in order and the source they came from."""

    statements: tuple[Statement, ...]
    source: Source


class IR:
    """What the validator builds from each accepted form: here the statement IR above.

    The validator only ever calls these constructors, so another builder with the same
    methods (the worker's wire encoding) gets the same accepted forms in another shape.
    Initializer scheme calls are always SchemeCall records, inside literal values.
    """

    position = Pos
    name = Name
    literal = Literal
    call = Call
    pack = Pack
    assign = Assign
    evaluate = Evaluate

    @staticmethod
    def program(statements: tuple, source: Source) -> Program:
        return Program(statements=statements, source=source)
