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
from ..errors import HNDLError, listed, shown
from ..graph import Graph, Node, Ref, execution_order
from ..limits import limits_in_force
from ..plan_values import exact_key
from ..registry import using_registry
from .facts import Facts, TensorFacts
from .sweep import apply_node, build_tensors, check_dtypes, node_state, tensor_label

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
    for saved in plan.nodes:
        registry.by_identity(saved.op).check_tensor_values(saved.args, plan.dtype, saved.id)
    shapes = _saved_shapes(plan)
    try:
        _check_nodes_alone(plan, graph, order, shapes, limits)
        return
    except HNDLError:
        pass  # the whole-graph check below finds the same fault and reports it as it always has
    _check_whole_graph(plan, graph, order, shapes, limits)


def _check_nodes_alone(plan, graph: Graph, order: list[Node], shapes: dict[str, tuple], limits) -> None:
    """Check each node on its own, its ports seeded from the saved shapes, and each distinct
    (declaration, arguments, port shapes, input dtypes) once.

    In a saved plan every port shape is concrete, so applying a node only compares facts about
    its own ports and adds facts about its own local symbols: no node can change what another
    sees. A node therefore passes alone exactly when it passes in the whole graph, and nodes
    that repeat one call on one shape (the blocks of a deep network) share one check. Any
    failure is left to the whole-graph check, which reports it with its full context.
    """
    _check_saved_bindings(plan, shapes)
    dtypes = {f"input:{port.name}": port.dtype for port in graph.contracts.inputs}
    verified: dict = {}
    for node in order:
        refs = [*node.inputs.values()]
        outputs = [Ref(node.id, port) for port in node.outputs]
        key = (node.spec, exact_key(node.args), tuple(node.inputs), node.outputs,
               tuple(shapes[str(ref)] for ref in refs), tuple(shapes[str(ref)] for ref in outputs),
               tuple(dtypes[str(ref)] for ref in refs))
        produced = verified.get(key) if key[1] is not None else None
        if produced is None:
            produced = _check_alone(plan, node, refs, outputs, shapes, dtypes, limits)
            if key[1] is not None:
                verified[key] = produced
        dtypes.update(zip(map(str, outputs), produced))


def _check_alone(plan, node: Node, refs: list[Ref], outputs: list[Ref], shapes, dtypes, limits) -> tuple:
    """Apply ``node`` alone to its seeded ports; the dtypes it produces."""
    facts = Facts(batch_symbol=plan.batch, max_dimension=limits["max_dimension"])
    tensors = {}
    for ref in (*refs, *outputs):
        text = str(ref)
        if text not in tensors:
            tensor = tensors[text] = TensorFacts(facts, tensor_label(ref))
            tensor.dtype = dtypes.get(text)
            _seed(tensor, shapes[text], text, facts)
    state = node_state(node, tensors, facts)
    check_dtypes([state], tensors, plan.dtype)
    apply_node(state)
    return tuple(tensors[str(ref)].dtype for ref in outputs)


def _check_whole_graph(plan, graph: Graph, order: list[Node], shapes: dict[str, tuple], limits) -> None:
    """Seed every tensor of one graph from the saved shapes and apply every node once."""
    facts = Facts(batch_symbol=plan.batch, max_dimension=limits["max_dimension"])
    tensors = build_tensors(graph, facts)
    states = [node_state(node, tensors, facts) for node in order]
    check_dtypes(states, tensors, plan.dtype)
    for ref, tensor in tensors.items():
        _seed(tensor, shapes[ref], ref, facts)
    _check_saved_bindings(plan, shapes)
    for state in states:
        apply_node(state)


def _check_saved_bindings(plan, shapes: dict[str, tuple]) -> None:
    """Each saved input shape and output contract repeats the shape of the tensor it reads."""
    for saved in plan.nodes:
        for port, ref in saved.inputs.items():
            if tuple(saved.input_shapes[port]) != shapes[ref]:
                raise HNDLError(
                    "E_INTEGRITY",
                    f"node {shown(saved.id)} input {shown(port)} is saved as {_shape_text(saved.input_shapes[port])} "
                    f"but {shown(ref)} is {_shape_text(shapes[ref])}",
                    node=saved.id, field=port,
                )
    for port in plan.outputs:
        if tuple(port["shape"]) != shapes[port["ref"]]:
            raise HNDLError("E_INTEGRITY", f"output {shown(port['name'])} does not match the shape of "
                            f"{shown(port['ref'])}", field=port["name"])


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
                f"node {shown(saved.id)} saves output ports [{listed(saved.outputs)}], but {spec.qualified} with "
                f"these arguments declares [{listed(declared)}]",
                node=saved.id,
                field="outputs",
            )
        if set(saved.input_shapes) != set(saved.inputs) or set(saved.output_shapes) != set(saved.outputs):
            raise HNDLError("E_BINDING", f"node {shown(saved.id)}: port shapes do not match its ports", node=saved.id)
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


def _shape_text(shape) -> str:
    """A saved shape as ``['B', 64]``, each entry bounded (an extent may be thousands of digits long)."""
    return f"[{listed(shape, show=shown)}]"
