"""Operator declarations: the one source of truth for every HNDL operation (§8).

An operation is declared once, on the ``nn.Module`` subclass that implements it, with
``@operator(...)``. The resulting :class:`OperatorSpec` is what the resolver (ports, shape
patterns, relation, arguments, policies), the backend (the class itself), the test harness
(examples, reference) and the generated documentation (summary, docstring, help text) read.
Built-in and custom operators use exactly this decorator; there is no second registration
step.

Everything here is validated eagerly and fails with ``E_REGISTRY``; author values passed to
an operator later are checked by :meth:`Arg.normalize` and fail with ``E_ARGUMENT``.
Declaring an operator allocates nothing and runs no user code other than introspection of
the class's constructor signature.
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, NoReturn, Optional, Sequence

from .construction import SCHEME_NAMES
from .errors import HNDLError
from .shape_dsl import ShapeSignature, parse_shape

__all__ = [
    "MISSING",
    "ARG_TYPES",
    "RESERVED_METADATA",
    "INITIALIZER_NAMES",
    "Arg",
    "Example",
    "Policy",
    "OperatorSpec",
    "operator",
    "spec_of",
]

# --------------------------------------------------------------------------------------
# Constants and bounds (§8, §7, §11)
# --------------------------------------------------------------------------------------

#: Reserved node/construction metadata: never an argument, port or alias name (§7).
RESERVED_METADATA: tuple[str, ...] = ("name", "policy", "init", "trainable")

#: The eight initializer scheme names (§11); an alias may not shadow one.
INITIALIZER_NAMES: tuple[str, ...] = SCHEME_NAMES

#: Supported argument types: Python scalars plus three named bounded containers.
ARG_TYPES: tuple[Any, ...] = (int, float, bool, str, "pair", "ints", "strs")

#: Aliases the configuration frontend reserves for the external input and the output.
RESERVED_ALIASES: tuple[str, ...] = ("x", "out")

MAX_PORTS_PER_SIDE = 32
MAX_ARGS = 64
MAX_SYMBOLS = 64
MAX_NAME_CHARS = 64
MAX_CATEGORY_CHARS = 32
MAX_SEQUENCE_ITEMS = 64
MAX_STRING_BYTES = 16_384
MAX_INT = 2**63 - 1
MAX_VERSION = 2**31 - 1

#: The attribute (in the class's own ``__dict__``) that holds a class's declaration.
SPEC_ATTRIBUTE = "__hndl_operator__"

_IDENTITY_RE = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
_POLICY_IDENTITY_RE = re.compile(r"([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*)@([1-9][0-9]*)")
_ARG_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
_CATEGORY_RE = re.compile(r"[a-z][a-z0-9_ -]*")
_INT_TYPES = ("pair", "ints")  # container types whose elements are ints
_BOUNDED_TYPES = (int, float, "pair", "ints")
_CHOICE_TYPES = (str, "strs")


class _Missing:
    """The type of :data:`MISSING`; a single falsy, picklable-by-name sentinel."""

    _instance: Optional["_Missing"] = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


#: Sentinel meaning "no default was declared".
MISSING = _Missing()


def _type_name(type_: Any) -> str:
    """The spelling of an argument type in messages and reprs: ``int``, ``"pair"``."""
    return type_.__name__ if isinstance(type_, type) else repr(type_)


def _registry_error(message: str, field: str, *remedies: str) -> NoReturn:
    """Raise the E_REGISTRY failure every declaration check uses."""
    raise HNDLError("E_REGISTRY", message, field=field, remedies=remedies)


# --------------------------------------------------------------------------------------
# Arg
# --------------------------------------------------------------------------------------


class Arg:
    """One declared scalar argument of an operator (§8 "Argument declarations").

    ``type`` is one of :data:`ARG_TYPES`. Omitting ``default`` makes the argument required
    unless ``inferable=True``, which lets the resolver solve it and forbids a default.
    ``min``/``max`` bound ``int``, ``float`` and every element of ``"pair"``/``"ints"``;
    they are inclusive unless the matching ``exclusive_*`` flag is set. ``choices``
    restricts a ``str`` (or every element of ``"strs"``). ``dim`` ties an ``int`` argument
    to a shape symbol. ``positional=False`` keeps the argument keyword-only. ``help`` is
    required and published in the catalog.

    Arg-level inconsistencies fail here with ``E_REGISTRY``; checks that need the operator
    (``dim`` naming a symbol, collisions with ports) happen in :func:`operator`. A declared
    default is stored normalized (``Arg(float, 1).default == 1.0``). Instances are
    immutable, comparable and hashable.
    """

    __slots__ = (
        "type",
        "default",
        "min",
        "max",
        "exclusive_min",
        "exclusive_max",
        "help",
        "inferable",
        "dim",
        "positional",
        "choices",
    )

    def __init__(
        self,
        type: Any,
        default: Any = MISSING,
        *,
        min: Optional[float] = None,
        max: Optional[float] = None,
        exclusive_min: bool = False,
        exclusive_max: bool = False,
        help: str = "",
        inferable: bool = False,
        dim: Optional[str] = None,
        positional: bool = True,
        choices: Optional[Iterable[str]] = None,
    ) -> None:
        _check_arg_type(type)
        _check_flags(exclusive_min=exclusive_min, exclusive_max=exclusive_max,
                     inferable=inferable, positional=positional)
        _check_help(type, help)
        _check_bounds(type, min, max, exclusive_min, exclusive_max)
        choices = _check_choices(type, choices)
        _check_dim(type, dim)
        for slot, value in (
            ("type", type),
            ("default", MISSING),
            ("min", min),
            ("max", max),
            ("exclusive_min", exclusive_min),
            ("exclusive_max", exclusive_max),
            ("help", help),
            ("inferable", inferable),
            ("dim", dim),
            ("positional", positional),
            ("choices", choices),
        ):
            object.__setattr__(self, slot, value)
        if default is not MISSING:
            if inferable:
                _registry_error(
                    f"Arg({_type_name(type)}): an inferable argument cannot declare a default",
                    "default",
                    "Drop the default, or drop inferable=True.",
                )
            object.__setattr__(self, "default", self._normalize_default(default))

    # -- immutability, equality ---------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Arg is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Arg is immutable; cannot delete {name!r}")

    def _key(self) -> tuple:
        return tuple(getattr(self, slot) for slot in Arg.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Arg):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        parts = [_type_name(self.type)]
        if self.default is not MISSING:
            parts.append(repr(self.default))
        defaults = Arg.__init__.__kwdefaults__
        for slot in Arg.__slots__[2:]:
            value = getattr(self, slot)
            if value != defaults[slot]:
                parts.append(f"{slot}={value!r}")
        return f"Arg({', '.join(parts)})"

    def __reduce__(self):
        kwargs = {slot: getattr(self, slot) for slot in Arg.__slots__[2:]}
        return (_rebuild_arg, (self.type, self.default, kwargs))

    # -- derived ------------------------------------------------------------------------
    @property
    def required(self) -> bool:
        """True when the author must give the value: no default and not inferable."""
        return self.default is MISSING and not self.inferable

    # -- validation of author values ----------------------------------------------------
    def normalize(self, value: Any, *, name: str, node: Optional[str] = None) -> Any:
        """Validate one author value and return its normalized form.

        ``int`` stays an int (booleans are rejected), ``float`` accepts finite ints and
        floats and returns a float, ``"pair"`` turns ``v`` into ``(v, v)``, and the
        containers return tuples. ``None`` is accepted only when the declared default is
        ``None``. Any violation raises ``HNDLError("E_ARGUMENT", field=name, node=node)``.
        """
        if value is None:
            if self.default is None:
                return None
            self._fail(name, node, "must not be None")
        if self.type is int:
            return self._bounded(self._int(value, name, node), name, node)
        if self.type is float:
            return self._bounded(self._float(value, name, node), name, node)
        if self.type is bool:
            if not isinstance(value, bool):
                self._fail(name, node, f"must be a bool, not {_describe(value)}")
            return bool(value)
        if self.type is str:
            return self._string(value, name, node)
        if self.type == "pair":
            return self._pair(value, name, node)
        items = self._sequence(value, name, node)
        if self.type == "ints":
            return tuple(self._bounded(self._int(v, name, node, "each item"), name, node) for v in items)
        return tuple(self._string(v, name, node, "each item") for v in items)

    def _fail(self, name: str, node: Optional[str], problem: str) -> NoReturn:
        raise HNDLError(
            "E_ARGUMENT",
            f"argument {name!r} {problem}",
            field=name,
            node=node,
            remedies=(f"Give {name} as {self._expectation()}.",),
        )

    def _expectation(self) -> str:
        """A short phrase describing acceptable values, used in remedies."""
        what = {
            int: "an int",
            float: "a finite number",
            bool: "True or False",
            str: "a string",
            "pair": "an int or a pair of ints",
            "ints": f"a tuple of at most {MAX_SEQUENCE_ITEMS} ints",
            "strs": f"a tuple of at most {MAX_SEQUENCE_ITEMS} strings",
        }[self.type]
        if self.choices is not None:
            what += " from " + ", ".join(repr(c) for c in self.choices)
        interval = self._interval_text()
        if interval:
            what += f" in {interval}"
        return what

    def _interval_text(self) -> str:
        if self.min is None and self.max is None:
            return ""
        lo = "(-inf" if self.min is None else ("(" if self.exclusive_min else "[") + repr(self.min)
        hi = "inf)" if self.max is None else repr(self.max) + (")" if self.exclusive_max else "]")
        return f"{lo}, {hi}"

    def _int(self, value: Any, name: str, node: Optional[str], what: str = "") -> int:
        prefix = f"{what} " if what else ""
        if isinstance(value, bool) or not isinstance(value, int):
            self._fail(name, node, f"{prefix}must be an int, not {_describe(value)}")
        if abs(value) > MAX_INT:
            self._fail(name, node, f"{prefix}{value} exceeds abs(value) <= 2**63 - 1")
        return int(value)

    def _float(self, value: Any, name: str, node: Optional[str]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._fail(name, node, f"must be a finite number, not {_describe(value)}")
        try:
            result = float(value)
        except OverflowError:
            self._fail(name, node, f"{value} is too large for a float")
        if not math.isfinite(result):
            self._fail(name, node, f"must be finite, not {value!r}")
        return result

    def _string(self, value: Any, name: str, node: Optional[str], what: str = "") -> str:
        prefix = f"{what} " if what else ""
        if not isinstance(value, str):
            self._fail(name, node, f"{prefix}must be a string, not {_describe(value)}")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            self._fail(name, node, f"{prefix}is not valid UTF-8 text")
        if size > MAX_STRING_BYTES:
            self._fail(name, node, f"{prefix}is {size} UTF-8 bytes; at most {MAX_STRING_BYTES} are allowed")
        if self.choices is not None and value not in self.choices:
            self._fail(name, node, f"{prefix}{value!r} is not one of {', '.join(map(repr, self.choices))}")
        return str(value)

    def _pair(self, value: Any, name: str, node: Optional[str]) -> tuple[int, int]:
        if isinstance(value, (list, tuple)):
            if len(value) != 2:
                self._fail(name, node, f"must be an int or two ints, not {len(value)} items")
            first, second = (self._bounded(self._int(v, name, node, "each item"), name, node) for v in value)
            return (first, second)
        single = self._bounded(self._int(value, name, node), name, node)
        return (single, single)

    def _sequence(self, value: Any, name: str, node: Optional[str]) -> tuple:
        if not isinstance(value, (list, tuple)):
            self._fail(name, node, f"must be a list or tuple, not {_describe(value)}")
        if len(value) > MAX_SEQUENCE_ITEMS:
            self._fail(name, node, f"has {len(value)} items; at most {MAX_SEQUENCE_ITEMS} are allowed")
        return tuple(value)

    def _bounded(self, value: Any, name: str, node: Optional[str]) -> Any:
        if not _within(value, self.min, self.max, self.exclusive_min, self.exclusive_max):
            self._fail(name, node, f"value {value!r} is outside {self._interval_text()}")
        return value

    def _normalize_default(self, default: Any) -> Any:
        """Run the default through normalize; a failing default is a declaration error."""
        if default is None:
            return None  # None is a legal default; it also makes None a legal value
        try:
            return self.normalize(default, name="default")
        except HNDLError as err:
            _registry_error(
                f"Arg({_type_name(self.type)}): declared default {default!r} fails its own "
                f"validation: {err.message}",
                "default",
                "Give a default that satisfies the argument's type, bounds and choices.",
            )


class _TensorCount(Arg):
    """The ``input_count`` of a variadic input: how many tensors one call passes.

    The frontends set it from the call and authors never write it, so a count outside its
    declared bounds is reported as tensors passed, with nesting calls as the remedy, instead
    of asking for an argument nobody typed. It equals the ``Arg`` it was made from.
    """

    __slots__ = ("alias", "port")

    def __init__(self, arg: Arg, alias: str, port: str) -> None:
        super().__init__(arg.type, arg.default, **{slot: getattr(arg, slot) for slot in Arg.__slots__[2:]})
        object.__setattr__(self, "alias", alias)
        object.__setattr__(self, "port", port)

    def _bounded(self, value: Any, name: str, node: Optional[str]) -> Any:
        if _within(value, self.min, self.max, self.exclusive_min, self.exclusive_max):
            return value
        low = None if self.min is None else self.min + (1 if self.exclusive_min else 0)
        high = None if self.max is None else self.max - (1 if self.exclusive_max else 0)
        span = f"{low} to {high}" if low is not None and high is not None else \
            f"at least {low}" if low is not None else f"at most {high}"
        alias = self.alias
        if high is not None and value > high:
            remedy = (f"Pass at most {high} tensors to one {alias} call; to combine more, nest the calls, "
                      f"e.g. {alias}({alias}(t0, ..., t{high - 1}), t{high}, ...).")
        else:
            remedy = f"Pass at least {low} tensors to {alias}, as {self.port}0, {self.port}1, ... or positionally."
        raise HNDLError(
            "E_ARGUMENT",
            f"{alias} takes {span} input tensors in one call ({self.port}0, {self.port}1, ...), got {value}",
            field=name,
            node=node,
            remedies=(remedy,),
        )


def _rebuild_arg(type_: Any, default: Any, kwargs: dict) -> Arg:
    """Unpickle helper for :class:`Arg`."""
    return Arg(type_, default, **kwargs)


def _describe(value: Any) -> str:
    """Type plus a short repr of an offending value."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def _within(value: float, lo: Optional[float], hi: Optional[float], ex_lo: bool, ex_hi: bool) -> bool:
    """Whether ``value`` lies in the interval the bounds describe."""
    if lo is not None and (value <= lo if ex_lo else value < lo):
        return False
    if hi is not None and (value >= hi if ex_hi else value > hi):
        return False
    return True


def _check_arg_type(type_: Any) -> None:
    scalar = isinstance(type_, type) and type_ in (int, float, bool, str)
    if not scalar and not (isinstance(type_, str) and type_ in ("pair", "ints", "strs")):
        _registry_error(
            f"Arg type {type_!r} is not supported",
            "type",
            "Use one of int, float, bool, str, \"pair\", \"ints\" or \"strs\".",
        )


def _check_flags(**flags: Any) -> None:
    for flag, value in flags.items():
        if not isinstance(value, bool):
            _registry_error(f"Arg {flag}= must be True or False, not {value!r}", flag)


def _check_help(type_: Any, help_: Any) -> None:
    if not isinstance(help_, str) or not help_.strip():
        _registry_error(
            f"Arg({_type_name(type_)}) needs non-empty help text",
            "help",
            "Every Arg must carry help=...; the catalog publishes it.",
        )


def _check_bounds(type_: Any, lo: Any, hi: Any, ex_lo: bool, ex_hi: bool) -> None:
    """Bounds only on numeric types, finite numbers, and admitting at least one value."""
    name = _type_name(type_)
    if lo is None and hi is None and not (ex_lo or ex_hi):
        return
    if type_ not in _BOUNDED_TYPES:
        _registry_error(f"Arg({name}) cannot declare numeric bounds", "min" if lo is not None else "max")
    for flag, bound, field in ((ex_lo, lo, "min"), (ex_hi, hi, "max")):
        if bound is None:
            if flag:
                _registry_error(f"Arg({name}) sets exclusive_{field} without {field}", f"exclusive_{field}")
            continue
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            _registry_error(f"Arg({name}) {field}= must be a finite number, not {bound!r}", field)
    if not _bounds_admit(type_, lo, hi, ex_lo, ex_hi):
        _registry_error(
            f"Arg({name}) bounds {'(' if ex_lo else '['}{lo}, {hi}{')' if ex_hi else ']'} admit no value",
            "min",
            "Widen the bounds or drop an exclusive flag.",
        )


def _bounds_admit(type_: Any, lo: Any, hi: Any, ex_lo: bool, ex_hi: bool) -> bool:
    """Whether at least one value of the type satisfies the bounds."""
    if type_ is float:
        if lo is None or hi is None:
            return True
        return lo < hi or (lo == hi and not ex_lo and not ex_hi)
    smallest = -MAX_INT if lo is None else (math.floor(lo) + 1 if ex_lo else math.ceil(lo))
    largest = MAX_INT if hi is None else (math.ceil(hi) - 1 if ex_hi else math.floor(hi))
    return max(smallest, -MAX_INT) <= min(largest, MAX_INT)


def _check_choices(type_: Any, choices: Any) -> Optional[tuple[str, ...]]:
    if choices is None:
        return None
    name = _type_name(type_)
    if type_ not in _CHOICE_TYPES:
        _registry_error(f"Arg({name}) cannot declare choices; only str and \"strs\" can", "choices")
    if isinstance(choices, (str, bytes)) or not isinstance(choices, (list, tuple)):
        _registry_error(f"Arg({name}) choices must be a tuple of strings, not {choices!r}", "choices")
    choices = tuple(choices)
    if not choices or not all(isinstance(c, str) for c in choices):
        _registry_error(f"Arg({name}) choices must be a non-empty tuple of strings", "choices")
    if len(set(choices)) != len(choices):
        _registry_error(f"Arg({name}) choices repeat a value: {choices!r}", "choices")
    return choices


def _check_dim(type_: Any, dim: Any) -> None:
    if dim is None:
        return
    if type_ is not int:
        _registry_error(f"Arg({_type_name(type_)}) cannot bind dim=; only int arguments can", "dim")
    if not isinstance(dim, str) or not dim.isidentifier():
        _registry_error(f"Arg(int) dim= must name a shape symbol, not {dim!r}", "dim")


# --------------------------------------------------------------------------------------
# Example and Policy
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One runnable documentation/test example of an operator.

    ``source`` is configuration source using the operator; ``input_shape`` and
    ``output_shape`` are the external contracts the harness checks. ``network=True`` marks an
    example that needs network access (a remote checkpoint): offline, the harness skips it
    with that reason and the catalog shows it without a resolved table.
    """

    source: str
    input_shape: Any
    output_shape: Any
    note: str = ""
    input_dtype: Any = None
    network: bool = False


class Policy:
    """A named, versioned set of hard requirements over one operator's own arguments (§5).

    ``identity`` is ``dotted.name@N``; ``requires`` is a non-empty mapping from argument
    names to required values, stored read-only. The declaring :func:`operator` checks the
    names and normalizes the values against its arguments.
    """

    __slots__ = ("identity", "requires")

    def __init__(self, identity: str, requires: Mapping[str, Any]) -> None:
        if not isinstance(identity, str) or not _POLICY_IDENTITY_RE.fullmatch(identity):
            _registry_error(
                f"policy identity {identity!r} must look like 'dotted.name@N'",
                "policies",
                "Use a lowercase dotted name and a positive version, e.g. 'spatial.up2_transpose@1'.",
            )
        if not isinstance(requires, Mapping) or not requires:
            _registry_error(
                f"policy {identity} needs a non-empty mapping of requirements",
                "policies",
                "A policy states at least one hard requirement over the operator's arguments.",
            )
        if not all(isinstance(key, str) for key in requires):
            _registry_error(f"policy {identity} requirement names must be strings", "policies")
        object.__setattr__(self, "identity", identity)
        object.__setattr__(self, "requires", MappingProxyType(dict(requires)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Policy is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Policy is immutable; cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Policy):
            return NotImplemented
        return self.identity == other.identity and dict(self.requires) == dict(other.requires)

    def __hash__(self) -> int:
        return hash((self.identity, tuple(sorted(self.requires))))

    def __repr__(self) -> str:
        return f"Policy({self.identity!r}, {dict(self.requires)!r})"

    def __reduce__(self):
        return (Policy, (self.identity, dict(self.requires)))


# --------------------------------------------------------------------------------------
# OperatorSpec
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class OperatorSpec:
    """The validated declaration of one operator; built only by :func:`operator`."""

    cls: type
    alias: str
    identity: str
    version: int
    summary: str
    docstring: str
    shape: ShapeSignature
    shape_text: Optional[str]
    relation: Optional[Callable]
    args: Mapping[str, Arg]
    examples: tuple[Example, ...]
    category: Optional[str]
    positional_rest: Optional[str]
    policies: Mapping[str, Policy]
    validate: Optional[Callable]
    finalize: Optional[Callable]
    reference: Optional[Callable]
    outputs_from: Optional[str]
    batch: str
    restore: Optional[Callable] = None

    def __hash__(self) -> int:
        return hash((self.qualified, self.cls))

    def __repr__(self) -> str:
        return f"OperatorSpec({self.alias!r}, {self.qualified}, cls={self.cls.__qualname__})"

    @property
    def qualified(self) -> str:
        """The exact ``identity@version`` plans record, e.g. ``linear@1``."""
        return f"{self.identity}@{self.version}"

    @property
    def positional_args(self) -> tuple[str, ...]:
        """Arguments that may be given positionally, in declaration order."""
        return tuple(name for name, arg in self.args.items() if arg.positional)

    def input_ports(self, input_count: Optional[int] = None) -> tuple[str, ...]:
        """Input port names in binding order; a variadic ``x*`` expands to ``x0..x{n-1}``."""
        if not self.shape.variadic_input:
            return tuple(port.name for port in self.shape.inputs)
        prefix = self.shape.inputs[0].name
        if isinstance(input_count, bool) or not isinstance(input_count, int) or input_count < 0:
            raise HNDLError(
                "E_ARGUMENT",
                f"operator {self.alias!r} has variadic input {prefix}*; its port names need a "
                f"non-negative input_count, not {input_count!r}",
                field="input_count",
            )
        return _expand(prefix, input_count)

    def output_ports(self, args: Mapping[str, Any]) -> tuple[str, ...]:
        """Output port names for normalized ``args``.

        A variadic ``out*`` takes its count from ``args[outputs_from]`` (the length of an
        ``ints``/``strs`` value or an ``int`` value). A count of zero, or an absent value,
        leaves the single port named by the prefix; otherwise ``out0..out{n-1}``.
        """
        if not self.shape.variadic_output:
            return tuple(port.name for port in self.shape.outputs)
        prefix = self.shape.outputs[0].name
        count = self._output_count(args.get(self.outputs_from) if args is not None else None)
        return (prefix,) if count == 0 else _expand(prefix, count)

    def _output_count(self, value: Any) -> int:
        if value is None:
            count = 0
        elif isinstance(value, (list, tuple)):
            count = len(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            count = value
        else:
            count = -1
        if not 0 <= count <= MAX_PORTS_PER_SIDE:
            raise HNDLError(
                "E_ARGUMENT",
                f"operator {self.alias!r}: {self.outputs_from}={value!r} does not give an output "
                f"count in 0..{MAX_PORTS_PER_SIDE}",
                field=self.outputs_from,
            )
        return count

    def port_dtypes(
        self, inputs: Sequence[str], outputs: Sequence[str], *, compute: str, carried: Sequence[str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Expected dtype per input port ("any" accepts all) and produced dtype per output port.

        ``compute`` stands for the plan's compute dtype; an ``any`` output carries the dtype of
        the node's first input (``carried[0]``). Resolver and backend both read this rule.
        """

        def declared(patterns, port):
            for pattern in patterns:
                if pattern.name == port or pattern.variadic:
                    return pattern.dtype
            return "compute"

        expected = {}
        for port in inputs:
            dtype = declared(self.shape.inputs, port)
            expected[port] = compute if dtype == "compute" else dtype
        produced = {}
        for port in outputs:
            dtype = declared(self.shape.outputs, port)
            if dtype == "compute":
                produced[port] = compute
            elif dtype == "any":
                produced[port] = carried[0] if carried else compute
            else:
                produced[port] = dtype
        return expected, produced

    @property
    def opaque(self) -> bool:
        """True for an asserted contract: nothing relates the outputs' extents to the inputs'.

        That is an operator with no relation whose output patterns share no symbol and no
        ``...`` run with its input patterns (the batch axis aside). Its declared output pattern
        is taken on trust, so the resolver infers nothing backward through it and the runtime
        checks its outputs on every call rather than once per input signature.
        """
        if self.relation is not None:
            return False

        def linked(ports) -> set:
            return {dim.symbol or "..." for port in ports for dim in port.dims or ()
                    if dim.kind in ("symbol", "ellipsis")}

        return not linked(self.shape.inputs) & linked(self.shape.outputs)

    def policy(self, name: str) -> Policy:
        """The policy this operator declares under ``name``; E_POLICY_CONFLICT otherwise."""
        try:
            return self.policies[name]
        except (KeyError, TypeError):
            declared = ", ".join(self.policies) or "none"
            raise HNDLError(
                "E_POLICY_CONFLICT",
                f"operator {self.alias!r} does not declare policy {name!r} (declared: {declared})",
                field="policy",
                remedies=(f"Select one of the policies {self.alias} declares, or omit policy=.",),
            ) from None


def _expand(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{index}" for index in range(count))


# --------------------------------------------------------------------------------------
# The decorator
# --------------------------------------------------------------------------------------


def operator(
    alias: str,
    *,
    identity: Optional[str] = None,
    version: int = 1,
    summary: Optional[str] = None,
    shape: Optional[str] = None,
    relation: Optional[Callable] = None,
    shape_text: Optional[str] = None,
    args: Optional[Mapping[str, Arg]] = None,
    examples: Iterable[Example] = (),
    category: Optional[str] = None,
    positional_rest: Optional[str] = None,
    policies: Optional[Mapping[str, Policy]] = None,
    validate: Optional[Callable] = None,
    finalize: Optional[Callable] = None,
    reference: Optional[Callable] = None,
    outputs_from: Optional[str] = None,
    batch: str = "shared",
    restore: Optional[Callable] = None,
) -> Callable[[type], type]:
    """Declare the decorated ``nn.Module`` subclass as the operator ``alias`` (§8).

    Every field is validated now, when ``operator(...)`` is called; the class and its
    constructor signature are checked when the decorator is applied. Any violation raises
    ``HNDLError("E_REGISTRY")`` naming the alias and the field. The decorator stores the
    :class:`OperatorSpec` as ``cls.__dict__["__hndl_operator__"]`` and returns ``cls``.
    """
    _check_alias(alias)
    where = f"operator {alias!r}"
    identity = _check_identity(where, alias if identity is None else identity)
    _check_version(where, version)
    summary = _check_summary(where, summary)
    _check_optional_text(where, shape_text, "shape_text")
    _check_category(where, category)
    _check_callables(where, relation=relation, validate=validate, finalize=finalize, reference=reference,
                     restore=restore)
    examples = _check_examples(where, examples)
    signature = _parse(where, shape)
    _check_ports(where, signature, relation)
    _check_batch(where, batch, relation)
    arg_map = _check_args(where, args, signature)
    _check_variadics(where, signature, arg_map, outputs_from)
    if signature.variadic_input:
        arg_map["input_count"] = _TensorCount(arg_map["input_count"], alias, signature.inputs[0].name)
    _check_positional_rest(where, positional_rest, arg_map)
    policy_map = _check_policies(where, policies, arg_map)

    def decorate(cls: type) -> type:
        _check_class(where, cls)
        _check_constructor(where, cls, arg_map, signature)
        spec = OperatorSpec(
            cls=cls,
            alias=alias,
            identity=identity,
            version=version,
            summary=summary,
            docstring=inspect.cleandoc(cls.__doc__) if cls.__dict__.get("__doc__") else "",
            shape=signature,
            shape_text=shape_text,
            relation=relation,
            args=MappingProxyType(dict(arg_map)),
            examples=examples,
            category=category,
            positional_rest=positional_rest,
            policies=MappingProxyType(dict(policy_map)),
            validate=validate,
            finalize=finalize,
            reference=reference,
            outputs_from=outputs_from,
            batch=batch,
            restore=restore,
        )
        setattr(cls, SPEC_ATTRIBUTE, spec)
        return cls

    return decorate


def spec_of(cls: type) -> OperatorSpec:
    """The declaration stored on ``cls`` itself; a subclass of a declared class is not declared."""
    spec = cls.__dict__.get(SPEC_ATTRIBUTE) if isinstance(cls, type) else None
    if not isinstance(spec, OperatorSpec):
        name = getattr(cls, "__qualname__", repr(cls))
        _registry_error(
            f"{name} is not a declared operator",
            "cls",
            "Decorate the class itself with @hndl.operator(...) (subclasses are not declared).",
        )
    return spec


# -- field checks ----------------------------------------------------------------------


def _check_alias(alias: Any) -> None:
    if not isinstance(alias, str):
        _registry_error(f"operator alias must be a string, not {alias!r}", "alias")
    problem = None
    if not alias.isascii() or not alias.isidentifier():
        problem = "is not an ASCII Python identifier"
    elif keyword.iskeyword(alias):
        problem = "is a Python keyword"
    elif alias.startswith("_"):
        problem = "starts with an underscore"
    elif len(alias) > MAX_NAME_CHARS:
        problem = f"is longer than {MAX_NAME_CHARS} characters"
    elif alias in RESERVED_ALIASES:
        problem = "is reserved for the external input x / output out"
    elif alias in RESERVED_METADATA:
        problem = "is reserved node metadata (name, policy, init, trainable)"
    elif alias in INITIALIZER_NAMES:
        problem = "shadows an initializer scheme name"
    if problem:
        _registry_error(f"operator alias {alias!r} {problem}", "alias", "Choose a different alias.")


def _check_identity(where: str, identity: Any) -> str:
    if not isinstance(identity, str) or not _IDENTITY_RE.fullmatch(identity):
        _registry_error(
            f"{where}: identity {identity!r} must be lowercase dotted identifiers such as "
            "'example.silu' (no '@'; the version is separate)",
            "identity",
            "Pass identity='namespace.name' and version=N.",
        )
    return identity


def _check_version(where: str, version: Any) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        _registry_error(f"{where}: version must be a positive int, not {version!r}", "version")


def _check_summary(where: str, summary: Any) -> str:
    if not isinstance(summary, str) or not summary.strip():
        _registry_error(
            f"{where}: summary is required (one sentence for the catalog index)",
            "summary",
            "Pass summary=\"...\"; the class docstring is the long description.",
        )
    return summary.strip()


def _check_optional_text(where: str, value: Any, field: str) -> None:
    if value is not None and not isinstance(value, str):
        _registry_error(f"{where}: {field} must be a string, not {value!r}", field)


def _check_category(where: str, category: Any) -> None:
    if category is None:
        return
    if (
        not isinstance(category, str)
        or len(category) > MAX_CATEGORY_CHARS
        or not _CATEGORY_RE.fullmatch(category)
    ):
        _registry_error(
            f"{where}: category {category!r} must be short lowercase text "
            f"(at most {MAX_CATEGORY_CHARS} characters)",
            "category",
        )


def _check_callables(where: str, **hooks: Any) -> None:
    for field, hook in hooks.items():
        if hook is not None and not callable(hook):
            _registry_error(f"{where}: {field} must be callable, not {hook!r}", field)


def _check_examples(where: str, examples: Any) -> tuple[Example, ...]:
    if examples is None:
        return ()
    if not isinstance(examples, (list, tuple)):
        _registry_error(f"{where}: examples must be a tuple of Example, not {examples!r}", "examples")
    for example in examples:
        if not isinstance(example, Example):
            _registry_error(f"{where}: examples must contain Example entries, not {example!r}", "examples")
        if not isinstance(example.source, str) or not example.source.strip():
            _registry_error(f"{where}: every Example needs non-empty source text", "examples")
    return tuple(examples)


def _parse(where: str, shape: Any) -> ShapeSignature:
    if shape is None:
        _registry_error(
            f"{where}: shape= is required",
            "shape",
            "Declare ports, e.g. shape=\"x[B, ...] -> out[B, ...]\".",
        )
    if not isinstance(shape, str):
        _registry_error(f"{where}: shape must be a DSL string, not {shape!r}", "shape")
    try:
        return parse_shape(shape)
    except HNDLError as err:
        if err.code != "E_REGISTRY":
            raise
        raise HNDLError(
            "E_REGISTRY",
            f"{where}: {err.message}",
            field="shape",
            chain=err.chain,
            remedies=err.remedies,
        ) from err


def _port_names(signature: ShapeSignature) -> tuple[str, ...]:
    return tuple(port.name for port in signature.inputs + signature.outputs)


def _check_ports(where: str, signature: ShapeSignature, relation: Optional[Callable]) -> None:
    """Port-side bounds, reserved names, and the patterns that need relation=."""
    for side, ports in (("input", signature.inputs), ("output", signature.outputs)):
        if len(ports) > MAX_PORTS_PER_SIDE:
            _registry_error(f"{where}: {len(ports)} {side} ports exceed {MAX_PORTS_PER_SIDE}", "shape")
        if any(port.variadic for port in ports) and len(ports) != 1:
            _registry_error(f"{where}: a variadic {side} port must be the sole {side} port", "shape")
    if len(signature.symbols) > MAX_SYMBOLS:
        _registry_error(f"{where}: {len(signature.symbols)} dimension symbols exceed {MAX_SYMBOLS}", "shape")
    names = _port_names(signature)
    for name in names:
        if name in RESERVED_METADATA:
            _registry_error(f"{where}: port {name!r} collides with reserved metadata", "shape")
        if len(name) > MAX_NAME_CHARS:
            _registry_error(
                f"{where}: port name {name[:16]!r}... exceeds {MAX_NAME_CHARS} characters", "shape"
            )
    for port in signature.outputs:
        if port.variadic and port.dims is not None:
            _registry_error(f"{where}: variadic output {port.name}* carries no shape pattern", "shape")
    if relation is None:
        needy = [p for p in signature.inputs if p.dims is None]
        needy += [p for p in signature.outputs if p.dims is None or p.variadic]
        for port in needy:
            label = f"{port.name}*" if port.variadic else port.name
            _registry_error(
                f"{where}: port {label!r} has no DSL pattern and needs relation=",
                "relation",
                "Give the port a pattern, or pass relation= to constrain it.",
            )


def _check_batch(where: str, batch: Any, relation: Optional[Callable]) -> None:
    if batch not in ("shared", "relation"):
        _registry_error(f"{where}: batch must be 'shared' or 'relation', not {batch!r}", "batch")
    if batch == "relation" and relation is None:
        _registry_error(f"{where}: batch='relation' needs relation= to relate the batch entries", "batch")


def _check_args(where: str, args: Any, signature: ShapeSignature) -> dict[str, Arg]:
    """Argument names, types, collisions with ports/metadata, and dim bindings."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        _registry_error(f"{where}: args must be a mapping of names to Arg, not {args!r}", "args")
    if len(args) > MAX_ARGS:
        _registry_error(f"{where}: {len(args)} arguments exceed {MAX_ARGS}", "args")
    bound: dict[str, str] = {}
    for name, arg in args.items():
        _check_arg_name(where, name, signature)
        if not isinstance(arg, Arg):
            _registry_error(f"{where}: argument {name!r} must be declared with Arg(...), not {arg!r}", "args")
        if arg.dim is not None:
            _check_dim_binding(where, name, arg.dim, signature, bound)
    return dict(args)


def _check_arg_name(where: str, name: Any, signature: ShapeSignature) -> None:
    if (
        not isinstance(name, str)
        or len(name) > MAX_NAME_CHARS
        or not _ARG_NAME_RE.fullmatch(name)
        or keyword.iskeyword(name)
    ):
        _registry_error(
            f"{where}: argument name {name!r} must be a lowercase identifier of at most "
            f"{MAX_NAME_CHARS} characters",
            "args",
        )
    if name in RESERVED_METADATA:
        _registry_error(
            f"{where}: argument {name!r} collides with reserved metadata (name, policy, init, trainable)",
            "args",
            "Rename the argument.",
        )
    for port in signature.inputs + signature.outputs:
        if name == port.name or port.variadic and re.fullmatch(re.escape(port.name) + r"[0-9]+", name):
            _registry_error(
                f"{where}: argument {name!r} collides with a port name",
                "args",
                "Rename the argument or the port.",
            )


def _check_dim_binding(where: str, name: str, dim: str, signature: ShapeSignature, bound: dict) -> None:
    if dim == "B" or dim not in signature.symbols:
        _registry_error(
            f"{where}: argument {name!r} binds dim={dim!r}, which is not a dimension symbol of the shape"
            + (" (B is the batch axis)" if dim == "B" else ""),
            "args",
        )
    if dim in bound:
        _registry_error(f"{where}: arguments {bound[dim]!r} and {name!r} both bind dim={dim!r}", "args")
    bound[dim] = name


def _check_variadics(
    where: str, signature: ShapeSignature, args: Mapping[str, Arg], outputs_from: Any
) -> None:
    if signature.variadic_input:
        count = args.get("input_count")
        if count is None or count.type is not int:
            _registry_error(f"{where}: a variadic input needs an int argument named input_count", "args")
    if not signature.variadic_output:
        if outputs_from is not None:
            _registry_error(f"{where}: outputs_from= is only for a variadic out* port", "outputs_from")
        return
    arg = args.get(outputs_from) if isinstance(outputs_from, str) else None
    if arg is None:
        _registry_error(
            f"{where}: a variadic output needs outputs_from= naming a declared argument",
            "outputs_from",
        )
    if arg.type in ("ints", "strs"):
        return
    if arg.type is int and _int_range_within(arg, 0, MAX_PORTS_PER_SIDE):
        return
    _registry_error(
        f"{where}: outputs_from={outputs_from!r} must be an 'ints' or 'strs' argument, or an int "
        f"argument bounded within 0..{MAX_PORTS_PER_SIDE}",
        "outputs_from",
    )


def _int_range_within(arg: Arg, lo: int, hi: int) -> bool:
    """Whether every int the Arg's bounds admit lies in ``lo..hi``."""
    if arg.min is None or arg.max is None:
        return False
    smallest = math.floor(arg.min) + 1 if arg.exclusive_min else math.ceil(arg.min)
    largest = math.ceil(arg.max) - 1 if arg.exclusive_max else math.floor(arg.max)
    return smallest >= lo and largest <= hi


def _check_positional_rest(where: str, positional_rest: Any, args: Mapping[str, Arg]) -> None:
    if positional_rest is None:
        return
    arg = args.get(positional_rest) if isinstance(positional_rest, str) else None
    if arg is None or arg.type != "ints":
        _registry_error(
            f"{where}: positional_rest={positional_rest!r} must name an 'ints' argument",
            "positional_rest",
        )


def _check_policies(where: str, policies: Any, args: Mapping[str, Arg]) -> dict[str, Policy]:
    """Policy aliases, and requirements naming own arguments with valid values (normalized)."""
    if policies is None:
        return {}
    if not isinstance(policies, Mapping):
        _registry_error(f"{where}: policies must be a mapping of alias to Policy", "policies")
    result: dict[str, Policy] = {}
    for name, policy in policies.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            _registry_error(f"{where}: policy alias {name!r} must be an identifier", "policies")
        if not isinstance(policy, Policy):
            _registry_error(f"{where}: policy {name!r} must be a Policy, not {policy!r}", "policies")
        result[name] = Policy(policy.identity, _normalized_requirements(where, name, policy, args))
    return result


def _normalized_requirements(where: str, name: str, policy: Policy, args: Mapping[str, Arg]) -> dict:
    requires = {}
    for field, value in policy.requires.items():
        if field not in args:
            _registry_error(
                f"{where}: policy {name!r} ({policy.identity}) requires {field!r}, which is not "
                "one of the operator's arguments",
                "policies",
            )
        try:
            requires[field] = args[field].normalize(value, name=field)
        except HNDLError as err:
            _registry_error(f"{where}: policy {name!r} requirement is invalid: {err.message}", "policies")
    return requires


def _check_class(where: str, cls: Any) -> None:
    import torch.nn  # deferred: declaring needs torch only once a class is decorated

    if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        _registry_error(f"{where}: the decorated object {cls!r} must be a torch.nn.Module subclass", "cls")
    if SPEC_ATTRIBUTE in cls.__dict__:
        _registry_error(
            f"{where}: {cls.__qualname__} is already declared as {cls.__dict__[SPEC_ATTRIBUTE].qualified}",
            "cls",
            "Decorate each class once; subclass it to declare a second operator.",
        )


def _check_constructor(where: str, cls: type, args: Mapping[str, Arg], signature: ShapeSignature) -> None:
    """Every declared arg is accepted by keyword; every required parameter can be supplied."""
    import torch.nn

    init = cls.__init__
    if init is torch.nn.Module.__init__:
        params: list[inspect.Parameter] = []  # accepts *args/**kwargs but rejects any of them
    else:
        try:
            params = list(inspect.signature(init).parameters.values())[1:]
        except (TypeError, ValueError) as err:
            _registry_error(f"{where}: cannot inspect {cls.__qualname__}.__init__: {err}", "cls")
    by_name = {p.name: p for p in params}
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    keywordable = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for name in args:
        param = by_name.get(name)
        if not (param is not None and param.kind in keywordable or param is None and var_keyword):
            _constructor_error(where, cls, f"argument {name!r} cannot be passed by keyword")
    suppliable = set(args) | (set(signature.symbols) - {"B"}) | {"input_shapes", "output_shapes"}
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.default is not param.empty:
            continue
        if param.name not in suppliable or param.kind is param.POSITIONAL_ONLY:
            _constructor_error(where, cls, f"required parameter {param.name!r} is neither a declared "
                               "argument, a shape symbol, input_shapes nor output_shapes")


def _constructor_error(where: str, cls: type, problem: str) -> NoReturn:
    _registry_error(
        f"{where}: constructor cannot accept the declared arguments: {cls.__qualname__}.__init__ {problem}",
        "cls",
        "Make __init__ take every declared argument by keyword, and give other parameters defaults.",
    )
