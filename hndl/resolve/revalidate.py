"""Revalidate a restored plan's concrete equations against the registry's declarations (§10).

Nothing is inferred here and no policy is chosen again: every argument is taken as saved,
every port shape is seeded from the plan, and each node's patterns and relation are applied
once with the same machinery resolution uses. Any disagreement means the saved contents are
inconsistent (E_INTEGRITY); a port list that does not match its declaration is E_BINDING.
"""

from __future__ import annotations

from typing import Mapping

from ..collector import collector_paused
from ..contracts import batch_multiple, parse_contracts
from ..errors import HNDLError
from ..graph import Graph, Node, Ref, execution_order
from ..limits import limits_in_force
from ..registry import using_registry
from .facts import Facts, TensorFacts
from .sweep import apply_node, build_tensors, check_dtypes, node_state

INCONSISTENT = ("E_CONSTRAINT", "E_RESHAPE", "E_AMBIGUOUS", "E_UNRESOLVED", "E_DTYPE", "E_ARGUMENT",
                "E_POLICY_CONFLICT")


def revalidate(plan, registry, *, limits: Mapping[str, int]) -> None:
    """Raise unless every node of ``plan`` (a ResolvedPlan, read by its fields) satisfies its
    operator's declared equations."""
    with collector_paused(), using_registry(registry), limits_in_force(limits):
        _recheck_outside_facts(plan, registry)
        try:
            _revalidate(plan, registry, limits)
        except HNDLError as error:
            if error.code not in INCONSISTENT:
                raise
            raise HNDLError(
                "E_INTEGRITY",
                f"saved plan is inconsistent with the registered declarations: {error.message}",
                node=error.location.node,
                field=error.location.field,
                chain=error.chain,
                remedies=("Restore the plan from an unmodified copy, or re-resolve its specification.",),
            ) from None


def _recheck_outside_facts(plan, registry) -> None:
    """Run each declaration's ``restore`` hook on its saved arguments.

    A hook re-checks facts the plan took from outside itself (a pretrained checkpoint's
    revision). Its failure is not an inconsistency of the saved text, so it propagates with
    its own code instead of becoming E_INTEGRITY.
    """
    for saved in plan.nodes:
        spec = registry.by_identity(saved.op)
        if spec.restore is None:
            continue
        try:
            spec.restore(dict(saved.args))
        except HNDLError as error:
            raise error.located(node=saved.id, line=saved.source.get("line"), column=saved.source.get("column")) from None


def _revalidate(plan, registry, limits: Mapping[str, int]) -> None:
    graph = _graph(plan, registry)
    order = execution_order(graph, max_nodes=limits["max_nodes"], max_edges=limits["max_edges"])
    if [node.id for node in order] != [node.id for node in plan.nodes]:
        raise HNDLError("E_INTEGRITY", "saved node order is not the stable topological order")
    facts = Facts(batch_symbol=plan.batch, max_dimension=limits["max_dimension"])
    tensors = build_tensors(graph, facts)
    states = [node_state(node, tensors, facts) for node in order]
    check_dtypes(states, tensors, plan.dtype)
    shapes = _saved_shapes(plan)
    for ref, tensor in tensors.items():
        _seed(tensor, shapes[ref], ref, facts)
    for saved in plan.nodes:
        for port, ref in saved.inputs.items():
            if tuple(saved.input_shapes[port]) != shapes[ref]:
                raise HNDLError(
                    "E_INTEGRITY",
                    f"node {saved.id!r} input {port!r} is saved as {list(saved.input_shapes[port])} but {ref} "
                    f"is {list(shapes[ref])}",
                    node=saved.id, field=port,
                )
    for port in plan.outputs:
        if tuple(port["shape"]) != shapes[port["ref"]]:
            raise HNDLError("E_INTEGRITY", f"output {port['name']!r} does not match the shape of {port['ref']}",
                            field=port["name"])
    for state in states:
        apply_node(state)


def _graph(plan, registry) -> Graph:
    contracts = parse_contracts(
        {port["name"]: tuple(port["shape"]) for port in plan.inputs},
        {port["name"]: tuple(port["shape"]) for port in plan.outputs},
        dtype=plan.dtype,
        input_dtype={port["name"]: port["dtype"] for port in plan.inputs},
    )
    nodes = []
    for saved in plan.nodes:
        spec = registry.by_identity(saved.op)
        declared = spec.output_ports(dict(saved.args))
        if tuple(saved.outputs) != declared:
            raise HNDLError(
                "E_BINDING",
                f"node {saved.id!r} saves output ports {list(saved.outputs)}, but {spec.qualified} with these "
                f"arguments declares {list(declared)}",
                node=saved.id,
                field="outputs",
            )
        if set(saved.input_shapes) != set(saved.inputs) or set(saved.output_shapes) != set(saved.outputs):
            raise HNDLError("E_BINDING", f"node {saved.id!r}: port shapes do not match its ports", node=saved.id)
        args = dict(saved.args)
        nodes.append(Node(
            id=saved.id,
            spec=spec,
            args=args,
            inputs={port: Ref.parse(ref) for port, ref in saved.inputs.items()},
            outputs=tuple(saved.outputs),
            line=saved.source.get("line"),
            column=saved.source.get("column"),
        ))
    outputs = {port["name"]: Ref.parse(port["ref"]) for port in plan.outputs}
    return Graph(contracts=contracts, nodes=nodes, outputs=outputs, frontend=plan.frontend.get("kind", ""),
                 provenance=plan.frontend)


def _saved_shapes(plan) -> dict[str, tuple]:
    shapes = {f"input:{port['name']}": tuple(port["shape"]) for port in plan.inputs}
    for node in plan.nodes:
        for port in node.outputs:
            shapes[f"node:{node.id}/{port}"] = tuple(node.output_shapes[port])
    return shapes


def _seed(tensor: TensorFacts, shape: tuple, ref: str, facts: Facts) -> None:
    tensor.seed(shape, batch_multiple(shape[0], facts.batch_symbol), f"saved shape of {ref} is {list(shape)}")
