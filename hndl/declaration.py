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

import functools
import inspect
import keyword
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, NoReturn, Optional, Sequence

from .arg import (  # Arg lives in hndl.arg; these names stay importable from here
    ARG_TYPES,
    LARGEST_FINITE,
    MAX_INT,
    MAX_SEQUENCE_ITEMS,
    MAX_STRING_BYTES,
    MISSING,
    Arg,
    TensorCount,
    registry_error as _registry_error,
)
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
    "TorchSpelling",
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

#: Aliases the configuration frontend reserves for the external input and the output.
RESERVED_ALIASES: tuple[str, ...] = ("x", "out")

MAX_PORTS_PER_SIDE = 32
MAX_ARGS = 64
MAX_SYMBOLS = 64
MAX_NAME_CHARS = 64
MAX_CATEGORY_CHARS = 32
MAX_VERSION = 2**31 - 1
#: Bounds of a torch spelling (:class:`TorchSpelling`): its texts, and its names and keywords.
MAX_TORCH_TEXT_CHARS = 500
MAX_TORCH_ENTRIES = 32

#: The attribute (in the class's own ``__dict__``) that holds a class's declaration.
SPEC_ATTRIBUTE = "__hndl_operator__"

_IDENTITY_RE = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
_POLICY_IDENTITY_RE = re.compile(r"([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*)@([1-9][0-9]*)")
_ARG_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
_CATEGORY_RE = re.compile(r"[a-z][a-z0-9_ -]*")


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
# TorchSpelling
# --------------------------------------------------------------------------------------

_TORCH_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TorchSpelling:
    """How torch (or torchvision, timm, diffusers) writes an operator, declared with
    ``operator(..., torch=TorchSpelling(...))``; the binder's torch-habit remedies read it.

    - ``signature``: torch's call, e.g. ``"nn.LayerNorm(normalized_shape, eps=1e-05)"``.
    - ``hint``: the remedy naming the HNDL spelling, offered when a call gives more positional
      values than the operator takes (and with a ``width_first`` refusal).
    - ``width_first``: the operator's first positional argument is a float where torch's first
      positional argument is an integer width: an integer there (``layer_norm(64)``) is refused as a
      transcribed width instead of being read as ``eps=64.0``. The first positional argument must be
      declared ``float``.
    - ``names``: torch (or paper) names that mean this operator: a tuple (each answered with
      ``call``) or a mapping name -> call. An unknown name matching one (case-insensitively, also
      snake-cased: ``BatchNorm2d`` -> ``batch_norm2d``) is told ``HNDL calls silu swish: write swish().``
    - ``call``: how to call the operator in that remedy, e.g. ``"swish()"`` (default ``alias(...)``).
    - ``keywords``: torch keyword -> the remedy for it, when a call passes that keyword and the
      operator has no such argument (``{"size": "upsample takes an integer scale factor ..."}``).
    - ``unpack``: a sentence added when a single-output call is unpacked into several names
      (torch's ``values, indices = x.max(dim)``).
    - ``habit``: ``fn(args) -> None | (field, message, remedies)``: called with a call's bound
      author arguments; a tuple refuses the call (E_ARGUMENT at ``field``) because torch's
      spelling would mean something else here (``reshape(-1, 16)``).

    Declaring a torch spelling also says the operator reads its widths from its inputs: a torch
    width keyword it lacks (``in_channels=``, ``normalized_shape=``, ...) is told to leave it out.
    Every text is bounded (:data:`MAX_TORCH_TEXT_CHARS`); a bad field raises ``E_REGISTRY``.
    """

    signature: str = ""
    hint: str = ""
    width_first: bool = False
    names: Any = ()
    call: str = ""
    keywords: Any = None
    unpack: str = ""
    habit: Optional[Callable] = None

    def __post_init__(self) -> None:
        for field in ("signature", "hint", "call", "unpack"):
            _check_torch_text(field, getattr(self, field))
        if not isinstance(self.width_first, bool):
            _registry_error(f"torch spelling: width_first must be True or False, not {self.width_first!r}",
                            "torch.width_first")
        if self.habit is not None and not callable(self.habit):
            _registry_error(f"torch spelling: habit must be callable, not {self.habit!r}", "torch.habit")
        names = self.names
        if isinstance(names, str) or not isinstance(names, (tuple, list, Mapping)):
            _registry_error(f"torch spelling: names must be a tuple of names or a mapping name -> call, "
                            f"not {names!r}", "torch.names")
        if not isinstance(names, Mapping):
            names = {name: self.call for name in names}
        object.__setattr__(self, "names", _torch_table("names", names))
        if self.keywords is None:
            object.__setattr__(self, "keywords", {})
        if not isinstance(self.keywords, Mapping):
            _registry_error(f"torch spelling: keywords must be a mapping keyword -> remedy, not "
                            f"{self.keywords!r}", "torch.keywords")
        object.__setattr__(self, "keywords", _torch_table("keywords", self.keywords))

    def __hash__(self) -> int:
        return hash((self.signature, self.hint, self.width_first, tuple(self.names.items()),
                     self.call, tuple(self.keywords.items()), self.unpack, self.habit))

    def __reduce__(self):
        return (_torch_spelling, (self.signature, self.hint, self.width_first, dict(self.names), self.call,
                                  dict(self.keywords), self.unpack, self.habit))

    def call_for(self, name: str, alias: str) -> Optional[str]:
        """How to call the operator for the torch name ``name`` (matched case-insensitively), or None."""
        lowered = name.lower()
        for declared, call in self.names.items():
            if declared.lower() == lowered:
                return call or self.call or f"{alias}(...)"
        return None


def _torch_spelling(*fields: Any) -> TorchSpelling:
    return TorchSpelling(*fields)


def _check_torch_text(field: str, value: Any) -> None:
    if not isinstance(value, str) or len(value) > MAX_TORCH_TEXT_CHARS:
        _registry_error(f"torch spelling: {field} must be text of at most {MAX_TORCH_TEXT_CHARS} characters, "
                        f"not {value!r:.80}", f"torch.{field}")


def _torch_table(field: str, table: Mapping) -> Mapping[str, str]:
    if len(table) > MAX_TORCH_ENTRIES:
        _registry_error(f"torch spelling: {field} holds {len(table)} entries, more than {MAX_TORCH_ENTRIES}",
                        f"torch.{field}")
    for key, text in table.items():
        if not isinstance(key, str) or len(key) > MAX_NAME_CHARS or not _TORCH_NAME_RE.fullmatch(key):
            _registry_error(f"torch spelling: {field} entry {key!r:.80} is not a name of at most "
                            f"{MAX_NAME_CHARS} characters", f"torch.{field}")
        _check_torch_text(field, text)
    return MappingProxyType(dict(table))


def _check_torch(where: str, torch: Any, arg_map: Mapping[str, Arg]) -> Optional[TorchSpelling]:
    if torch is None:
        return None
    if isinstance(torch, Mapping):  # torch=dict(signature=..., hint=...): the same fields, spelled as keywords
        unknown = sorted(set(torch) - set(TorchSpelling.__dataclass_fields__), key=str)
        if unknown:
            _registry_error(f"{where}: torch has no field {unknown[0]!r:.80}", "torch",
                            f"Use the TorchSpelling fields: {', '.join(TorchSpelling.__dataclass_fields__)}.")
        torch = TorchSpelling(**torch)
    if not isinstance(torch, TorchSpelling):
        _registry_error(f"{where}: torch must be a TorchSpelling, not {torch!r:.80}", "torch",
                        "Pass torch=hndl.TorchSpelling(signature=..., hint=...).")
    if torch.width_first:
        first = next((name for name, arg in arg_map.items() if arg.positional), None)
        if first is None or arg_map[first].type is not float:
            _registry_error(f"{where}: torch width_first needs a float first positional argument, "
                            f"not {first!r}", "torch.width_first",
                            "Declare width_first only where torch's integer width would land on a float.")
    return torch


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
    runtime_check: Optional[Callable] = None
    torch: Optional[TorchSpelling] = None

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        """Specs key the solver's caches on every node, so their hash is computed once."""
        return hash((self.qualified, self.cls))

    def __repr__(self) -> str:
        return f"OperatorSpec({self.alias!r}, {self.qualified}, cls={self.cls.__qualname__})"

    @functools.cached_property
    def qualified(self) -> str:
        """The exact ``identity@version`` plans record, e.g. ``linear@1``."""
        return f"{self.identity}@{self.version}"

    # Declaration-derived data below is computed once per (immutable) declaration: capture and
    # resolution ask for it on every node.
    @functools.cached_property
    def positional_args(self) -> tuple[str, ...]:
        """Arguments that may be given positionally, in declaration order."""
        return tuple(name for name, arg in self.args.items() if arg.positional)

    @functools.cached_property
    def tensor_value_args(self) -> tuple[str, ...]:
        """Arguments declared ``tensor_value=True``: values the module writes into a tensor of the
        compute dtype, so they must lie within that dtype's range (``check_tensor_values``)."""
        return tuple(name for name, arg in self.args.items() if arg.tensor_value)

    def check_tensor_values(self, args: Mapping[str, Any], dtype: str, node: str) -> None:
        """E_ARGUMENT unless every ``tensor_value`` argument fits the compute ``dtype``: torch would
        round 70000.0 to inf in float16 silently, or refuse it on the first call. Resolution and
        restoration both check, so every plan that exists builds."""
        largest = LARGEST_FINITE.get(dtype)
        for name in self.tensor_value_args if largest is not None else ():
            value = args.get(name)
            if value is not None and abs(value) > largest:
                raise HNDLError(
                    "E_ARGUMENT",
                    f"node {node!r} ({self.alias}): {name}={value!r} does not fit the compute dtype {dtype}, "
                    f"whose largest finite value is {largest!r}",
                    node=node,
                    field=name,
                    remedies=(f"Give {name} a magnitude of at most {largest!r}, or resolve with the float32 "
                              f"compute dtype.",),
                )

    @functools.cached_property
    def dim_args(self) -> Mapping[str, str]:
        """Shape symbol -> the argument bound to it with ``dim=``, in declaration order."""
        return MappingProxyType({arg.dim: name for name, arg in self.args.items() if arg.dim is not None})

    @functools.cached_property
    def _fixed_input_ports(self) -> Optional[tuple[str, ...]]:
        """The input port names of a declaration without a variadic input, else None."""
        if self.shape.variadic_input:
            return None
        return tuple(port.name for port in self.shape.inputs)

    @functools.cached_property
    def optional_inputs(self) -> frozenset[str]:
        """Names of the optional input ports (``name?``): a call may leave them unbound."""
        return frozenset(self.shape.optional_inputs)

    @functools.cached_property
    def required_inputs(self) -> tuple[str, ...]:
        """Input ports every call binds, in declared order (variadic operators: none fixed)."""
        if self.shape.variadic_input:
            return ()
        return tuple(port.name for port in self.shape.inputs if not port.optional)

    def bound_inputs(self, bound: Iterable[str]) -> tuple[str, ...]:
        """The declared input ports among ``bound``, in declared order: a node's input ports once
        its unbound optional ports are left out (a variadic operator: ``bound`` as given)."""
        if self.shape.variadic_input:
            return tuple(bound)
        present = set(bound)
        return tuple(port for port in self.input_ports() if port in present)

    def input_ports(self, input_count: Optional[int] = None) -> tuple[str, ...]:
        """Input port names in binding order, optional ports included; a variadic ``x*``
        expands to ``x0..x{n-1}``."""
        fixed = self._fixed_input_ports
        if fixed is not None:
            return fixed
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
    runtime_check: Optional[Callable] = None,
    torch: Optional[TorchSpelling] = None,
) -> Callable[[type], type]:
    """Declare the decorated ``nn.Module`` subclass as the operator ``alias`` (§8).

    Every field is validated now, when ``operator(...)`` is called; the class and its
    constructor signature are checked when the decorator is applied. Any violation raises
    ``HNDLError("E_REGISTRY")`` naming the alias and the field. The decorator stores the
    :class:`OperatorSpec` as ``cls.__dict__["__hndl_operator__"]`` and returns ``cls``.

    ``runtime_check=fn(module, shapes)`` checks a call that the shape contracts admit but the
    module cannot run (batch norm in training mode with one value per channel): ``shapes`` maps
    each bound input port to its concrete shape and ``module.training`` is the mode. The runtime
    calls it once per input signature, before the node runs (the checked program, the dry run),
    so the module's class can stay torch's own layer; ``fn`` raises ``HNDLError`` or returns.

    ``torch=TorchSpelling(...)`` (or a mapping of its fields) says how torch writes the operator:
    its signature, the HNDL spelling of that call, the torch names and keywords it answers to (see
    :class:`TorchSpelling`). The binder's torch-habit remedies read only this field, so a custom
    operator can declare one too.
    """
    _check_alias(alias)
    where = f"operator {alias!r}"
    identity = _check_identity(where, alias if identity is None else identity)
    _check_version(where, version)
    summary = _check_summary(where, summary)
    _check_optional_text(where, shape_text, "shape_text")
    _check_category(where, category)
    _check_callables(where, relation=relation, validate=validate, finalize=finalize, reference=reference,
                     restore=restore, runtime_check=runtime_check)
    examples = _check_examples(where, examples)
    signature = _parse(where, shape)
    _check_ports(where, signature, relation)
    _check_batch(where, batch, relation)
    arg_map = _check_args(where, args, signature)
    _check_variadics(where, signature, arg_map, outputs_from)
    if signature.variadic_input:
        arg_map["input_count"] = TensorCount(arg_map["input_count"], alias, signature.inputs[0].name)
    _check_positional_rest(where, positional_rest, arg_map)
    policy_map = _check_policies(where, policies, arg_map)
    torch = _check_torch(where, torch, arg_map)

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
            runtime_check=runtime_check,
            torch=torch,
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
