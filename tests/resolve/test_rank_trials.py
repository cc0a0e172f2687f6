"""Issue 27 regression: the rank search scales with the network and never reports a false ambiguity.

Nine copies of a reshape whose rank only a consumer settles used to exhaust a fixed budget of 24
trial solves and fail E_AMBIGUOUS although rank 3 is the only fit. Each open rank is now first
tried on its region, the ranks the regions prove are asserted in one full solve, and a spent
budget is E_RESOURCE naming the limit.
"""

import pytest

import hndl
from hndl import HNDLError
from hndl.resolve import ranks, resolver

BLOCK = "reshape(8, 16)\ntranspose(1, 2)\nlayer_norm()\ntranspose(1, 2)\nreshape(8, 4, 4)"
SHAPE = ("B", 8, 4, 4)


def copies(count: int) -> str:
    return "\n".join([BLOCK] * count)


def counted_solves(monkeypatch) -> list:
    calls = []
    solve = resolver._solve
    monkeypatch.setattr(resolver, "_solve", lambda *args: calls.append(args[-1]) or solve(*args))
    return calls


@pytest.mark.parametrize("count", [1, 8, 9, 19, 40])
def test_every_copy_of_a_reshape_settled_by_its_consumer_takes_rank_3(count):
    plan = hndl.resolve(copies(count), input_shape=SHAPE, output_shape=SHAPE)
    for block in range(count):
        first = plan.node(f"n{5 * block}")
        assert first.output_shapes["out"] == ("B", 8, 16)
        assert plan.node(f"n{5 * block + 2}").output_shapes["out"] == ("B", 16, 8)
        assert plan.node(f"n{5 * block + 4}").output_shapes["out"] == SHAPE


def test_forty_copies_cost_two_full_solves_not_one_per_copy(monkeypatch):
    calls = counted_solves(monkeypatch)
    hndl.resolve(copies(40), input_shape=SHAPE, output_shape=SHAPE)
    assert len(calls) == 2  # the first solve, then one with the forty proven ranks
    assert len(calls[1]) == 40 and {rank for rank, _ in calls[1].values()} == {3}
    reason = calls[1]["node:n0/out"][1]
    assert reason.startswith("n0.out has rank 3, the only supported rank that contradicts no connected rule")


def test_the_plan_of_a_rank_proved_by_its_region_equals_the_plan_a_full_trial_gives(monkeypatch):
    expected = hndl.resolve(copies(3), input_shape=SHAPE, output_shape=SHAPE)
    # Regions that never see the whole graph and never decide force every rank through full trials.
    monkeypatch.setattr(ranks, "local_trial", lambda *args: ranks.LocalOutcome(None, None))
    calls = counted_solves(monkeypatch)
    plan = hndl.resolve(copies(3), input_shape=SHAPE, output_shape=SHAPE)
    assert len(calls) > 2  # the full trials ran
    assert plan.to_json() == expected.to_json()


def test_a_genuine_ambiguity_among_many_open_ranks_is_still_reported_as_one():
    source = "\n".join(["reshape(2, 2)\nrelu()"] * 40 + ["flatten()"])
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert caught.value.code == "E_AMBIGUOUS"
    assert caught.value.message == ("reshape port 'out' is not determined: of unknown rank: "
                                    "ranks 3 and 4 both fit its connected rules")


def test_a_spent_budget_is_e_resource_naming_the_limit_never_an_ambiguity():
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(copies(40), input_shape=SHAPE, output_shape=SHAPE, limits={"max_rank_trials": 1})
    error = caught.value
    assert error.code == "E_RESOURCE"
    assert error.message.startswith("the rank search needs more than max_rank_trials=1 trial solves of the graph "
                                    "to settle the ranks of n")
    assert "and " in error.message and "more" in error.message  # forty open tensors are not all listed
    assert error.remedies[-1] == "Raise the limit: limits={'max_rank_trials': 2}."
    assert error.remedies[0].startswith("Fix these ranks where the tensors are made")


def test_a_contradiction_found_by_a_region_is_reported_with_the_full_trials_reasons():
    source = copies(2).replace("reshape(8, 4, 4)", "reshape(8, 4, 5)", 1)
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(source, input_shape=SHAPE, output_shape=SHAPE)
    error = caught.value
    assert error.code == "E_CONSTRAINT"
    assert error.message == "n0.out fits none of the supported ranks 2, 3 and 4: each contradicts a connected rule"
    assert (error.location.node, error.location.field) == ("n0", "out")
    assert [fact.split(":")[0] for fact in error.chain] == ["at rank 2", "at rank 3", "at rank 4"]
    assert "cannot supply the 8 * 4 * 5 = 160 elements" in error.chain[1] and "(node n4;" in error.chain[1]
    assert "layer_norm acts on the last axis" in error.chain[2]


def test_many_independent_ambiguous_ranks_are_reported_without_a_full_trial_each(monkeypatch):
    # Each reshape(2, 2) fits ranks 3 and 4 (the flatten after it takes either); its region sees
    # that and nothing it learns reaches past the next node, so no full trial is needed.
    calls = counted_solves(monkeypatch)
    source = "\n".join(["reshape(2, 2)\nflatten()"] * 100)
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert caught.value.code == "E_AMBIGUOUS"
    assert caught.value.message == ("reshape port 'out' is not determined: of unknown rank: "
                                    "ranks 3 and 4 both fit its connected rules")
    assert len(calls) == 1


def test_a_region_grows_while_its_trial_teaches_a_boundary_tensor_something_new(monkeypatch):
    # Rank 3 for the first reshape ties the batch of the block's last tensor to the plan batch,
    # which the next block's first node reads: that node joins the region before the verdict.
    seen = []
    trial = ranks.local_trial

    def recorded(*args):
        seen.append((args[1], args[3], trial(*args)))
        return seen[-1][2]

    monkeypatch.setattr(ranks, "local_trial", recorded)
    hndl.resolve(copies(2), input_shape=SHAPE, output_shape=SHAPE)
    first = {rank: (part, outcome) for rank, part, outcome in seen if part.states[0] == 0}
    part, outcome = first[3]
    assert outcome.error is None and not outcome.escaped and outcome.nodes > len(part.states)
    assert first[2][1].error is not None and first[4][1].error is not None
