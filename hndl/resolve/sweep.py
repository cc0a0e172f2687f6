"""The solver's working machinery, shared by resolution and revalidation.

Both build one TensorFacts per tensor and one NodeState per node, check edge dtypes once, then
apply nodes: a node's declared patterns, then its relation. The sweep applies, forward then
backward, only the nodes whose facts changed since they were last applied (each tensor's
Watch marks its readers dirty), until a whole sweep adds nothing. Skipping a clean node skips
an application that could add nothing, so the facts, their order and every reason are exactly
those of applying every node on every sweep.
"""

from __future__ import annotations

from typing import Optional

from ..contracts import COMPUTE_DTYPES, INTEGER_DTYPES
from ..errors import CODES, HNDLError
from ..graph import Graph, Node, Ref
from ..registry import active_registry
from .facts import Facts, TensorFacts
from .normalize import normalize_node
from .patterns import NodeState, apply_patterns, argument_reason
from .view import NodeView


# -- tensors and node states ---------------------------------------------------------------------
def build_tensors(graph: Graph, facts: Facts) -> dict[str, TensorFacts]:
    """One TensorFacts per external input and per node output, keyed by the reference text."""
    tensors = {}
    for port in graph.contracts.inputs:
        tensor = TensorFacts(facts, tensor_label(Ref(None, port.name)))
        tensor.dtype = port.dtype
        tensors[f"input:{port.name}"] = tensor
    for node in graph.nodes:
        for port in node.outputs:
            tensors[f"node:{node.id}/{port}"] = TensorFacts(facts, tensor_label(Ref(node.id, port)))
    return tensors


def tensor_label(ref: Ref) -> str:
    """How messages name a tensor: ``input x`` for an external input, ``n1.out`` for a node output."""
    return f"input {ref.port}" if ref.node is None else f"{ref.node}.{ref.port}"


def node_state(node: Node, tensors: dict[str, TensorFacts], facts: Facts) -> NodeState:
    """The working state of ``node``: normalized arguments (§5 step 2) and its ports' tensors."""
    args, origins, policy = normalize_node(node)
    inputs = {port: tensors[str(ref)] for port, ref in node.inputs.items()}
    outputs = {port: tensors[f"node:{node.id}/{port}"] for port in node.outputs}
    return NodeState(node, args, origins, policy, inputs, outputs, facts)


# -- dtypes ----------------------------------------------------------------------------------------
def check_dtypes(states: list[NodeState], tensors: dict[str, TensorFacts], compute: str) -> None:
    """Check every edge once and give every produced tensor its dtype (§3)."""
    for state in states:
        carried = [tensor.dtype for tensor in state.inputs.values()]
        expected, produced = state.spec.port_dtypes(state.inputs, state.outputs, compute=compute, carried=carried)
        for port, tensor in state.inputs.items():
            if expected[port] != "any" and tensor.dtype != expected[port]:
                raise HNDLError(
                    "E_DTYPE",
                    f"{state.spec.alias} port {port!r} expects {expected[port]} but receives {tensor.dtype} "
                    f"from {state.node.inputs[port]}",
                    **state.node.where(),
                    field=port,
                    remedies=_dtype_remedies(state, port, expected[port]),
                )
        for port, tensor in state.outputs.items():
            tensor.dtype = produced[port]


def _dtype_remedies(state: NodeState, port: str, expected: str) -> tuple[str, ...]:
    remedy = _input_dtype_remedy(state, port, expected)
    generic = "Feed this port a tensor of the declared dtype; HNDL never casts silently."
    return (generic,) if remedy is None else (remedy, generic)


def _input_dtype_remedy(state: NodeState, port: str, dtype: str) -> Optional[str]:
    """When ``port`` reads an external input directly, the ``input_dtype=`` that declares ``dtype``."""
    ref = state.node.inputs[port]
    if ref.node is not None or dtype not in INTEGER_DTYPES:
        return None
    received = state.inputs[port].dtype
    keyword = f'input_dtype="{dtype}"' if ref.port == "x" else f'input_dtype={{"{ref.port}": "{dtype}"}}'
    return (f"Declare the dtype of input {ref.port!r}: pass {keyword} (an input without one is {received}, "
            f"the compute dtype).")


def _probed_dtype_remedy(state: NodeState) -> Optional[str]:
    """For an E_DTYPE a relation raised: the ``input_dtype=`` that makes the relation accept an
    external input it reads directly, found by asking the relation again with each integer dtype."""
    if state.spec.relation is None:
        return None
    for port, tensor in state.inputs.items():
        if state.node.inputs[port].node is not None or tensor.dtype not in COMPUTE_DTYPES:
            continue
        received = tensor.dtype
        try:
            for dtype in INTEGER_DTYPES:
                tensor.dtype = dtype
                try:
                    state.spec.relation(NodeView(state))
                except HNDLError as error:
                    if error.code == "E_DTYPE":
                        continue
                tensor.dtype = received
                return _input_dtype_remedy(state, port, dtype)
        finally:
            tensor.dtype = received
    return None


# -- applying one node ------------------------------------------------------------------------
def apply_node(state: NodeState) -> None:
    """Add every fact the node's patterns and relation imply; it is clean until its facts change."""
    facts = state.facts
    facts.actor = state.actor
    state.mark.dirty = False
    try:
        apply_patterns(state)
        if state.spec.relation is not None:
            # The relation reads what the patterns just added, so those facts need no second
            # application; what the relation itself adds still marks the node dirty.
            state.mark.dirty = False
            view = NodeView(state)
            state.spec.relation(view)
            _merge_relation_args(state, view)
        elif not state.patterns_pending():
            state.spent = True
    except HNDLError as error:
        raise _with_node_remedy(error, state).located(**state.node.where()) from None
    finally:
        facts.actor = None


_UNSET = object()


def _merge_relation_args(state: NodeState, view: NodeView) -> None:
    """Take the arguments a relation filled; it may add values, never rewrite them."""
    for name, value in view.args.items():
        if value is state.args.get(name, _UNSET):
            continue  # the normalized value the relation was handed, untouched
        if name not in state.spec.args:
            raise HNDLError(
                "E_REGISTRY",
                f"the relation of {state.spec.alias} set argument {name!r}, which it does not declare",
                field=name,
            )
        value = state.spec.args[name].normalize(value, name=name, node=state.node.id)
        if name not in state.args:
            state.args[name] = value
            state.origins[name] = "inferred"
            state.derivations[name] = (f"the relation of {state.spec.alias} ({state.spec.qualified}) set it from its ports",)
            state.facts.version += 1
            state.mark.dirty = True  # a new argument may fix one of its shape symbols
        elif state.args[name] != value:
            raise HNDLError(
                "E_CONSTRAINT",
                f"the relation of {state.spec.alias} would rewrite {name}={state.args[name]!r} "
                f"({state.origins[name]}) to {value!r}",
                field=name,
            )


# -- the fixed point -----------------------------------------------------------------------
def sweep(states: list[NodeState], max_iterations: int) -> None:
    """Apply dirty nodes forward then backward until a sweep adds no fact (E_RESOURCE past the bound).

    A contradiction whose chain holds an author's literal width names that literal first.
    """
    try:
        _sweep(states, max_iterations)
    except HNDLError as error:
        if error.code != "E_CONSTRAINT":
            raise
        raise _with_literal_remedy(error, states) from None


def _sweep(states: list[NodeState], max_iterations: int) -> None:
    facts = states[0].facts if states else None
    for _ in range(max_iterations):
        before = facts.version if facts else 0
        for state in states:
            if state.mark.dirty and not state.spent:
                apply_node(state)
        for state in reversed(states):
            if state.mark.dirty and not state.spent:
                apply_node(state)
        if facts is None or facts.version == before:
            return
    raise HNDLError(
        "E_RESOURCE",
        f"resolution did not settle within max_iterations={max_iterations} sweeps",
        remedies=("Raise limits['max_iterations'], or check relations that keep adding facts.",),
    )


# -- remedies only the failing node's surroundings can give ------------------------------------
def _with_node_remedy(error: HNDLError, state: NodeState) -> HNDLError:
    """``error`` with a specific remedy first when its node shows a known mistake."""
    if error.code == "E_DTYPE":
        found = (_probed_dtype_remedy(state),)
    elif error.code == "E_CONSTRAINT":
        flatten = _flatten_remedy(state)  # the precise fix of a rank-2 conflict, when it applies
        if flatten is not None:
            found = (flatten,)
        else:  # a rank-2 conflict without a flattening operator keeps the generic remedy
            found = _relation_remedies(state, error) if _rank_two_conflict(state) is None else ()
    else:
        found = ()
    found = tuple(dict.fromkeys(text for text in found if text is not None and text not in error.remedies))
    if not found:
        return error
    rest = tuple(text for text in error.remedies if text != CODES[error.code])
    location = error.location
    return HNDLError(error.code, error.message, chain=error.chain, remedies=(*found, *rest),
                     line=location.line, column=location.column, node=location.node, field=location.field,
                     file=location.file)


def _relation_remedies(state: NodeState, error: HNDLError) -> tuple[str, ...]:
    """When the node's patterns failed before its relation ran, the remedies the relation gives
    for the same facts: a relation that checks ranks (``linear`` on ``[B, C, H, W]``) knows the
    operator meant, where the pattern's equation only knows that two extents differ. The
    relation is asked once, in this failure path only; what it raises is kept only if it names
    a fix other than the code's default."""
    relation = state.spec.relation
    if relation is None or error.remedies != (CODES[error.code],):
        return ()
    try:
        relation(NodeView(state))
    except HNDLError as probed:
        if probed.code == error.code:
            return tuple(text for text in probed.remedies if text != CODES[probed.code])
    except Exception:  # noqa: BLE001 - a relation reading facts its patterns never completed
        return ()
    return ()


def _with_literal_remedy(error: HNDLError, states: list[NodeState]) -> HNDLError:
    """``error`` with a remedy first for each explicit literal of an inferable, dimension-bound
    argument (``linear(100)``'s out_features) whose fact is in its chain: omitting the literal
    lets the solver infer the value the rest of the graph requires.

    Only a literal on one side of the contradiction counts: a fact the message quotes (two
    known extents that must be equal), or one of the two facts of a chain that pairs exactly two
    (a value set twice, a value outside an interval). A literal that is only a premise, several
    steps up a longer chain, is no fix and is not named.
    """
    direct = set(error.chain) if len(error.chain) <= 2 else set()
    remedies = []
    for state in states:
        for symbol, name in (state.dim_args or {}).items():
            if state.origins.get(name) != "explicit" or not state.spec.args[name].inferable:
                continue
            reason = argument_reason(state, name)
            if reason not in direct and f"({reason})" not in error.message:
                continue
            remedies.append(_literal_remedy(state, symbol, name))
            if len(remedies) == 3:
                break
    if not remedies:
        return error
    rest = tuple(text for text in error.remedies if text != CODES[error.code] and text not in remedies)
    location = error.location
    return HNDLError(error.code, error.message, chain=error.chain, remedies=(*remedies, *rest),
                     line=location.line, column=location.column, node=location.node, field=location.field,
                     file=location.file)


def _literal_remedy(state: NodeState, symbol: str, name: str) -> str:
    """Name the literal (node, argument, value, line) and say what omitting it gives."""
    value = state.args[name]
    node = state.node
    where = f"node {node.id} ({state.spec.alias}" + (f", line {node.line}" if node.line is not None else "") + ")"
    var = state.symbols.get(symbol)
    needed = None if var is None else state.facts.value(var)
    source = "the tensor it reads" if _reads_symbol(state, symbol) else "what consumes the result"
    if needed is not None and needed != value:
        return (f"Omit {name}={value} at {where}: the rest of the graph requires {name} {needed} there, and an "
                f"omitted {name} is inferred from {source}.")
    return (f"Omit {name}={value} at {where}, or change it: the literal contradicts the contract or another "
            f"operator (see the chain), and an omitted {name} is inferred from {source}.")


def _reads_symbol(state: NodeState, symbol: str) -> bool:
    """Whether ``symbol`` names an extent of an input port (in_channels) rather than an output's."""
    return any(entry.port in state.inputs and any(getattr(dim, "symbol", None) == symbol for dim in entry.pattern.dims)
               for entry in state.patterns)


def _flatten_remedy(state: NodeState) -> Optional[str]:
    """The missing flatten: an input of rank >= 3 meets a port that must have rank 2 at this node.

    The operator to insert is found in the registry in use: one whose declared pattern takes an
    input of any rank >= 3 to rank 2 and needs no argument. Without one, nothing is suggested.
    """
    wide = next((tensor for tensor in state.inputs.values() if tensor.rank is not None and tensor.rank >= 3), None)
    if wide is None:
        return None
    conflict = _rank_two_conflict(state)
    if conflict is None:
        return None
    alias = flattening_alias(active_registry())
    if alias is None:
        return None
    narrow, wanted = conflict
    node = f"{state.node.id} ({state.spec.alias})"
    inputs_take_rank_two = all(
        entry.has_ellipsis and entry.fixed <= 2 for entry in state.patterns if entry.port in state.inputs
    )
    if inputs_take_rank_two:
        return (f"{wide.label} has rank {wide.rank} but {narrow.label} must have rank 2: "
                f"insert {alias}() before {node}.")
    return (f"{node} makes {narrow.label} rank {wanted} but it must have rank 2: "
            f"insert {alias}() after {node}.")


def _rank_two_conflict(state: NodeState) -> Optional[tuple[TensorFacts, int]]:
    """(an output of rank 2, the rank this node's patterns give it), when they disagree."""
    runs = {}
    for entry in state.patterns:
        tensor = state.tensor(entry.port)
        if tensor.rank is not None and entry.has_ellipsis:
            runs[entry.port] = tensor.rank - entry.fixed
    for entry in state.patterns:
        tensor = state.tensor(entry.port)
        if entry.port not in state.outputs or tensor.rank != 2:
            continue
        if not entry.has_ellipsis and entry.fixed != 2:
            return tensor, entry.fixed
        if entry.has_ellipsis:
            others = [run for port, run in runs.items() if port in state.inputs]
            if others and max(others) != runs[entry.port]:
                return tensor, entry.fixed + max(others)
    return None


def flattening_alias(registry) -> Optional[str]:
    """The alias of the first registered operator that flattens: one input of any rank >= 3 to a
    rank-2 output, with no required argument; None without a registry or such an operator."""
    if registry is None:
        return None
    for spec in registry:
        inputs, outputs = spec.shape.inputs, spec.shape.outputs
        if len(inputs) != 1 or len(outputs) != 1 or inputs[0].variadic or outputs[0].variadic:
            continue
        source, target = inputs[0], outputs[0]
        if source.dims is None or target.dims is None or not source.has_ellipsis or target.has_ellipsis:
            continue
        if len(source.dims) - 1 <= 3 and len(target.dims) == 2 and not any(arg.required for arg in spec.args.values()):
            return spec.alias
    return None
