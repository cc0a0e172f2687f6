"""Construction declarations: initialization and trainability records (§11).

Both frontends accept two reserved metadata keywords on any operation, ``init=`` and
``trainable=``. This module turns what an author wrote into the canonical records a plan
stores, and validates records read back from a saved plan. It is pure data: it imports no
torch, allocates nothing and draws no randomness. The backend (``hndl.torch.initialize``)
verifies the targets against a constructed module and applies the records.

Canonical records::

    initialization = {"kind": "torch_default@1" | "torch_default@2", "overrides": {path: value}}
    trainability   = {"default": None | bool, "overrides": {path: bool}}

An initialization override is a float32-rounded constant or, only under ``torch_default@2``,
a scheme record ``{"kind": "<scheme>", <every keyword>: <canonical value>}``. A node whose
overrides are all constants, including the empty default, is ``torch_default@1``; adding at
least one scheme selects ``torch_default@2``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from .arg import FLOAT32_MAX
from .errors import HNDLError

__all__ = [
    "SCHEME_NAMES",
    "SCHEME_ROUTINES",
    "SCHEME_KEYWORDS",
    "FAN_MODES",
    "NONLINEARITIES",
    "TWO_DIMENSIONAL_SCHEMES",
    "MAX_ENTRIES",
    "MAX_PATH_CHARS",
    "NORMAL_REACH",
    "INIT_V1",
    "INIT_V2",
    "InitScheme",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "truncated_normal",
    "normal",
    "uniform",
    "orthogonal",
    "make_scheme",
    "scheme_from_record",
    "canonical_float32",
    "check_path",
    "normalize_initialization",
    "normalize_trainability",
    "check_initialization_record",
    "check_trainability_record",
]

#: The closed set of initializer schemes, in the order §11 lists them.
SCHEME_NAMES = (
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "truncated_normal",
    "normal",
    "uniform",
    "orthogonal",
)

#: The torch.nn.init routine each scheme names.
SCHEME_ROUTINES: Mapping[str, str] = MappingProxyType(
    {
        "xavier_uniform": "xavier_uniform_",
        "xavier_normal": "xavier_normal_",
        "kaiming_uniform": "kaiming_uniform_",
        "kaiming_normal": "kaiming_normal_",
        "truncated_normal": "trunc_normal_",
        "normal": "normal_",
        "uniform": "uniform_",
        "orthogonal": "orthogonal_",
    }
)

#: Each scheme's keywords with their canonical defaults, in the routine's own order.
SCHEME_KEYWORDS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "xavier_uniform": MappingProxyType({"gain": 1.0}),
        "xavier_normal": MappingProxyType({"gain": 1.0}),
        "kaiming_uniform": MappingProxyType(
            {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"}
        ),
        "kaiming_normal": MappingProxyType(
            {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"}
        ),
        "truncated_normal": MappingProxyType({"mean": 0.0, "std": 1.0, "a": -2.0, "b": 2.0}),
        "normal": MappingProxyType({"mean": 0.0, "std": 1.0}),
        "uniform": MappingProxyType({"a": 0.0, "b": 1.0}),
        "orthogonal": MappingProxyType({"gain": 1.0}),
    }
)

#: Values the ``mode`` keyword accepts.
FAN_MODES = ("fan_in", "fan_out")

#: Names torch.nn.init.calculate_gain accepts, as §11 lists them.
NONLINEARITIES = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "selu",
)

#: Schemes that need a parameter of at least two dimensions (fan or matrix based).
TWO_DIMENSIONAL_SCHEMES = frozenset(
    {"xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal"}
)

#: Bounds on each author mapping and each parameter path (§11).
MAX_ENTRIES = 256
MAX_PATH_CHARS = 256

INIT_V1 = "torch_default@1"
INIT_V2 = "torch_default@2"

#: How many standard deviations from its mean a normal draw may land, for the finiteness checks:
#: torch draws normals by a Box-Muller transform of uniforms of at most 53 bits, which reaches
#: about 8.6. A normal-based scheme is accepted only where mean +- 9 * std is finite.
NORMAL_REACH = 9.0

_STRING_KEYWORDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"mode": FAN_MODES, "nonlinearity": NONLINEARITIES}
)

_SEGMENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)"
_PATH = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*", re.ASCII)

_FLT_MAX = FLOAT32_MAX
_FLT_MAX_INT = (2**24 - 1) << 104  # the largest finite binary32 value, as an int


def _error(code: str, message: str, *, node: Optional[str], field: Optional[str], remedy=None):
    return HNDLError(
        code, message, node=node, field=field, remedies=(remedy,) if remedy else ()
    )


# ---------------------------------------------------------------------------------------
# float32 constants
# ---------------------------------------------------------------------------------------


def _int_to_float32(value: int) -> float:
    """Round an exact int to the nearest binary32 value (ties to even), once.

    Converting through float first would round twice for ints wider than 53 bits.
    """
    magnitude = abs(value)
    if magnitude <= 2**53:
        return float(value)  # exact, then a single rounding to binary32 below
    shift = magnitude.bit_length() - 24
    mantissa, remainder = divmod(magnitude, 1 << shift)
    half = 1 << (shift - 1)
    if remainder > half or (remainder == half and mantissa & 1):
        mantissa += 1
    if (mantissa << shift) > _FLT_MAX_INT:
        return math.inf if value > 0 else -math.inf
    rounded = float(mantissa << shift)  # at most 24 significant bits: exact
    return rounded if value > 0 else -rounded


def canonical_float32(
    value: Any, *, field: str, node: Optional[str] = None, code: str = "E_INITIALIZATION"
) -> float:
    """Return ``value`` rounded to IEEE binary32, as the plan stores it.

    The value must have exact type int or float (bool is rejected), be finite, and round to
    a finite binary32 value. Underflow to zero is kept, and so is the sign of zero.
    """
    kind = type(value)
    if kind is bool or kind not in (int, float):
        raise _error(
            code,
            f"{field} must be an int or float number, not {kind.__name__} {value!r}",
            node=node,
            field=field,
            remedy="Write a finite number literal such as 0, 1.0 or 0.02.",
        )
    if kind is float:
        if not math.isfinite(value):
            raise _error(
                code,
                f"{field} must be finite, got {value!r}",
                node=node,
                field=field,
                remedy="Write a finite number; nan and infinities are not constants.",
            )
        try:
            rounded = struct.unpack("<f", struct.pack("<f", value))[0]
        except OverflowError:
            rounded = math.inf
    else:
        rounded = _int_to_float32(value)
        if math.isfinite(rounded):
            rounded = struct.unpack("<f", struct.pack("<f", rounded))[0]
    if not math.isfinite(rounded):
        raise _error(
            code,
            f"{field} = {value!r} does not round to a finite float32 value "
            f"(largest magnitude is {_FLT_MAX!r})",
            node=node,
            field=field,
            remedy=f"Use a number whose magnitude is at most {_FLT_MAX!r}.",
        )
    return rounded


def _is_canonical_float(value: Any) -> bool:
    if type(value) is not float or not math.isfinite(value):
        return False
    try:
        back = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return False
    return struct.pack("<d", back) == struct.pack("<d", value)


def _value_key(value: Any) -> Any:
    """An equality key that tells -0.0 from 0.0, as the canonical encoding does."""
    if type(value) is float:
        return ("f", struct.pack("<d", value))
    return ("s", value)


# ---------------------------------------------------------------------------------------
# Initializer schemes
# ---------------------------------------------------------------------------------------


def _normalize_scheme_kwargs(
    kind: Any, kwargs: Any, *, node: Optional[str], field: Optional[str]
) -> dict:
    if type(kind) is not str or kind not in SCHEME_KEYWORDS:
        raise _error(
            "E_INITIALIZATION",
            f"unknown initializer scheme {kind!r}",
            node=node,
            field=field,
            remedy=f"Use one of {', '.join(SCHEME_NAMES)}.",
        )
    if not isinstance(kwargs, Mapping):
        raise _error(
            "E_INITIALIZATION",
            f"{kind} keywords must be a mapping, not {type(kwargs).__name__}",
            node=node,
            field=field,
        )
    defaults = SCHEME_KEYWORDS[kind]
    where = f"{field}.{kind}" if field else kind
    for key in kwargs:
        if type(key) is not str or key not in defaults:
            allowed = ", ".join(defaults)
            raise _error(
                "E_INITIALIZATION",
                f"{kind}() has no keyword {key!r}; it accepts {allowed}",
                node=node,
                field=where,
                remedy=f"Use only the keywords {allowed} of {kind}().",
            )
    values: dict = {}
    for key, default in defaults.items():
        raw = kwargs.get(key, default)
        if key in _STRING_KEYWORDS:
            choices = _STRING_KEYWORDS[key]
            if type(raw) is not str or raw not in choices:
                raise _error(
                    "E_INITIALIZATION",
                    f"{kind}({key}=...) must be one of {', '.join(choices)}; got {raw!r}",
                    node=node,
                    field=f"{where}.{key}",
                    remedy=f"Write {key}= as one of the strings {', '.join(choices)}.",
                )
            values[key] = raw
        else:
            values[key] = canonical_float32(raw, field=f"{where}.{key}", node=node)
    _check_scheme_domain(kind, values, node=node, field=where)
    return values


def _check_scheme_domain(kind: str, values: Mapping[str, Any], *, node, field) -> None:
    """Argument relations the torch routine requires, checked before any build.

    Besides each routine's own preconditions, a scheme must be able to write finite values in
    float32, the widest compute dtype. The backend repeats that check for the plan's compute
    dtype and each parameter's shape (which fan-based bounds depend on) before it initializes
    any node.
    """
    if kind in ("xavier_uniform", "xavier_normal") and not values["gain"] >= 0.0:
        spread = "bound" if kind == "xavier_uniform" else "standard deviation"
        raise _error(
            "E_INITIALIZATION",
            f"{kind}(gain={values['gain']!r}) needs gain >= 0: torch.nn.init.{SCHEME_ROUTINES[kind]} "
            f"refuses a negative gain, which would make the {spread} of its draw negative",
            node=node,
            field=f"{field}.gain",
            remedy="Give a non-negative gain (only orthogonal() accepts a negative one).",
        )
    if kind == "normal" and not values["std"] >= 0.0:
        raise _error(
            "E_INITIALIZATION",
            f"normal(std={values['std']!r}) needs std >= 0",
            node=node,
            field=f"{field}.std",
            remedy="Give a non-negative std.",
        )
    if kind == "truncated_normal":
        if not values["std"] > 0.0:
            raise _error(
                "E_INITIALIZATION",
                f"truncated_normal(std={values['std']!r}) needs std > 0",
                node=node,
                field=f"{field}.std",
                remedy="Give a positive std.",
            )
        if not values["a"] < values["b"]:
            raise _error(
                "E_INITIALIZATION",
                f"truncated_normal(a={values['a']!r}, b={values['b']!r}) needs a < b",
                node=node,
                field=f"{field}.a",
                remedy="Give a lower bound a strictly below the upper bound b.",
            )
    if kind == "uniform" and not values["a"] <= values["b"]:
        raise _error(
            "E_INITIALIZATION",
            f"uniform(a={values['a']!r}, b={values['b']!r}) needs a <= b",
            node=node,
            field=f"{field}.a",
            remedy="Give a lower bound a that is not above the upper bound b.",
        )
    if kind == "normal":
        reach = abs(values["mean"]) + NORMAL_REACH * values["std"]
        if reach > _FLT_MAX:
            raise _error(
                "E_INITIALIZATION",
                f"normal(mean={values['mean']!r}, std={values['std']!r}) draws values up to |mean| + "
                f"{NORMAL_REACH:g} * std = {reach:.4g}, beyond the largest float32 value {_FLT_MAX!r}",
                node=node,
                field=f"{field}.std",
                remedy=f"Keep |mean| + {NORMAL_REACH:g} * std at most {_FLT_MAX!r}.",
            )
    if kind == "uniform" and values["b"] - values["a"] > _FLT_MAX:
        raise _error(
            "E_INITIALIZATION",
            f"uniform(a={values['a']!r}, b={values['b']!r}) spans {values['b'] - values['a']:.4g}, more than "
            f"the largest float32 value {_FLT_MAX!r}, which torch.nn.init.uniform_ refuses",
            node=node,
            field=f"{field}.a",
            remedy=f"Narrow the bounds so that b - a is at most {_FLT_MAX!r}.",
        )


class InitScheme:
    """One initializer scheme call, immutable, with every keyword at its canonical value.

    Built by the eight public scheme functions (``xavier_uniform(gain=1.0)`` ...) or by
    :func:`make_scheme`. ``record()`` is the plan's scheme record.
    """

    __slots__ = ("_kind", "_kwargs", "_key")

    def __init__(self, kind: str, kwargs: Optional[Mapping[str, Any]] = None) -> None:
        given = {} if kwargs is None else kwargs
        values = _normalize_scheme_kwargs(kind, given, node=None, field=None)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_kwargs", MappingProxyType(values))
        object.__setattr__(
            self, "_key", (kind, tuple((k, _value_key(v)) for k, v in values.items()))
        )

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def kwargs(self) -> Mapping[str, Any]:
        return self._kwargs

    @property
    def routine(self) -> str:
        """The torch.nn.init routine this scheme calls."""
        return SCHEME_ROUTINES[self._kind]

    def record(self) -> dict:
        """The canonical scheme record: ``{"kind": name, <keyword>: value, ...}``."""
        record = {"kind": self._kind}
        record.update(self._kwargs)
        return record

    def __setattr__(self, name, value):
        raise AttributeError("InitScheme is immutable")

    def __delattr__(self, name):
        raise AttributeError("InitScheme is immutable")

    def __eq__(self, other):
        if not isinstance(other, InitScheme):
            return NotImplemented
        return self._key == other._key

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self):
        return hash(self._key)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{self._kind}({inner})"

    def __reduce__(self):
        return (InitScheme, (self._kind, dict(self._kwargs)))


def xavier_uniform(*, gain: float = 1.0) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.xavier_uniform_`` (needs >= 2 dimensions)."""
    return InitScheme("xavier_uniform", {"gain": gain})


def xavier_normal(*, gain: float = 1.0) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.xavier_normal_`` (needs >= 2 dimensions)."""
    return InitScheme("xavier_normal", {"gain": gain})


def kaiming_uniform(
    *, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.kaiming_uniform_`` (needs >= 2 dimensions)."""
    return InitScheme("kaiming_uniform", {"a": a, "mode": mode, "nonlinearity": nonlinearity})


def kaiming_normal(
    *, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.kaiming_normal_`` (needs >= 2 dimensions)."""
    return InitScheme("kaiming_normal", {"a": a, "mode": mode, "nonlinearity": nonlinearity})


def truncated_normal(
    *, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0
) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.trunc_normal_``."""
    return InitScheme("truncated_normal", {"mean": mean, "std": std, "a": a, "b": b})


def normal(*, mean: float = 0.0, std: float = 1.0) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.normal_``."""
    return InitScheme("normal", {"mean": mean, "std": std})


def uniform(*, a: float = 0.0, b: float = 1.0) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.uniform_``."""
    return InitScheme("uniform", {"a": a, "b": b})


def orthogonal(*, gain: float = 1.0) -> InitScheme:
    """Initializer scheme calling ``torch.nn.init.orthogonal_`` (needs >= 2 dimensions)."""
    return InitScheme("orthogonal", {"gain": gain})


def make_scheme(
    name: str, kwargs: Mapping[str, Any], *, node: Optional[str] = None
) -> InitScheme:
    """Build a scheme from a name and keywords, as the config frontend parses them.

    An unknown scheme, an unknown keyword or a value of the wrong type is E_INITIALIZATION.
    """
    try:
        return InitScheme(name, kwargs)
    except HNDLError as err:
        raise err.located(node=node) from None


def scheme_from_record(
    record: Any, *, node: Optional[str] = None, field: Optional[str] = None
) -> InitScheme:
    """Rebuild a scheme from a stored scheme record, which must be canonical and complete."""
    if not isinstance(record, Mapping) or "kind" not in record:
        raise _error(
            "E_INITIALIZATION",
            f"malformed scheme record {record!r}",
            node=node,
            field=field,
            remedy="Restore the plan from an unmodified file.",
        )
    kind = record["kind"]
    if type(kind) is not str or kind not in SCHEME_KEYWORDS:
        raise _error(
            "E_INITIALIZATION",
            f"unknown initializer scheme {kind!r} in a stored record",
            node=node,
            field=field,
            remedy=f"Use one of {', '.join(SCHEME_NAMES)}.",
        )
    keywords = {k: v for k, v in record.items() if k != "kind"}
    expected = set(SCHEME_KEYWORDS[kind])
    if set(keywords) != expected:
        missing = sorted(expected - set(keywords), key=str)
        extra = sorted(set(keywords) - expected, key=str)
        raise _error(
            "E_INITIALIZATION",
            f"stored {kind} record must carry exactly the keywords "
            f"{', '.join(SCHEME_KEYWORDS[kind])}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unexpected {extra}" if extra else ""),
            node=node,
            field=field,
            remedy="Restore the plan from an unmodified file.",
        )
    for key, value in keywords.items():
        if key not in _STRING_KEYWORDS and not _is_canonical_float(value):
            raise _error(
                "E_INITIALIZATION",
                f"stored {kind} keyword {key}={value!r} is not a canonical float32 number",
                node=node,
                field=f"{field}.{key}" if field else key,
                remedy="Restore the plan from an unmodified file.",
            )
    try:
        return InitScheme(kind, keywords)
    except HNDLError as err:
        raise err.located(node=node, field=field) from None


# ---------------------------------------------------------------------------------------
# Paths and author mappings
# ---------------------------------------------------------------------------------------


def check_path(path: Any, *, code: str, field: str, node: Optional[str] = None) -> str:
    """Validate one relative parameter path such as ``projection.weight`` or ``layers.0.bias``."""
    if type(path) is not str:
        raise _error(
            code,
            f"parameter path must be a string, not {type(path).__name__} {path!r}",
            node=node,
            field=field,
            remedy="Key the mapping by exact parameter names such as 'weight' or 'layers.0.bias'.",
        )
    if not path.isascii() or len(path) > MAX_PATH_CHARS or not _PATH.fullmatch(path):
        if not path.isascii():
            why = "contains non-ASCII characters"
        elif len(path) > MAX_PATH_CHARS:
            why = f"is longer than {MAX_PATH_CHARS} characters"
        else:
            why = "is not dot-separated identifier or number segments"
        shown = path if len(path) <= 80 else path[:77] + "..."
        raise _error(
            code,
            f"parameter path {shown!r} {why}",
            node=node,
            field=field,
            remedy="Name a registered parameter exactly, e.g. 'weight' or 'layers.0.weight'; "
            "wildcards and indexing expressions are unsupported.",
        )
    return path


def _check_mapping(value: Any, *, code: str, field: str, node: Optional[str]) -> None:
    if len(value) > MAX_ENTRIES:
        raise _error(
            code,
            f"{field} has {len(value)} entries; at most {MAX_ENTRIES} are allowed",
            node=node,
            field=field,
            remedy=f"Declare at most {MAX_ENTRIES} parameter names per operation.",
        )


def normalize_initialization(init: Any, *, node: Optional[str] = None) -> dict:
    """Turn an author ``init=`` mapping into the canonical initialization record.

    Omission is the caller passing ``{}``. Values are constants (rounded to float32) or
    :class:`InitScheme` objects; any scheme selects ``torch_default@2``.
    """
    field = "init"
    if init is None:
        raise _error(
            "E_INITIALIZATION",
            "init=None is invalid; omit init to keep constructor initialization",
            node=node,
            field=field,
            remedy="Omit init, or give a mapping such as {'bias': 0}.",
        )
    if isinstance(init, InitScheme) or not isinstance(init, Mapping):
        raise _error(
            "E_INITIALIZATION",
            f"init must be a mapping from parameter names to values, not {type(init).__name__}",
            node=node,
            field=field,
            remedy="Write init={'weight': xavier_uniform(), 'bias': 0}.",
        )
    _check_mapping(init, code="E_INITIALIZATION", field=field, node=node)
    overrides: dict = {}
    any_scheme = False
    for path, value in init.items():
        check_path(path, code="E_INITIALIZATION", field=field, node=node)
        where = f"{field}.{path}"
        if isinstance(value, InitScheme):
            overrides[path] = value.record()
            any_scheme = True
        elif type(value) in (int, float):
            overrides[path] = canonical_float32(value, field=where, node=node)
        else:
            raise _error(
                "E_INITIALIZATION",
                f"{where} must be a number or one initializer scheme call, "
                f"not {type(value).__name__} {value!r}",
                node=node,
                field=where,
                remedy="Give a finite number or one of "
                + ", ".join(name + "()" for name in SCHEME_NAMES)
                + ".",
            )
    return {
        "kind": INIT_V2 if any_scheme else INIT_V1,
        "overrides": dict(sorted(overrides.items())),
    }


def normalize_trainability(trainable: Any, *, node: Optional[str] = None) -> dict:
    """Turn an author ``trainable=`` boolean or mapping into the canonical trainability record."""
    field = "trainable"
    if trainable is None:
        raise _error(
            "E_TRAINABILITY",
            "trainable=None is invalid; omit trainable to keep constructor flags",
            node=node,
            field=field,
            remedy="Omit trainable, or give True, False, or a mapping such as {'bias': False}.",
        )
    if type(trainable) is bool:
        return {"default": trainable, "overrides": {}}
    if not isinstance(trainable, Mapping):
        raise _error(
            "E_TRAINABILITY",
            f"trainable must be a bool or a mapping of parameter names to bools, "
            f"not {type(trainable).__name__} {trainable!r}",
            node=node,
            field=field,
        )
    _check_mapping(trainable, code="E_TRAINABILITY", field=field, node=node)
    overrides: dict = {}
    for path, flag in trainable.items():
        check_path(path, code="E_TRAINABILITY", field=field, node=node)
        if type(flag) is not bool:
            raise _error(
                "E_TRAINABILITY",
                f"{field}.{path} must be True or False, not {type(flag).__name__} {flag!r}",
                node=node,
                field=f"{field}.{path}",
            )
        overrides[path] = flag
    return {"default": None, "overrides": dict(sorted(overrides.items()))}


# ---------------------------------------------------------------------------------------
# Stored records
# ---------------------------------------------------------------------------------------


def _record_error(code: str, message: str, node: Optional[str], field: str) -> HNDLError:
    remedy = "Restore the plan from an unmodified file."
    return _error(code, message, node=node, field=field, remedy=remedy)


def check_initialization_record(record: Any, *, node: Optional[str] = None) -> dict:
    """Validate a stored initialization record and return a fresh canonical copy.

    ``torch_default@2`` requires at least one scheme record; a scheme record under
    ``torch_default@1`` is E_INITIALIZATION, as is any malformed content.
    """
    field = "initialization"
    code = "E_INITIALIZATION"
    if not isinstance(record, Mapping) or set(record) != {"kind", "overrides"}:
        raise _record_error(
            code,
            f"initialization record must have exactly 'kind' and 'overrides': {record!r}",
            node,
            field,
        )
    kind = record["kind"]
    if type(kind) is not str or kind not in (INIT_V1, INIT_V2):
        raise _record_error(
            code,
            f"unknown initialization kind {kind!r}; expected {INIT_V1} or {INIT_V2}",
            node,
            field,
        )
    overrides = record["overrides"]
    if not isinstance(overrides, Mapping):
        raise _record_error(code, "initialization overrides must be a mapping", node, field)
    _check_mapping(overrides, code=code, field=f"{field}.overrides", node=node)
    checked: dict = {}
    schemes = 0
    for path, value in overrides.items():
        check_path(path, code=code, field=f"{field}.overrides", node=node)
        where = f"{field}.overrides.{path}"
        if isinstance(value, Mapping):
            if kind == INIT_V1:
                raise _record_error(
                    code,
                    f"{where} holds a scheme record, which {INIT_V1} cannot carry "
                    f"(schemes need {INIT_V2})",
                    node,
                    where,
                )
            checked[path] = scheme_from_record(value, node=node, field=where).record()
            schemes += 1
        elif _is_canonical_float(value):
            checked[path] = value
        else:
            raise _record_error(
                code, f"{where} = {value!r} is not a canonical float32 constant", node, where
            )
    if kind == INIT_V2 and schemes == 0:
        raise _record_error(
            code,
            f"{INIT_V2} requires at least one scheme record; all-constant overrides are {INIT_V1}",
            node,
            field,
        )
    return {"kind": kind, "overrides": dict(sorted(checked.items()))}


def check_trainability_record(record: Any, *, node: Optional[str] = None) -> dict:
    """Validate a stored trainability record and return a fresh canonical copy."""
    field = "trainability"
    code = "E_TRAINABILITY"
    if not isinstance(record, Mapping) or set(record) != {"default", "overrides"}:
        raise _record_error(
            code,
            f"trainability record must have exactly 'default' and 'overrides': {record!r}",
            node,
            field,
        )
    default = record["default"]
    if default is not None and type(default) is not bool:
        raise _record_error(
            code, f"trainability default must be null or a boolean, not {default!r}", node, field
        )
    overrides = record["overrides"]
    if not isinstance(overrides, Mapping):
        raise _record_error(code, "trainability overrides must be a mapping", node, field)
    _check_mapping(overrides, code=code, field=f"{field}.overrides", node=node)
    if default is not None and overrides:
        raise _record_error(
            code,
            "a boolean trainability default is never combined with named overrides",
            node,
            field,
        )
    checked: dict = {}
    for path, flag in overrides.items():
        check_path(path, code=code, field=f"{field}.overrides", node=node)
        if type(flag) is not bool:
            raise _record_error(
                code,
                f"{field}.overrides.{path} must be a boolean, not {flag!r}",
                node,
                f"{field}.overrides.{path}",
            )
        checked[path] = flag
    return {"default": default, "overrides": dict(sorted(checked.items()))}
