"""Argument declarations: ``Arg``, one declared scalar argument of an operator, and its checks (§8).

An operator declares its arguments with ``Arg(...)`` inside ``@operator(args=...)``
(``hndl.declaration``). Everything about one argument is validated here when it is declared
(``E_REGISTRY``); checks that need the whole operator, such as ``dim=`` naming a shape symbol,
stay with the operator. Author values are checked later by :meth:`Arg.normalize`
(``E_ARGUMENT``). ``hndl.declaration`` re-exports ``Arg`` and ``MISSING``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, NoReturn, Optional

from .errors import HNDLError, shown

__all__ = [
    "MISSING", "ARG_TYPES", "MAX_SEQUENCE_ITEMS", "MAX_STRING_BYTES", "MAX_INT", "MAX_EXTENT", "FLOAT32_MAX", "LARGEST_FINITE", "Arg",
    "TensorCount", "registry_error",
]

#: Supported argument types: Python scalars plus three named bounded containers.
ARG_TYPES: tuple[Any, ...] = (int, float, bool, str, "pair", "ints", "strs")

MAX_SEQUENCE_ITEMS = 64
MAX_STRING_BYTES = 16_384
MAX_INT = 2**63 - 1
#: The bound an operator declares (``max=MAX_EXTENT``) on an argument that becomes a tensor extent, a
#: count or a factor of one (a kernel size, a stride, a table's rows, an expansion): 2**31 - 1, the
#: default ``limits['max_dimension']`` and the largest int32, which torch's pooling and convolution
#: kernels index with. Products of such values can still overflow torch's int64 sizes; the build's
#: meta-device pass refuses those with E_RESOURCE before allocating anything.
MAX_EXTENT = 2**31 - 1
#: The largest finite float32: every float argument must lie within it, because torch converts a
#: Python float argument to the compute dtype's scalar type (float32 at the widest) and refuses one
#: that overflows (``value cannot be converted to type float without overflow``).
FLOAT32_MAX = float.fromhex("0x1.fffffep+127")
#: The largest finite value of each compute dtype (``torch.finfo(dtype).max``, without importing torch).
LARGEST_FINITE = {"float32": FLOAT32_MAX, "float16": 65504.0, "bfloat16": float.fromhex("0x1.fep+127")}

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


def registry_error(message: str, field: str, *remedies: str) -> NoReturn:
    """Raise the E_REGISTRY failure every declaration check uses (``Arg``'s and ``operator``'s)."""
    raise HNDLError("E_REGISTRY", message, field=field, remedies=remedies)


# --------------------------------------------------------------------------------------
# Arg
# --------------------------------------------------------------------------------------


class Arg:
    """One declared scalar argument of an operator (§8 "Argument declarations").

    ``type`` is one of :data:`ARG_TYPES`. Omitting ``default`` makes the argument required
    unless ``inferable=True``, which lets the resolver solve it and forbids a default.
    ``min``/``max`` bound ``int``, ``float`` and every element of ``"pair"``/``"ints"``;
    they are inclusive unless the matching ``exclusive_*`` flag is set. Every ``float`` value
    lies within +-:data:`FLOAT32_MAX`, the largest finite value of the widest compute dtype.
    ``choices`` restricts a ``str`` (or every element of ``"strs"``). ``dim`` ties an ``int``
    argument to a shape symbol. ``positional=False`` keeps the argument keyword-only.
    ``tensor_value=True`` marks a ``float`` that the module writes into a tensor of the plan's
    compute dtype (a parameter's starting value, a clamp bound): a build refuses a value that
    dtype cannot hold (``hndl.torch.build``), instead of making ``inf`` or failing on the first
    call. ``help`` is required and published in the catalog.

    Arg-level inconsistencies fail here with ``E_REGISTRY``; checks that need the operator
    (``dim`` naming a symbol, collisions with ports) happen in :func:`hndl.operator`. A declared
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
        "tensor_value",
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
        tensor_value: bool = False,
    ) -> None:
        _check_arg_type(type)
        _check_flags(exclusive_min=exclusive_min, exclusive_max=exclusive_max,
                     inferable=inferable, positional=positional, tensor_value=tensor_value)
        _check_tensor_value(type, tensor_value)
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
            ("tensor_value", tensor_value),
        ):
            object.__setattr__(self, slot, value)
        if default is not MISSING:
            if inferable:
                registry_error(
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

        ``int`` stays an int (booleans are rejected), ``float`` accepts ints and floats that are
        finite as float32 and returns a float, ``"pair"`` turns ``v`` into ``(v, v)``, and the
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
            float: "a number finite as float32",
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
            self._fail(name, node, f"{prefix}{shown(value)} exceeds abs(value) <= 2**63 - 1")
        return int(value)

    def _float(self, value: Any, name: str, node: Optional[str]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self._fail(name, node, f"must be a finite number, not {_describe(value)}")
        try:
            result = float(value)
        except OverflowError:
            self._fail(name, node, f"{shown(value)} is too large for a float")
        if not math.isfinite(result):
            self._fail(name, node, f"must be finite, not {value!r}")
        if abs(result) > FLOAT32_MAX:
            self._fail(name, node, f"{result!r} is beyond the largest float32 value {FLOAT32_MAX!r}; torch "
                                   "cannot convert it to a compute dtype")
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
            registry_error(
                f"Arg({_type_name(self.type)}): declared default {default!r} fails its own "
                f"validation: {err.message}",
                "default",
                "Give a default that satisfies the argument's type, bounds and choices.",
            )


class TensorCount(Arg):
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
    """Type plus a short repr of an offending value (``shown``: never failing on a digit flood)."""
    text = shown(value)
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
        registry_error(
            f"Arg type {type_!r} is not supported",
            "type",
            "Use one of int, float, bool, str, \"pair\", \"ints\" or \"strs\".",
        )


def _check_flags(**flags: Any) -> None:
    for flag, value in flags.items():
        if not isinstance(value, bool):
            registry_error(f"Arg {flag}= must be True or False, not {value!r}", flag)


def _check_tensor_value(type_: Any, tensor_value: bool) -> None:
    if tensor_value and type_ is not float:
        registry_error(
            f"Arg({_type_name(type_)}) cannot declare tensor_value=True; only float arguments can",
            "tensor_value",
            "Declare the argument as Arg(float, ...), or drop tensor_value=True.",
        )


def _check_help(type_: Any, help_: Any) -> None:
    if not isinstance(help_, str) or not help_.strip():
        registry_error(
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
        registry_error(f"Arg({name}) cannot declare numeric bounds", "min" if lo is not None else "max")
    for flag, bound, field in ((ex_lo, lo, "min"), (ex_hi, hi, "max")):
        if bound is None:
            if flag:
                registry_error(f"Arg({name}) sets exclusive_{field} without {field}", f"exclusive_{field}")
            continue
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            registry_error(f"Arg({name}) {field}= must be a finite number, not {bound!r}", field)
    if not _bounds_admit(type_, lo, hi, ex_lo, ex_hi):
        registry_error(
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
        registry_error(f"Arg({name}) cannot declare choices; only str and \"strs\" can", "choices")
    if isinstance(choices, (str, bytes)) or not isinstance(choices, (list, tuple)):
        registry_error(f"Arg({name}) choices must be a tuple of strings, not {choices!r}", "choices")
    choices = tuple(choices)
    if not choices or not all(isinstance(c, str) for c in choices):
        registry_error(f"Arg({name}) choices must be a non-empty tuple of strings", "choices")
    if len(set(choices)) != len(choices):
        registry_error(f"Arg({name}) choices repeat a value: {choices!r}", "choices")
    return choices


def _check_dim(type_: Any, dim: Any) -> None:
    if dim is None:
        return
    if type_ is not int:
        registry_error(f"Arg({_type_name(type_)}) cannot bind dim=; only int arguments can", "dim")
    if not isinstance(dim, str) or not dim.isidentifier():
        registry_error(f"Arg(int) dim= must name a shape symbol, not {dim!r}", "dim")
