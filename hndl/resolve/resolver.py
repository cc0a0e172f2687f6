"""The five-step resolution pipeline (§5): author Graph in, immutable ResolvedPlan out.

1. validate the graph and order it; 2. normalize arguments; 3. check edge dtypes and seed the
external contracts; 4. sweep patterns and relations forward then backward to a fixed point, and
settle a rank the sweep left open when only one supported rank contradicts no connected rule;
5. demand completeness, run finalize hooks and freeze the plan. Nothing here constructs a
module, allocates a tensor or draws a random number.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional, Union

from ..collector import collector_paused
from ..errors import HNDLError
from ..graph import Graph, execution_order
from ..limits import limits_in_force
from ..plan import DEFAULT_INITIALIZATION, DEFAULT_TRAINABILITY, PlanNode, ResolvedPlan, freeze
from ..shape_text import format_shape
from . import ranks as ranks_local
from .facts import SUPPORTED_RANKS, Facts, TensorFacts
from .patterns import NodeState
from .sweep import build_tensors, check_dtypes, node_state, sweep


def resolve_graph(graph: Graph, *, limits: Mapping[str, int]) -> ResolvedPlan:
    """Resolve every omitted dimension of ``graph`` or explain why no plan exists."""
    with collector_paused(), limits_in_force(limits):
        return _resolve(graph, limits)


class _Solved(NamedTuple):
    """The solver's state after a sweep to the fixed point."""

    facts: Facts
    tensors: dict[str, TensorFacts]
    states: list[NodeState]


def _resolve(graph: Graph, limits: Mapping[str, int]) -> ResolvedPlan:
    order = execution_order(graph, max_nodes=limits["max_nodes"], max_edges=limits["max_edges"])
    solved = _settle_ranks(graph, order, limits, _solve(graph, order, limits, {}))
    return _freeze_plan(graph, solved.states, solved.tensors, solved.facts, limits["max_elements"])


def _solve(graph: Graph, order: list, limits: Mapping[str, int], ranks: Mapping[str, tuple[int, str]]) -> _Solved:
    """Steps 2-4 from scratch, with ``ranks`` (tensor key -> (rank, reason)) asserted after the contracts."""
    contracts = graph.contracts
    facts = Facts(batch_symbol=contracts.batch, max_dimension=limits["max_dimension"])
    tensors = build_tensors(graph, facts)
    states = [node_state(node, tensors, facts) for node in order]
    check_dtypes(states, tensors, contracts.dtype)
    _seed_contracts(graph, tensors, facts)
    for key, (rank, reason) in ranks.items():
        tensors[key].set_rank(rank, reason)
    sweep(states, limits["max_iterations"])
    return _Solved(facts, tensors, states)


# -- step 3: contracts -------------------------------------------------------------------------
def _seed_contracts(graph: Graph, tensors: dict[str, TensorFacts], facts: Facts) -> None:
    contracts = graph.contracts
    for port in contracts.inputs:
        _seed(tensors[f"input:{port.name}"], port.shape, f"input contract {port.name!r}", facts, port.name)
    for port in contracts.outputs:
        ref = str(graph.outputs[port.name])
        _seed(tensors[ref], port.shape, f"output contract {port.name!r}", facts, port.name)


def _seed(tensor: TensorFacts, shape: tuple, what: str, facts: Facts, field: str) -> None:
    try:
        tensor.set_rank(len(shape), f"{what} is {format_shape(shape)}")
        facts.equate(tensor.dims[0], facts.batch, f"{what} axis 0 is the batch")
        for axis, extent in enumerate(shape[1:], start=1):
            facts.set_value(tensor.dims[axis], extent, f"{what} axis {axis} is {extent}")
    except HNDLError as error:
        raise error.located(field=field) from None


# -- step 4b: ranks the sweep left open ------------------------------------------------------
# How many trial solves of the whole graph the rank search may run in one resolution is
# ``limits["max_rank_trials"]``. A trial of a region (ranks.py) counts as the fraction of the
# graph's nodes it solves. Past the budget the search fails with E_RESOURCE.
#: The codes that show a trial rank is impossible; any other failure leaves the rank possible.
CONTRADICTIONS = ("E_CONSTRAINT", "E_RESHAPE")


def _settle_ranks(graph: Graph, order: list, limits: Mapping[str, int], solved: _Solved) -> _Solved:
    """Fix each open rank that only one supported rank can take (§6 reshape; §14 "rank from
    prefix bounds and connected contracts").

    Operators state which ranks they admit through their patterns and relations, which reject
    a port of the wrong rank once it is known (a reshape prefix needs a longer output, linear
    rejects rank 4); they cannot narrow a rank nobody has asserted yet. So for a tensor the
    sweep left unranked, the solver tries each supported rank in turn and keeps the ranks
    whose sweep does not contradict. A single survivor is a consequence of the facts, not a
    guess. Each trial first solves only the tensor's region (ranks.py): the ranks every region
    proves are asserted together in one full solve, so a network with one open reshape per
    block costs a few small solves per block, not a whole-graph solve per block. A tensor the
    region leaves open (or refutes at every rank, whose message a full trial then gives) is
    tried on the whole graph; tensors whose rank every surviving trial fixed follow the tried
    one and are not tried again in that pass. Several survivors are left for the completeness
    check to report, with the ranks that fit. The search never gives up silently: past its
    budget it fails with E_RESOURCE. Specifications whose ranks the sweep settles never come
    here, so their plans are unchanged.
    """
    budget = _TrialBudget(limits["max_rank_trials"])
    ranks: dict[str, tuple[int, str]] = {}
    while True:
        open_keys = [key for key, tensor in solved.tensors.items() if tensor.rank is None]
        if not open_keys:
            return solved
        proven, undecided = _local_pass(solved, open_keys, limits, budget)
        if proven:
            budget.spend(1, solved)
            ranks.update(proven)
            outcome = _solve(graph, order, limits, ranks)
            for key, (_, reason) in proven.items():
                outcome.tensors[key].rank_reason = reason
            solved = outcome
            continue
        settled = False
        followers: set[str] = set()
        for key in undecided:
            tensor = solved.tensors[key]
            if tensor.rank is not None or key in followers:
                continue
            budget.spend(len(SUPPORTED_RANKS), solved)
            outcomes = {
                rank: _trial(graph, order, limits, {**ranks, key: (rank, f"{tensor.label} tried at rank {rank}")})
                for rank in SUPPORTED_RANKS
            }
            fitting = [rank for rank, outcome in outcomes.items() if not _contradicted(outcome)]
            if not fitting:
                raise _no_rank(solved, key, outcomes)
            if len(fitting) == 1:
                rank = fitting[0]
                outcome = outcomes[rank]
                if isinstance(outcome, HNDLError):
                    raise outcome
                reason = _only_rank_reason(tensor.label, rank, outcomes)
                ranks[key] = (rank, reason)
                outcome.tensors[key].rank_reason = reason
                solved, settled = outcome, True
                break  # the regions of the other open tensors may prove them now
            tensor.rank_options = tuple(fitting)
            states = [outcomes[rank] for rank in fitting]
            if all(isinstance(state, _Solved) for state in states):
                _follow(solved.tensors, [state.tensors for state in states], followers)
        if not settled:
            return solved


class _TrialBudget:
    """The rank search's allowance of whole-graph trial solves (E_RESOURCE once spent)."""

    def __init__(self, allowance: int) -> None:
        self.allowance = allowance
        self.spent = 0.0

    def spend(self, solves: float, solved: _Solved) -> None:
        self.spent += solves
        if self.spent > self.allowance:
            open_labels = [tensor.label for tensor in solved.tensors.values() if tensor.rank is None]
            shown = ", ".join(open_labels[:8]) + (f" and {len(open_labels) - 8} more" if len(open_labels) > 8 else "")
            raise HNDLError(
                "E_RESOURCE",
                f"the rank search needs more than max_rank_trials={self.allowance} trial solves of the graph "
                f"to settle the ranks of {shown}",
                remedies=(
                    "Fix these ranks where the tensors are made: give every non-batch axis of a shape "
                    "argument (one entry per axis), or connect them to an operator or a contract of one rank.",
                    f"Raise the limit: limits={{'max_rank_trials': {2 * self.allowance}}}.",
                ),
            )


def _local_pass(
    solved: _Solved, open_keys: list[str], limits: Mapping[str, int], budget: _TrialBudget
) -> tuple[dict[str, tuple[int, str]], list[str]]:
    """Try every open tensor on its region: (the ranks proven, the tensors left to full trials)."""
    tensors, states = solved.tensors, solved.states
    topo = ranks_local.topology(tensors, states)
    whole = max(len(states), 1)
    proven: dict[str, tuple[int, str]] = {}
    undecided: list[str] = []
    followers: set[str] = set()
    for key in open_keys:
        if key in followers:
            continue
        tensor = tensors[key]
        part = ranks_local.region(key, tensors, states, topo)
        outcomes = {}
        for rank in SUPPORTED_RANKS:
            outcomes[rank] = outcome = ranks_local.local_trial(
                key, rank, f"{tensor.label} tried at rank {rank}", part, tensors, states, topo, solved.facts,
                limits["max_iterations"])
            budget.spend(max(outcome.nodes, len(part.states)) / whole, solved)
        fitting = [rank for rank, outcome in outcomes.items() if ranks_local.fits(outcome, CONTRADICTIONS)]
        if len(fitting) == 1:
            rank = fitting[0]
            errors = {other: outcome.error for other, outcome in outcomes.items()}
            proven[key] = (rank, _only_rank_reason(tensor.label, rank, errors))
            survivor = outcomes[rank].tensors
            followers.update(other for other in part.keys
                             if tensors[other].rank is None and survivor[other].rank is not None)
            continue
        if not fitting or not (part.whole or not any(outcomes[rank].escaped for rank in fitting)):
            undecided.append(key)  # a full trial gives the exact contradiction, or what the region cannot see
            continue
        # The region is the whole graph, or nothing it learned reaches past it: the ranks that fit
        # the region are the ranks that fit.
        tensor.rank_options = tuple(fitting)
        if all(outcomes[rank].tensors is not None for rank in fitting):
            _follow(tensors, [outcomes[rank].tensors for rank in fitting], followers, keys=part.keys)
    return proven, undecided


def _follow(tensors: Mapping[str, TensorFacts], trials: list, followers: set[str], keys=None) -> None:
    """Tensors every surviving trial ranked follow the tried one, with the ranks they took."""
    for other in tensors if keys is None else keys:
        was = tensors[other]
        if was.rank is None and all(trial[other].rank is not None for trial in trials):
            followers.add(other)
            options = tuple(sorted({trial[other].rank for trial in trials}))
            was.rank_options = options if len(options) > 1 else None


def _trial(graph: Graph, order: list, limits: Mapping[str, int], ranks) -> Union[_Solved, HNDLError]:
    try:
        return _solve(graph, order, limits, ranks)
    except HNDLError as error:
        return error


def _contradicted(outcome: Union[_Solved, HNDLError]) -> bool:
    return isinstance(outcome, HNDLError) and outcome.code in CONTRADICTIONS


def _ranks_text(ranks) -> str:
    ranks = [str(rank) for rank in ranks]
    return ranks[0] if len(ranks) == 1 else f"{', '.join(ranks[:-1])} and {ranks[-1]}"


def _only_rank_reason(label: str, rank: int, outcomes: dict) -> str:
    refuted = "; ".join(
        f"rank {other}: {outcome.message}" for other, outcome in outcomes.items() if other != rank
    )
    return f"{label} has rank {rank}, the only supported rank that contradicts no connected rule ({refuted})"


def _no_rank(solved: _Solved, key: str, outcomes: dict) -> HNDLError:
    """Every supported rank contradicts: the specification has no plan."""
    tensor = solved.tensors[key]
    where = next(
        ({**state.node.where(), "field": port} for state in solved.states
         for port, output in state.outputs.items() if output is tensor),
        {},
    )
    return HNDLError(
        "E_CONSTRAINT",
        f"{tensor.label} fits none of the supported ranks {_ranks_text(SUPPORTED_RANKS)}: "
        f"each contradicts a connected rule",
        **where,
        chain=tuple(
            f"at rank {rank}: {outcome.message}" + (f" ({outcome.location})" if str(outcome.location) else "")
            for rank, outcome in outcomes.items()
        ),
        remedies=(f"Change a literal, an operator or a contract so that one rank satisfies every rule "
                  f"connected to {tensor.label}.",),
    )


# -- step 5: completeness and the frozen plan ----------------------------------------------------
def _freeze_plan(
    graph: Graph, states: list[NodeState], tensors: dict[str, TensorFacts], facts: Facts, max_elements: int
) -> ResolvedPlan:
    for port in graph.contracts.inputs:
        _bound_elements(tensors[f"input:{port.name}"], max_elements, None, port.name)
    _require_complete(states)
    for state in states:
        state.spec.check_tensor_values(state.args, graph.contracts.dtype, state.node.id)
    checked: set[int] = set()  # a tensor is bounded once, at the first port that shows it
    for state in states:
        for ports in (state.inputs, state.outputs):
            for port, tensor in ports.items():
                if id(tensor) not in checked:
                    _bound_elements(tensor, max_elements, state, port)
                    checked.add(id(tensor))
    nodes = [_plan_node(state) for state in states]
    contracts = graph.contracts
    plan = ResolvedPlan(
        frontend=graph.provenance,
        batch=contracts.batch,
        dtype=contracts.dtype,
        inputs=tuple({"name": p.name, "shape": p.shape, "dtype": p.dtype} for p in contracts.inputs),
        outputs=tuple(
            {"name": p.name, "ref": str(graph.outputs[p.name]), "shape": p.shape} for p in contracts.outputs
        ),
        nodes=nodes,
    )
    return plan


def _require_complete(states: list[NodeState]) -> None:
    """Every port shape must be concrete; otherwise report the undetermined ports (E_AMBIGUOUS).

    The lead port is the first one an inverse relation narrowed to an interval, if any, since
    that is usually where the choice lies; the others follow in the chain.
    """
    open_ports = []
    for state in states:
        for port in (*state.inputs, *state.outputs):
            tensor = state.tensor(port)
            if not tensor.complete():
                open_ports.append((state, port, tensor))
    if not open_ports:
        return
    descriptions = [(state, port, _describe_open(tensor)) for state, port, tensor in open_ports]
    lead = next((entry for entry in descriptions if ".." in entry[2]), descriptions[0])
    state, port, shown = lead
    others = tuple(
        f"{other.node.id} ({other.spec.alias}) {other_port} is {text}"
        for other, other_port, text in descriptions[:8] if (other, other_port) != (state, port)
    )
    others += tuple(dict.fromkeys(
        f"{other.node.id} ({other.spec.alias}) is opaque: its output contract is asserted, so backward "
        f"inference through it is unavailable"
        for other, other_port, _ in open_ports if other.spec.opaque and other_port in other.inputs
    ))
    remedies = []
    if state.tensor(port).rank is None:
        remedies.append(
            f"Fix the rank of {state.tensor(port).label}: give every non-batch axis where it is made "
            f"(one entry per axis of a shape argument), or connect it to an operator or a contract of one rank."
        )
    if state.tensor(port).rank is not None or any(tensor.rank is not None for _, _, tensor in open_ports):
        remedies.append(
            "Give the missing width or channel count explicitly on this node or a neighbour, "
            "or constrain it through an output contract."
        )
    raise HNDLError(
        "E_AMBIGUOUS",
        f"{state.spec.alias} port {port!r} is not determined: {shown}",
        **state.node.where(),
        field=port,
        chain=others,
        remedies=tuple(remedies),
    )


def _describe_open(tensor: TensorFacts) -> str:
    shape = tensor.shape()
    if shape is None:
        options = tensor.rank_options
        if options is None:
            return "of unknown rank (several ranks remain possible)"
        return f"of unknown rank: ranks {_ranks_text(options)} {'both' if len(options) == 2 else 'all'} fit its connected rules"
    return format_shape([_unknown(tensor.facts, var) if entry is None else entry for var, entry in zip(tensor.dims, shape)])


def _unknown(facts, var: int) -> str:
    """``?`` for a free extent, ``lo..hi`` when an inverse relation left an interval."""
    interval = facts.interval(var)
    return "?" if interval is None else f"{interval[0]}..{interval[1]}"


def _bound_elements(tensor: TensorFacts, max_elements: int, state: Optional[NodeState], port: str) -> None:
    """A complete port holds at most ``max_elements`` elements per example (§5 limits)."""
    count = 1
    for entry in tensor.rendered()[1:]:
        count *= entry
    if count > max_elements:
        where = {"field": port} if state is None else {**state.node.where(), "field": port}
        raise HNDLError(
            "E_RESOURCE",
            f"{tensor.label} holds {count} elements per example, above max_elements={max_elements}",
            **where,
            remedies=("Shrink the specification or raise limits['max_elements'].",),
        )


def _plan_node(state: NodeState) -> PlanNode:
    """The frozen plan node of a solved state, built immutable at once (no deep copy)."""
    args, origins, derivations = state.args, state.origins, state.derivations
    facts = state.facts
    for symbol, name in state.dim_args.items():
        if name in args:
            continue
        var = state.symbol(symbol)
        value = facts.value(var)
        if value is not None:
            args[name] = value
            origins[name] = "inferred"
            derivations[name] = _bounded(facts.explain(var))
    spec = state.spec
    declared = spec.args
    for name in declared if len(args) < len(declared) else ():
        if name not in args:
            raise HNDLError(
                "E_UNRESOLVED",
                f"no relation determined {spec.alias} argument {name!r}",
                **state.node.where(),
                field=name,
                remedies=(f"Give {name}= explicitly.",),
            )
    input_shapes = {port: tensor.rendered() for port, tensor in state.inputs.items()}
    output_shapes = {port: tensor.rendered() for port, tensor in state.outputs.items()}
    if spec.finalize is not None:
        finalized = dict(args)
        spec.finalize(finalized, input_shapes, output_shapes)
        for name, value in finalized.items():
            if args.get(name, value) != value:
                raise HNDLError("E_CONSTRAINT", f"finalize of {spec.alias} rewrote {name}", **state.node.where())
            if name not in args:
                origins[name] = "inferred"
                derivations[name] = (f"finalize of {spec.alias} from the resolved port shapes",)
        args = finalized
    node = state.node
    return PlanNode.restored(
        id=node.id,
        op=spec.qualified,
        alias=spec.alias,
        args=MappingProxyType({name: freeze(args[name]) for name in declared}) if declared else NO_ARGUMENTS,
        inputs=MappingProxyType({port: str(ref) for port, ref in node.inputs.items()}),
        outputs=tuple(node.outputs),
        input_shapes=MappingProxyType(input_shapes),
        output_shapes=MappingProxyType(output_shapes),
        initialization=freeze(node.init or DEFAULT_INITIALIZATION),
        trainability=freeze(node.trainable or DEFAULT_TRAINABILITY),
        source=MappingProxyType({"line": node.line, "column": node.column, "policy": state.policy,
                                 "derivations": MappingProxyType({name: freeze(steps) for name, steps in derivations.items()})}),
        provenance=MappingProxyType({name: origins[name] for name in declared}) if declared else NO_ARGUMENTS,
    )


#: The arguments (and their provenance) of a node whose operator declares none, shared by such nodes.
NO_ARGUMENTS = MappingProxyType({})


MAX_DERIVATION_STEPS = 32


def _bounded(steps: tuple[str, ...]) -> tuple[str, ...]:
    """Long chains keep their first and last steps, so explanations never dominate a plan."""
    if len(steps) <= MAX_DERIVATION_STEPS:
        return steps
    half = MAX_DERIVATION_STEPS // 2
    omitted = len(steps) - 2 * half + 1
    return (*steps[:half], f"... {omitted} more equations of the same chain ...", *steps[-half + 1:])
