"""ResolvedPlan: the immutable, concrete result of resolution.

A plan holds nothing executable: exact operator identities, concrete arguments and port
shapes, construction records, and per-node source and provenance. Printing a plan shows the
same table ``print(model)`` shows, without a backend.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import inspection, plan_encoding, plan_restoration
from .drawing.notebook import diagram_html
from .plan_values import (  # noqa: F401  (re-exported: the plan's values, part of its module's surface)
    DEFAULT_INITIALIZATION,
    DEFAULT_TRAINABILITY,
    RESOLUTION_VERSION,
    SCALARS,
    SCHEMA_VERSION,
    freeze,
    frozen_constant,
    thaw,
)
from .plan_tables import header, is_unary_chain, shape_table  # noqa: F401  (re-exported)
from .shape_text import format_shape  # noqa: F401  (re-exported)


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
    def restored(
        cls, *, id: str, op: str, alias: str, args: Mapping, inputs: Mapping, outputs: tuple,
        input_shapes: Mapping, output_shapes: Mapping, initialization: Any, trainability: Any, source: Mapping,
        provenance: Mapping,
    ) -> "PlanNode":
        """A node from values the caller built immutable (resolution, persistence), without
        re-freezing them; the slots are written through their descriptors, 2-3x faster than
        ``object.__setattr__`` for the 10,000 nodes of a large plan."""
        node = object.__new__(cls)
        values = (id, op, alias, args, inputs, outputs, input_shapes, output_shapes, initialization,
                  trainability, source, provenance)
        for write, value in zip(_NODE_SLOT_WRITERS, values):
            write(node, value)
        return node

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlanNode) and all(
            thaw(getattr(self, name)) == thaw(getattr(other, name)) for name in self.__slots__
        )

    def __hash__(self) -> int:
        return hash((self.id, self.op))

    def __repr__(self) -> str:
        return f"PlanNode({self.id!r}, {self.op!r})"


#: Each PlanNode slot's descriptor setter, in slot order (what ``PlanNode.restored`` writes with).
_NODE_SLOT_WRITERS = tuple(PlanNode.__dict__[name].__set__ for name in PlanNode.__slots__)


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

    # -- persistence and inspection (§10, §13): thin methods over the modules below the plan --
    def to_json(self) -> str:
        """Canonical JSON with semantic and artifact digests (see ``hndl.persist``)."""
        return plan_encoding.to_json(self)

    @classmethod
    def from_json(cls, text: str, *, registry=None, limits=None) -> "ResolvedPlan":
        """Restore a saved plan: format, versions, digests, then every concrete equation."""
        return plan_restoration.restore(text, plan_type=cls, node_type=PlanNode, registry=registry, limits=limits)

    @property
    def semantic_digest(self) -> str:
        """SHA-256 of the concrete graph, independent of frontend, locations and explanations."""
        return plan_encoding.semantic_digest(self)

    def describe(self, registry=None) -> str:
        """The shape table, the semantic digest, and per node its argument provenance, the
        optional input ports it leaves unbound, and its initialization/trainability records,
        enough to explain a changed field. ``registry`` supplies the declarations (default: the
        active registry, else the built-in packs)."""
        return inspection.describe(self, registry)

    def diff(self, other: "ResolvedPlan") -> tuple:
        """The nodes and fields that differ from ``other``, each with the origin of both values."""
        return inspection.diff(self, other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ResolvedPlan) and all(
            thaw(getattr(self, name)) == thaw(getattr(other, name)) for name in self.__slots__
        )

    def __hash__(self) -> int:
        return hash(tuple(node.id for node in self.nodes))

    def __repr__(self) -> str:
        return shape_table(self)

    def _repr_html_(self) -> str:
        """Jupyter: the plan's diagram (SVG) above its shape table; the table alone when drawing fails."""
        return diagram_html(self, shape_table(self))
