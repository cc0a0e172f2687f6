"""ResolvedPlan: the immutable, concrete result of resolution, and its shape tables.

A plan holds nothing executable: exact operator identities, concrete arguments and port
shapes, construction records, and per-node source and provenance. Printing a plan shows the
same table ``print(model)`` shows, without a backend.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Optional

SCHEMA_VERSION = 1
RESOLUTION_VERSION = 1


def freeze(value: Any) -> Any:
    """A deeply read-only copy: dicts become mapping proxies, lists become tuples."""
    kind = type(value)
    if kind in SCALARS or id(value) in _CONSTANTS:
        return value
    if kind is tuple or kind is list:
        if kind is tuple and all(type(item) in SCALARS for item in value):
            return value
        return tuple(freeze(item) for item in value)
    if kind is dict or kind is MappingProxyType or isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    return value


SCALARS = frozenset({str, int, float, bool, type(None)})
_CONSTANTS: set[int] = set()


def frozen_constant(value: Any) -> Any:
    """Freeze a module-level constant once, so plans can share it instead of copying it."""
    frozen = freeze(value)
    _CONSTANTS.add(id(frozen))
    return frozen


#: The construction records of a node without init= or trainable= (§11), shared by every plan.
DEFAULT_INITIALIZATION = frozen_constant({"kind": "torch_default@1", "overrides": {}})
DEFAULT_TRAINABILITY = frozen_constant({"default": None, "overrides": {}})


class _Frozen:
    """Attributes are set once in ``__init__`` and can never be reassigned or deleted."""

    __slots__ = ()

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, freeze(value))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self  # immutable: a copy would be indistinguishable

    def __reduce__(self):
        return (_thaw, (type(self), {name: thaw(getattr(self, name)) for name in self.__slots__}))


def thaw(value: Any) -> Any:
    """The plain-data form of frozen plan values: mapping proxies become dicts, tuples stay.

    Used to compare, pickle, encode and print plan records; other objects pass unchanged.
    """
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is tuple or kind is list:
        return tuple(thaw(item) for item in value)
    if kind is dict or kind is MappingProxyType or isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    return value


def _thaw(cls: type, fields: dict) -> Any:
    record = cls.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(record, name, freeze(value))
    return record


class PlanNode(_Frozen):
    """One concrete node: identity, resolved arguments, port bindings and shapes."""

    __slots__ = (
        "id", "op", "alias", "args", "inputs", "outputs", "input_shapes", "output_shapes",
        "initialization", "trainability", "source", "provenance",
    )

    def __init__(self, **fields: Any) -> None:
        self._set(**fields)

    @classmethod
    def restored(cls, **fields: Any) -> "PlanNode":
        """A node from values the caller built immutable (persistence), without re-freezing them."""
        node = cls.__new__(cls)
        for name in cls.__slots__:
            object.__setattr__(node, name, fields[name])
        return node

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlanNode) and all(
            thaw(getattr(self, name)) == thaw(getattr(other, name)) for name in self.__slots__
        )

    def __hash__(self) -> int:
        return hash((self.id, self.op))

    def __repr__(self) -> str:
        return f"PlanNode({self.id!r}, {self.op!r})"


class ResolvedPlan(_Frozen):
    """The concrete architecture: what ``build`` constructs and what a checkpoint is paired with."""

    __slots__ = (
        "schema_version", "resolution_version", "frontend", "batch", "dtype",
        "inputs", "outputs", "nodes",
    )

    def __init__(
        self,
        *,
        frontend: Mapping[str, Any],
        batch: str,
        dtype: str,
        inputs: tuple,  # of {"name", "shape", "dtype"}
        outputs: tuple,  # of {"name", "ref", "shape"}
        nodes: tuple,
        schema_version: int = SCHEMA_VERSION,
        resolution_version: int = RESOLUTION_VERSION,
    ) -> None:
        self._set(
            schema_version=schema_version,
            resolution_version=resolution_version,
            frontend=frontend,
            batch=batch,
            dtype=dtype,
            inputs=inputs,
            outputs=outputs,
        )
        object.__setattr__(self, "nodes", tuple(nodes))

    # -- the first input and output, restated (§10) --------------------------------------
    @property
    def input_shape(self) -> tuple:
        return self.inputs[0]["shape"]

    @property
    def input_dtype(self) -> str:
        return self.inputs[0]["dtype"]

    @property
    def output_shape(self) -> tuple:
        return self.outputs[0]["shape"]

    @property
    def output_ref(self) -> str:
        return self.outputs[0]["ref"]

    def node(self, node_id: str) -> PlanNode:
        """The node with this id; KeyError when there is none."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    # -- persistence and inspection (§10, §13) ----------------------------------------------
    def to_json(self) -> str:
        """Canonical JSON with semantic and artifact digests (see ``hndl.persist``)."""
        from .persist import to_json

        return to_json(self)

    @classmethod
    def from_json(cls, text: str, *, registry=None, limits=None) -> "ResolvedPlan":
        """Restore a saved plan: format, versions, digests, then every concrete equation."""
        from .persist import from_json

        return from_json(text, registry=registry, limits=limits)

    @property
    def semantic_digest(self) -> str:
        """SHA-256 of the concrete graph, independent of frontend, locations and explanations."""
        from .persist import semantic_digest

        return semantic_digest(self)

    def describe(self) -> str:
        """The shape table, the semantic digest, and per node its argument provenance and
        initialization/trainability records, enough to explain a changed field."""
        from .inspection import describe

        return describe(self)

    def diff(self, other: "ResolvedPlan") -> tuple:
        """The nodes and fields that differ from ``other``, each with the origin of both values."""
        from .inspection import diff

        return diff(self, other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResolvedPlan) and all(
            thaw(getattr(self, name)) == thaw(getattr(other, name)) for name in self.__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(node.id for node in self.nodes))

    def __repr__(self) -> str:
        return shape_table(self)


# -- shape tables ---------------------------------------------------------------------------
def format_shape(shape: tuple) -> str:
    return "[" + ", ".join(str(entry) for entry in shape) + "]"


def is_unary_chain(plan: ResolvedPlan) -> bool:
    """One input, one output, and every node reads exactly the previous node's only output."""
    if len(plan.inputs) != 1 or len(plan.outputs) != 1 or not plan.nodes:
        return False
    previous = f"input:{plan.inputs[0]['name']}"
    for node in plan.nodes:
        if len(node.inputs) != 1 or len(node.outputs) != 1:
            return False
        (ref,) = node.inputs.values()
        if ref != previous:
            return False
        previous = f"node:{node.id}/{node.outputs[0]}"
    return plan.output_ref == previous


def header(plan: ResolvedPlan) -> str:
    """``Network: <inputs> -> <outputs>  dtype=...`` as §7 prints it."""
    differing = [port for port in plan.inputs if port["dtype"] != plan.dtype]
    if len(plan.inputs) == 1 and len(plan.outputs) == 1 and plan.inputs[0]["name"] == "x" and plan.outputs[0]["name"] == "output":
        text = f"Network: {format_shape(plan.input_shape)} -> {format_shape(plan.output_shape)}  dtype={plan.dtype}"
        if differing:
            text += f"  input_dtype={differing[0]['dtype']}"
        return text
    ins = ", ".join(f"{port['name']}={format_shape(port['shape'])}" for port in plan.inputs)
    outs = ", ".join(f"{port['name']}={format_shape(port['shape'])}" for port in plan.outputs)
    text = f"Network: {ins} -> {outs} dtype={plan.dtype}"
    if differing:
        text += " input_dtype=" + ",".join(f"{port['name']}:{port['dtype']}" for port in differing)
    return text


def shape_table(plan: ResolvedPlan) -> str:
    """The header plus one aligned row per node (§7 "print(model)")."""
    if is_unary_chain(plan):
        rows = [["index", "name", "operation", "input shape", "output shape"]]
        for index, node in enumerate(plan.nodes):
            rows.append([
                str(index), node.id, node.alias,
                format_shape(next(iter(node.input_shapes.values()))),
                format_shape(next(iter(node.output_shapes.values()))),
            ])
    else:
        rows = [["name", "operation", "inputs", "outputs"]]
        for node in plan.nodes:
            ins = ", ".join(
                f"{port}={format_shape(node.input_shapes[port])} <- {ref}" for port, ref in node.inputs.items()
            )
            outs = ", ".join(f"{port}={format_shape(node.output_shapes[port])}" for port in node.outputs)
            rows.append([node.id, node.alias, ins, outs])
        if not plan.nodes:
            rows.append(["(identity)", "", "", ""])
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [header(plan)]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)
