"""The one call-binding and current-tensor state machine both frontends drive (§7).

A frontend evaluates a call's arguments in ordinary order, then hands the binder the operator,
the positional values and the keywords. The binder separates tensor ports from author
arguments using the declaration, falls back to *current* for a single omitted input, numbers
nodes by call ordinal, and moves *current*: a single-output call sets it, a multi-output call
clears it, assignments never touch it. Output selection lives here too, so configuration and
callable capture build identical graphs by construction.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..construction import normalize_initialization, normalize_trainability
from ..contracts import Contracts
from ..declaration import OperatorSpec
from ..errors import HNDLError, listed, shown
from ..graph import NODE_ID, Graph, Node, Ref
from ..suggestions import did_you_mean, positional_remedies, torch_habit, torch_name, unknown_keyword_hint

RESERVED_METADATA = ("name", "policy", "init", "trainable")


class Symbol:
    """A symbolic tensor of one capture: a reference into the graph being built."""

    __slots__ = ("ref", "owner")

    def __init__(self, ref: Ref, owner: "Binder") -> None:
        self.ref = ref
        self.owner = owner

    def __repr__(self) -> str:
        return f"<symbolic tensor {self.ref}>"

    def _refuse(self, *_: Any, **__: Any):
        raise HNDLError(
            "E_CAPTURE",
            f"symbolic tensor {self.ref} has no concrete value during capture",
            remedies=("Pass symbolic tensors only to operator calls; they hold no data.",),
        )

    __bool__ = __int__ = __index__ = __float__ = __complex__ = __iter__ = __len__ = _refuse
    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __matmul__ = __getitem__ = _refuse
    __truediv__ = __rtruediv__ = __neg__ = __array__ = _refuse

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        """Eager torch functions never run on symbolic tensors."""
        name = getattr(func, "__name__", repr(func))
        synonym = torch_name(name, _capture_registry(args, kwargs)) if isinstance(name, str) else None
        raise HNDLError(
            "E_CAPTURE",
            f"torch.{name} cannot run on a symbolic tensor during capture",
            remedies=((f"torch.{name} is ops.{synonym[1]} in a capture.",) if synonym else ())
            + ("Use ops.<alias> or registry.ops.<alias> inside a capture; they record graph nodes.",),
        )


def _capture_registry(args: Any, kwargs: Any) -> Any:
    """The registry a symbolic tensor among a torch function's arguments is captured with (its
    declarations name torch's functions), or none."""
    values = [*(args or ()), *(kwargs or {}).values()]
    for value in values:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, Symbol):
                return item.owner.registry
    return ()


class Binder:
    """Graph-building state for one capture or one configuration program."""

    def __init__(self, contracts: Contracts, *, max_nodes: int) -> None:
        self.contracts = contracts
        self.max_nodes = max_nodes
        #: The registry a capture resolves with (set by the capture): torch names for its remedies.
        self.registry: Any = ()
        self.nodes: list[Node] = []
        self._ids: set[str] = set()
        self._declared: dict[OperatorSpec, _Declared] = {}
        self.inputs = {name: Symbol(Ref(None, name), self) for name in contracts.input_names}
        self.current: Optional[Symbol] = self.inputs[contracts.input_names[0]]

    # -- calls ---------------------------------------------------------------------------
    def call(
        self,
        spec: OperatorSpec,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        line: Optional[int] = None,
        column: Optional[int] = None,
    ) -> Any:
        """Record one operator call and return its symbol, or a tuple for several outputs."""
        where = {"line": line, "column": column}
        ordinal = len(self.nodes)
        if ordinal >= self.max_nodes:
            # Checked as nodes are recorded, so a runaway loop in a captured callable fails at
            # the bound instead of growing the graph without limit until resolution counts it.
            raise HNDLError(
                "E_RESOURCE",
                f"the graph has more than {self.max_nodes} nodes, above max_nodes={self.max_nodes}",
                **where,
                remedies=("Shrink the graph or raise limits['max_nodes'].",),
            )
        declared = self._declared.get(spec)
        if declared is None:
            declared = self._declared[spec] = _Declared(spec)
        metadata = {key: kwargs[key] for key in RESERVED_METADATA if key in kwargs} if kwargs else {}
        if "name" in metadata:
            node_id = self._node_id(metadata["name"], spec, where)
        else:
            node_id = f"n{ordinal}"  # always a valid id; only its uniqueness needs checking
            if node_id in self._ids:
                self._node_id(node_id, spec, where)
        where["node"] = node_id
        ports, values = self._bind_ports(spec, declared, args, kwargs, where)
        if kwargs and "approximate" in kwargs and "approximate" not in spec.args:
            kwargs = _gelu_approximate(spec, kwargs, where)
        author = self._bind_arguments(spec, declared, values, kwargs, where)
        habit = torch_habit(spec, values, author)
        if habit is not None:
            field, message, remedies = habit
            raise HNDLError("E_ARGUMENT", message, **where, field=field, remedies=remedies)
        if declared.variadic_input:
            author["input_count"] = len(ports)
        if declared.outputs is not None:
            outputs = declared.outputs
        else:
            outputs = spec.output_ports(self._normalized_count_arg(spec, author, where))
        node = Node(
            id=node_id,
            spec=spec,
            args=author,
            inputs={port: symbol.ref for port, symbol in ports.items()},
            outputs=outputs,
            policy=self._policy(metadata, where) if metadata else None,
            init=self._init(metadata, node_id, where) if metadata else None,
            trainable=self._trainable(metadata, node_id, where) if metadata else None,
            line=line,
            column=column,
        )
        self.nodes.append(node)
        self._ids.add(node_id)
        if len(outputs) == 1 and not (declared.variadic_output and self._fans_out(spec, author)):
            symbol = self.current = Symbol(Ref(node_id, outputs[0]), self)
            return symbol
        self.current = None
        return tuple(Symbol(Ref(node_id, port), self) for port in outputs)

    def _node_id(self, name: Any, spec: OperatorSpec, where: dict) -> str:
        if not isinstance(name, str) or not NODE_ID.match(name):
            raise HNDLError(
                "E_NAME", f"name={shown(name)} must be a string matching [a-z][a-z0-9_]*", **where, field="name",
                remedies=("Use a lowercase identifier such as name=\"hidden\".",),
            )
        if name in self._ids:
            raise HNDLError(
                "E_NAME", f"node id {shown(name)} is already used by an earlier call", **where, field="name",
                remedies=("Give each call its own name=.",),
            )
        return name

    def _bind_ports(self, spec: OperatorSpec, declared_spec: "_Declared", args: Sequence[Any],
                    kwargs: Mapping[str, Any], where: dict):
        """Split leading symbolic tensors (and port keywords) from author values."""
        count = len(args)
        first = 0
        while first < count and isinstance(args[first], Symbol):
            first += 1
        leading = args[:first]
        values = list(args[first:])
        for value in values:
            if isinstance(value, Symbol):
                raise HNDLError(
                    "E_ARGUMENT",
                    f"{spec.alias}: tensor {value.ref} follows an author value; tensors come first",
                    **where,
                    remedies=(f"Write {spec.alias}(tensor, ..., value) with tensors leading.",),
                )
            if isinstance(value, (tuple, list)) and any(isinstance(item, Symbol) for item in value):
                kind = "list" if isinstance(value, list) else "tuple"
                if declared_spec.variadic_input:
                    keywords = "".join(f", {key}={shown(kwargs[key])}" for key in kwargs
                                       if not _is_variadic_key(spec, key))
                    names = ", ".join("abcdefgh"[i] for i in range(min(len(value), 3)))
                    remedy = (f"Pass the tensors as separate arguments, not as one {kind}: "
                              f"{spec.alias}({names}{', ...' if len(value) > 3 else ''}{keywords}), or "
                              f"{spec.alias}(*tensors{keywords}).")
                else:
                    remedy = "Unpack the multi-output result first, e.g. a, b = split(...), and pass one tensor."
                raise HNDLError(
                    "E_ARGUMENT",
                    f"{spec.alias}: got a {kind} of {len(value)} tensors where one tensor or a value belongs",
                    **where,
                    remedies=(remedy,),
                )
        variadic = declared_spec.variadic_input
        if variadic:
            declared = spec.input_ports(len(leading) + sum(1 for key in kwargs if _is_variadic_key(spec, key)))
        else:
            declared = declared_spec.inputs
        if len(leading) > len(declared):
            optional = f" ({', '.join(p + '?' if p in spec.optional_inputs else p for p in declared)})" \
                if spec.optional_inputs else ""
            raise HNDLError(
                "E_ARGUMENT",
                f"{spec.alias} takes {len(declared)} tensor input(s){optional}, got {len(leading)}",
                **where,
            )
        ports: dict[str, Symbol] = dict(zip(declared, leading))
        for key, value in kwargs.items():
            if declared_spec.is_port(spec, key):
                if key in ports:
                    raise HNDLError(
                        "E_ARGUMENT", f"{spec.alias}: tensor port {shown(key)} is bound twice", **where, field=key,
                        remedies=("Pass each tensor once, positionally or by its port keyword.",),
                    )
                if not isinstance(value, Symbol):
                    raise HNDLError(
                        "E_ARGUMENT", f"{spec.alias}: port {shown(key)} takes a symbolic tensor, got {shown(value)}",
                        **where, field=key,
                    )
                ports[key] = value
        for symbol in ports.values():
            if symbol.owner is not self:
                self._check_owner(symbol, where)
        if variadic:
            ports = self._check_variadic(spec, ports, where)
            if tuple(ports) != tuple(declared):  # keywords in another order: the declared one
                ports = {port: ports[port] for port in declared}
            return ports, values
        required = declared_spec.required
        if len(required) == 1 and required[0] not in ports:
            # One required input: it falls back to current, whatever optional ports are bound.
            if self.current is None:
                raise HNDLError(
                    "E_CURRENT",
                    f"{spec.alias} needs a tensor, but the previous multi-output call cleared current",
                    **where,
                    remedies=(f"Pass the tensor explicitly, e.g. {spec.alias}(z1, ...).",),
                )
            ports[required[0]] = self.current
        elif len(ports) != len(declared) or (len(ports) > 1 and tuple(ports) != tuple(declared)):
            missing = [port for port in required if port not in ports]
            if missing:
                raise HNDLError(
                    "E_BINDING",
                    f"{spec.alias} needs every tensor port bound explicitly; missing {', '.join(missing)}",
                    **where,
                    remedies=(f"Pass {', '.join(missing)} explicitly; multi-input operators never use current.",),
                )
        if len(ports) > 1 and tuple(ports) != tuple(declared[:len(ports)]):
            # Declared order, unbound optional ports left out (keywords may come in any order).
            ports = {port: ports[port] for port in declared if port in ports}
        return ports, values

    def _check_variadic(self, spec: OperatorSpec, ports: dict[str, Symbol], where: dict) -> dict[str, Symbol]:
        prefix = spec.shape.inputs[0].name
        expected = [f"{prefix}{i}" for i in range(len(ports))]
        if sorted(ports) != sorted(expected) or len(ports) < 2:
            raise HNDLError(
                "E_BINDING",
                f"{spec.alias} needs at least two contiguous tensors {prefix}0, {prefix}1, ...; got {listed(ports) or 'none'}",
                **where,
            )
        return ports

    def _bind_arguments(
        self, spec: OperatorSpec, declared: "_Declared", values: list, kwargs: Mapping[str, Any], where: dict
    ) -> dict:
        """Positional author values in declaration order, then keywords; no value twice."""
        positional = declared.positional
        author: dict[str, Any] = dict(zip(positional, values))
        if len(values) > len(positional):
            rest = values[len(positional):]
            if spec.positional_rest is None:
                raise HNDLError(
                    "E_ARGUMENT",
                    f"{spec.alias} takes at most {len(positional)} positional value(s), got {len(values)}",
                    **where,
                    remedies=positional_remedies(spec, positional),
                )
            author[spec.positional_rest] = tuple(rest)
        for key, value in kwargs.items():
            if key in RESERVED_METADATA or declared.is_port(spec, key):
                continue
            if key not in spec.args or (key == "input_count" and declared.variadic_input):
                raise HNDLError(
                    "E_ARGUMENT", f"{spec.alias} has no argument {shown(key)}", **where, field=key,
                    remedies=_unknown_argument_remedies(spec, key),
                )
            if key in author:
                raise HNDLError(
                    "E_ARGUMENT", f"{spec.alias}: argument {key!r} is supplied twice", **where, field=key,
                )
            if isinstance(value, Symbol):
                raise HNDLError(
                    "E_ARGUMENT", f"{spec.alias}: argument {key!r} takes a value, not a tensor", **where, field=key,
                )
            author[key] = value
        return author

    def _normalized_count_arg(self, spec: OperatorSpec, author: dict, where: dict) -> dict:
        if spec.outputs_from is None or spec.outputs_from not in author:
            return {}
        name = spec.outputs_from
        return {name: spec.args[name].normalize(author[name], name=name, node=where.get("node"))}

    def _fans_out(self, spec: OperatorSpec, author: dict) -> bool:
        count = self._normalized_count_arg(spec, author, {}).get(spec.outputs_from)
        return bool(count) if not isinstance(count, int) else count > 0

    def _policy(self, metadata: dict, where: dict) -> Optional[str]:
        if "policy" not in metadata:
            return None
        policy = metadata["policy"]
        if not isinstance(policy, str):
            raise HNDLError("E_ARGUMENT", f"policy= takes a policy name, got {shown(policy)}", **where, field="policy")
        return policy

    def _init(self, metadata: dict, node_id: str, where: dict) -> Optional[dict]:
        if "init" not in metadata:
            return None
        try:
            return normalize_initialization(metadata["init"], node=node_id)
        except HNDLError as error:
            raise error.located(**where, field="init") from None

    def _trainable(self, metadata: dict, node_id: str, where: dict) -> Optional[dict]:
        if "trainable" not in metadata:
            return None
        try:
            return normalize_trainability(metadata["trainable"], node=node_id)
        except HNDLError as error:
            raise error.located(**where, field="trainable") from None

    def _check_owner(self, symbol: Symbol, where: dict) -> None:
        if symbol.owner is not self:
            raise HNDLError(
                "E_CAPTURE",
                f"symbolic tensor {symbol.ref} belongs to another capture",
                **where,
                remedies=("Use only tensors created inside the same capture.",),
            )

    # -- outputs -------------------------------------------------------------------------
    def select_single(self, explicit: Optional[Any], *, what: str) -> Symbol:
        """The single unnamed output: an explicit symbol, else current (E_CURRENT if unset)."""
        if explicit is not None:
            if not isinstance(explicit, Symbol):
                raise HNDLError(
                    "E_OUTPUT",
                    f"{what} must be one symbolic tensor, got {_describe(explicit)}",
                    remedies=("Select exactly one tensor as the output.",),
                )
            self._check_owner(explicit, {})
            return explicit
        if self.current is None:
            raise HNDLError(
                "E_CURRENT",
                "no output was selected and the last multi-output call cleared current",
                remedies=("Select the output explicitly (out = ... in configuration, return in a callable).",),
            )
        return self.current

    def select_named(self, chosen: Mapping[str, Any], *, what: str) -> dict[str, Symbol]:
        """Every declared output name mapped to one symbol of this capture."""
        names = self.contracts.output_names
        missing = [name for name in names if name not in chosen]
        extra = [name for name in chosen if name not in names]
        if missing or extra:
            detail = "; ".join(
                part for part in (
                    f"missing {listed(missing)}" if missing else "",
                    f"undeclared {listed(extra)}" if extra else "",
                ) if part
            )
            raise HNDLError(
                "E_OUTPUT",
                f"{what} must select exactly the declared outputs {', '.join(names)}: {detail}",
                remedies=("Bind every declared output name to one tensor.",),
            )
        selected = {}
        for name in names:
            value = chosen[name]
            if not isinstance(value, Symbol):
                raise HNDLError(
                    "E_OUTPUT",
                    f"output {name!r} must be one symbolic tensor, got {_describe(value)}",
                    field=name,
                )
            self._check_owner(value, {"field": name})
            selected[name] = value
        return selected

    def graph(self, outputs: Mapping[str, Symbol], *, frontend: str, provenance: Mapping[str, Any]) -> Graph:
        """The finished author graph."""
        return Graph(
            contracts=self.contracts,
            nodes=list(self.nodes),
            outputs={name: symbol.ref for name, symbol in outputs.items()},
            frontend=frontend,
            provenance=dict(provenance),
        )


class _Declared:
    """What binding needs from one declaration, derived once per binder instead of on every call."""

    __slots__ = ("variadic_input", "variadic_output", "inputs", "required", "input_set", "positional", "outputs")

    def __init__(self, spec: OperatorSpec) -> None:
        self.variadic_input = spec.shape.variadic_input
        self.variadic_output = spec.shape.variadic_output
        self.inputs = () if self.variadic_input else spec.input_ports()
        #: The ports every call binds; the optional ones (``name?``) follow them in ``inputs``.
        self.required = spec.required_inputs
        self.input_set = frozenset(self.inputs)
        arguments = _author_arguments(spec)
        positional = [name for name in spec.positional_args if name in arguments]
        if spec.positional_rest is not None and spec.positional_rest in positional:
            positional.remove(spec.positional_rest)
        self.positional = tuple(positional)
        #: Fixed output ports; None when a variadic ``out*`` takes its count from the call.
        self.outputs = None if self.variadic_output else spec.output_ports({})

    def is_port(self, spec: OperatorSpec, key: str) -> bool:
        """True when keyword ``key`` names one of the operator's tensor input ports."""
        return _is_variadic_key(spec, key) if self.variadic_input else key in self.input_set


def _gelu_approximate(spec: OperatorSpec, kwargs: Mapping[str, Any], where: dict) -> Mapping[str, Any]:
    """Torch's ``approximate=`` on a block whose ``activation`` offers ``"gelu_tanh"``: one spelling of
    the tanh GELU everywhere. ``approximate="tanh"`` binds ``activation="gelu_tanh"`` (what the plan
    records), ``approximate="none"`` the exact ``"gelu"``; with any other activation it is E_ARGUMENT.
    Operators without such an activation keep the unknown-argument failure, which names the fix."""
    arg = spec.args.get("activation")
    if arg is None or arg.type is not str or "gelu_tanh" not in (arg.choices or ()) or "gelu" not in arg.choices:
        return kwargs
    approximate = kwargs["approximate"]
    activation = kwargs.get("activation", arg.default)
    wanted = {"tanh": "gelu_tanh", "none": "gelu"}.get(approximate) if isinstance(approximate, str) else None
    if wanted is None:
        raise HNDLError(
            "E_ARGUMENT", f"{spec.alias}: approximate={shown(approximate)} is not 'none' or 'tanh'", **where,
            field="approximate",
            remedies=(f"Write {spec.alias}(..., approximate='tanh') (torch's tanh GELU) or "
                      f"{spec.alias}(..., activation='gelu_tanh').",),
        )
    if activation not in ("gelu", "gelu_tanh") or ("activation" in kwargs and activation != "gelu"
                                                    and activation != wanted):
        raise HNDLError(
            "E_ARGUMENT",
            f"{spec.alias}: approximate={approximate!r} applies to the GELU, but activation={shown(activation)}",
            **where, field="approximate",
            remedies=(f"approximate= only qualifies the GELU: drop it to keep activation={shown(activation)}, or "
                      f"write {spec.alias}(..., activation={wanted!r}).",),
        )
    bound = {key: value for key, value in kwargs.items() if key != "approximate"}
    bound["activation"] = wanted
    return bound


def _unknown_argument_remedies(spec: OperatorSpec, key: str) -> tuple[str, ...]:
    """The closest argument or port names first (a misspelling), then every argument there is."""
    arguments = _author_arguments(spec)
    listing = f"Use one of: {', '.join(arguments) or 'no arguments'}."
    ports = () if spec.shape.variadic_input else spec.input_ports()
    close = did_you_mean(key, (*arguments, *RESERVED_METADATA, *ports))
    hint = unknown_keyword_hint(spec, key)
    return tuple(remedy for remedy in (hint, close, listing) if remedy is not None)


def _is_variadic_key(spec: OperatorSpec, key: str) -> bool:
    if not spec.shape.variadic_input:
        return False
    prefix = spec.shape.inputs[0].name
    return key.startswith(prefix) and key[len(prefix):].isdigit()


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values"
    return shown(value) if not isinstance(value, Symbol) else str(value.ref)


def _author_arguments(spec: OperatorSpec) -> tuple[str, ...]:
    """The arguments an author may write: a variadic operator's input_count comes from the call."""
    if spec.shape.variadic_input:
        return tuple(name for name in spec.args if name != "input_count")
    return tuple(spec.args)
