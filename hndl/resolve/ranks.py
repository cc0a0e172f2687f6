"""Local rank trials: refute a trial rank on the part of the graph it can reach first.

The rank search (resolver step 4b) asks, for a tensor the sweep left unranked, which supported
ranks contradict no connected rule. Solving the whole graph again for each trial makes the search
quadratic in the number of such tensors (a network with one open reshape per block). A trial
here solves only the *region* of the tensor: the nodes that touch it or any unranked tensor
connected to it through unranked tensors, over fresh facts seeded with what the settled solve
already knows about every tensor of the region (ranks, extents, batch multiples, intervals and
the ratios between unknown extents of the region).

Everything seeded is a consequence of the specification, and every rule applied is a rule of
the specification, so a contradiction in the region is a contradiction of the whole: a rank the
region refutes is refuted. A rank the region admits is admitted by the whole graph when the
region is the whole graph, or when the trial taught the region's boundary tensors nothing the
settled solve did not know (the nodes outside then have nothing new to apply); otherwise the
resolver falls back to a full trial.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Mapping, NamedTuple, Optional, Union

from ..errors import HNDLError
from .facts import Facts, TensorFacts
from .patterns import NodeState
from .sweep import sweep


class Topology(NamedTuple):
    """Which node states touch which tensor, for one settled solve."""

    keys: dict[int, str]  # id(TensorFacts) -> tensor key
    touching: dict[str, list[int]]  # tensor key -> indices of the states with a port on it
    position: dict[str, int]  # tensor key -> its place in the settled solve's order


def topology(tensors: Mapping[str, TensorFacts], states: list[NodeState]) -> Topology:
    keys = {id(tensor): key for key, tensor in tensors.items()}
    touching: dict[str, list[int]] = {key: [] for key in tensors}
    for index, state in enumerate(states):
        for tensor in {id(t): t for t in (*state.inputs.values(), *state.outputs.values())}.values():
            touching[keys[id(tensor)]].append(index)
    return Topology(keys, touching, {key: place for place, key in enumerate(tensors)})


class Region(NamedTuple):
    """The states a trial of one tensor re-solves, and the tensors they touch."""

    states: tuple[int, ...]  # indices into the settled solve's states, in execution order
    keys: tuple[str, ...]  # tensor keys, in the settled solve's order
    whole: bool  # the region is every node of the graph
    boundary: tuple[str, ...]  # the region's tensors a node outside the region reads or makes


def region(key: str, tensors: Mapping[str, TensorFacts], states: list[NodeState], topo: Topology) -> Region:
    """The nodes touching ``key`` or an unranked tensor connected to it through unranked tensors."""
    chosen: set[int] = set()
    seen = {key}
    frontier = [key]
    while frontier:
        current = frontier.pop()
        for index in topo.touching[current]:
            if index in chosen:
                continue
            chosen.add(index)
            state = states[index]
            for tensor in (*state.inputs.values(), *state.outputs.values()):
                other = topo.keys[id(tensor)]
                if tensor.rank is None and other not in seen:
                    seen.add(other)
                    frontier.append(other)
    return _region_of(key, chosen, states, topo)


def _region_of(key: str, chosen: set[int], states: list[NodeState], topo: Topology) -> Region:
    indices = tuple(sorted(chosen))
    touched = {topo.keys[id(t)] for index in indices
               for t in (*states[index].inputs.values(), *states[index].outputs.values())}
    touched.add(key)
    keys = tuple(sorted(touched, key=topo.position.__getitem__))
    boundary = tuple(other for other in keys if any(index not in chosen for index in topo.touching[other]))
    return Region(indices, keys, len(indices) == len(states), boundary)


class LocalOutcome(NamedTuple):
    """A region solved with one trial rank: its tensors by key, or the contradiction it raised.

    ``escaped`` is False when the trial left every boundary tensor of its (grown) region as the
    settled solve knew it (extents, batch multiples, intervals, and which unknown extents are
    tied together): the nodes outside the region then see nothing new, so the whole graph
    admits the rank too. ``nodes`` counts the node states the trial solved, over all its growths.
    """

    tensors: Optional[dict[str, TensorFacts]]
    error: Optional[HNDLError]
    escaped: bool = True
    nodes: int = 0


def local_trial(
    key: str, rank: int, reason: str, part: Region, tensors: Mapping[str, TensorFacts], states: list[NodeState],
    topo: Topology, facts: Facts, max_iterations: int,
) -> LocalOutcome:
    """Solve ``part`` with ``key`` at ``rank``; while the trial teaches a boundary tensor something
    new, grow the region by the nodes that read or make that tensor and solve again."""
    chosen = set(part.states)
    solved = 0
    while True:
        solved += len(part.states)
        outcome = _solve_region(key, rank, reason, part, tensors, states, topo, facts, max_iterations)
        if outcome.error is not None or outcome.tensors is None:
            return outcome._replace(nodes=solved)
        changed = _changed(part.boundary, tensors, facts, outcome.tensors)
        if not changed:
            return outcome._replace(escaped=False, nodes=solved)
        grown = {index for other in changed for index in topo.touching[other]} - chosen
        if not grown:  # cannot happen for a boundary tensor; kept as the conservative answer
            return outcome._replace(nodes=solved)
        chosen |= grown
        part = _region_of(key, chosen, states, topo)


def _solve_region(
    key: str, rank: int, reason: str, part: Region, tensors: Mapping[str, TensorFacts], states: list[NodeState],
    topo: Topology, facts: Facts, max_iterations: int,
) -> LocalOutcome:
    """Solve ``part`` over fresh facts seeded from the settled solve, with ``key`` at ``rank``."""
    local = Facts(batch_symbol=facts.batch_symbol, max_dimension=facts.max_dimension, max_multiple=facts.max_multiple)
    try:
        seeded = _seed_region(part.keys, tensors, facts, local)
        trial_states = [_copy_state(states[index], seeded, topo, local) for index in part.states]
    except HNDLError:
        # The settled facts always agree with themselves; should copying them fail, the region
        # proves nothing and the rank goes to a full trial.
        return LocalOutcome(None, None)
    try:
        seeded[key].set_rank(rank, reason)
        sweep(trial_states, max_iterations)
    except HNDLError as error:
        return LocalOutcome(None, error)
    return LocalOutcome(seeded, None)


def _changed(boundary: Iterable[str], tensors: Mapping[str, TensorFacts], facts: Facts,
             seeded: Mapping[str, TensorFacts]) -> set[str]:
    """The boundary tensors the trial learned something about that the settled solve did not know."""
    changed: set[str] = set()
    before: dict[int, list] = {}
    after: dict[object, list] = {}
    for key in boundary:
        was, now = tensors[key], seeded[key]
        if was.rank != now.rank:
            changed.add(key)
            continue
        if was.rank is None:
            continue
        if was.rendered() != now.rendered():
            changed.add(key)
            continue
        local = now.facts
        for axis, (old, new) in enumerate(zip(was.dims, now.dims)):
            if facts.value(old) is not None or facts.batch_multiple(old) is not None:
                continue
            if facts.interval(old) != local.interval(new):
                changed.add(key)
            before.setdefault(facts.find(old)[0], []).append((key, axis))
            after.setdefault(local.find(new)[0], []).append((key, axis))
    groups_before = {tuple(group) for group in before.values()}
    for group in after.values():
        if tuple(group) not in groups_before:  # unknown extents the trial tied together
            changed.update(entry[0] for entry in group)
    return changed


def _seed_region(
    keys: Iterable[str], tensors: Mapping[str, TensorFacts], facts: Facts, local: Facts
) -> dict[str, TensorFacts]:
    """Fresh tensors for ``keys`` carrying every settled fact about their axes."""
    seeded: dict[str, TensorFacts] = {}
    classes: dict[int, tuple[int, object]] = {}  # settled root -> (a local variable in it, its ratio to the root)
    for key in keys:
        was = tensors[key]
        tensor = TensorFacts(local, was.label)
        tensor.dtype = was.dtype
        seeded[key] = tensor
        if was.rank is None:
            continue
        reason = was.rank_reason or f"{was.label} has rank {was.rank}"
        tensor.set_rank(was.rank, reason)
        for old, new in zip(was.dims, tensor.dims):
            why = f"{facts.label(old)} as settled"
            value = facts.value(old)
            if value is not None:
                local.set_value(new, value, why)
                continue
            multiple = facts.batch_multiple(old)
            if multiple is not None:
                local.equate(new, local.batch, why, ratio=multiple)
                continue
            interval = facts.interval(old)
            root, ratio = facts.find(old)
            if root in classes:
                other, other_ratio = classes[root]
                local.equate(new, other, why, ratio=_ratio(ratio, other_ratio))
            else:
                classes[root] = (new, ratio)
            if interval is not None:
                local.bound(new, interval[0], interval[1], why)
    return seeded


def _ratio(ratio, other_ratio):
    quotient = Fraction(ratio) / Fraction(other_ratio)
    return quotient.numerator if quotient.denominator == 1 else quotient


def _copy_state(state: NodeState, seeded: Mapping[str, TensorFacts], topo: Topology, local: Facts) -> NodeState:
    """The node's working state over the region's tensors, with the arguments it had settled."""
    def port(tensor: TensorFacts) -> TensorFacts:
        return seeded[topo.keys[id(tensor)]]

    return NodeState(
        state.node, dict(state.args), dict(state.origins), state.policy,
        {name: port(tensor) for name, tensor in state.inputs.items()},
        {name: port(tensor) for name, tensor in state.outputs.items()},
        local,
    )


def fits(outcome: Union[LocalOutcome, HNDLError, object], contradictions: tuple[str, ...]) -> bool:
    """Whether a trial outcome leaves its rank possible."""
    error = outcome.error if isinstance(outcome, LocalOutcome) else outcome
    return not (isinstance(error, HNDLError) and error.code in contradictions)
