"""Dimension facts (§5): equality and exact scales in both directions, contradictions, batch."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from hndl import HNDLError
from hndl.resolve.facts import Facts, TensorFacts


def fails(expected, fn, *args, **kwargs):
    with pytest.raises(HNDLError) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == expected, str(caught.value)
    return caught.value


# -- equality -----------------------------------------------------------------------------------
def test_a_fresh_variable_is_unknown():
    facts = Facts()
    assert facts.value(facts.new("a")) is None


def test_equality_propagates_a_later_value_forward():
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.equate(a, b, "a == b")
    facts.set_value(a, 7, "a is 7")
    assert facts.value(b) == 7


def test_equality_propagates_a_later_value_backward():
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.equate(a, b, "a == b")
    facts.set_value(b, 7, "b is 7")
    assert facts.value(a) == 7


@pytest.mark.parametrize("known", ["first", "second"])
def test_equating_with_a_known_class_fills_the_unknown_one(known):
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.set_value(a if known == "first" else b, 5, "known")
    facts.equate(a, b, "a == b")
    assert facts.value(a) == facts.value(b) == 5


def test_equality_is_transitive_across_long_chains():
    facts = Facts()
    chain = [facts.new(f"v{i}") for i in range(50)]
    for left, right in zip(chain, chain[1:]):
        facts.equate(left, right, "chain")
    facts.set_value(chain[-1], 3, "end")
    assert all(facts.value(var) == 3 for var in chain)


def test_restating_a_known_fact_adds_nothing():
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.equate(a, b, "a == b")
    facts.set_value(a, 4, "a is 4")
    version = facts.version
    facts.set_value(b, 4, "b is 4")
    facts.equate(b, a, "again")
    assert facts.version == version


# -- exact scales --------------------------------------------------------------------------------
def test_a_scale_propagates_forward_and_backward():
    facts = Facts()
    a, c = facts.new("a"), facts.new("C")
    facts.equate(a, c, "a = 2*C", ratio=2)
    facts.set_value(c, 8, "C is 8")
    assert facts.value(a) == 16

    facts = Facts()
    a, c = facts.new("a"), facts.new("C")
    facts.equate(a, c, "a = 2*C", ratio=2)
    facts.set_value(a, 16, "a is 16")
    assert facts.value(c) == 8


def test_scales_compose_through_a_class():
    facts = Facts()
    a, b, c = facts.new("a"), facts.new("b"), facts.new("c")
    facts.equate(a, b, "a = 2*b", ratio=2)
    facts.equate(b, c, "b = 3*c", ratio=3)
    facts.set_value(a, 60, "a is 60")
    assert (facts.value(b), facts.value(c)) == (30, 10)


def test_scaling_is_exact_65_cannot_be_twice_an_integer():
    facts = Facts()
    a, c = facts.new("params"), facts.new("C")
    facts.equate(a, c, "params = 2*C", ratio=2)
    error = fails("E_CONSTRAINT", facts.set_value, a, 65, "params is 65")
    assert "would be 32.5" in error.message
    assert facts.value(c) is None  # the failed fact left nothing behind


def test_an_inexact_scale_is_caught_when_classes_merge():
    facts = Facts()
    a, c = facts.new("params"), facts.new("C")
    facts.set_value(a, 65, "params is 65")
    error = fails("E_CONSTRAINT", facts.equate, a, c, "params = 2*C", ratio=2)
    assert "32.5" in error.message


def test_two_different_ratios_between_the_same_variables_contradict():
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.equate(a, b, "a = 2*b", ratio=2)
    fails("E_CONSTRAINT", facts.equate, a, b, "a = b")


# -- contradictions -------------------------------------------------------------------------------
def test_a_second_value_is_a_contradiction_naming_both_facts():
    facts = Facts()
    a, b = facts.new("width"), facts.new("other")
    facts.equate(a, b, "width equals other")
    facts.set_value(a, 64, "linear(64) fixes width")
    error = fails("E_CONSTRAINT", facts.set_value, b, 10, "output contract says 10")
    assert error.chain == ("linear(64) fixes width", "output contract says 10")
    assert "64" in error.message and "10" in error.message


def test_merging_two_known_classes_that_disagree_names_every_fact():
    facts = Facts()
    a, b = facts.new("a"), facts.new("b")
    facts.set_value(a, 3, "a is 3")
    facts.set_value(b, 4, "b is 4")
    error = fails("E_CONSTRAINT", facts.equate, a, b, "a == b")
    assert set(error.chain) == {"a is 3", "b is 4", "a == b"}


def test_an_inferred_value_keeps_its_derivation_in_the_chain():
    facts = Facts()
    a, b, c = facts.new("a"), facts.new("b"), facts.new("c")
    facts.set_value(a, 3, "a is 3")
    facts.equate(a, b, "a == b")
    assert "a is 3" in facts.reason(b) and "a == b" in facts.reason(b)
    facts.equate(b, c, "b == c")
    error = fails("E_CONSTRAINT", facts.set_value, c, 5, "c is 5")
    assert "a is 3" in error.chain[0] and error.chain[-1] == "c is 5"


def test_a_custom_code_is_reported():
    facts = Facts()
    a = facts.new("a")
    facts.set_value(a, 2, "a is 2")
    fails("E_RESHAPE", facts.set_value, a, 3, "a is 3", code="E_RESHAPE")


# -- the batch ---------------------------------------------------------------------------------------
def test_batch_renders_as_its_symbol_and_multiples():
    facts = Facts(batch_symbol="N")
    one, two, unknown, fixed = facts.new("one"), facts.new("two"), facts.new("u"), facts.new("f")
    facts.equate(one, facts.batch, "one batch")
    facts.equate(two, facts.batch, "two batches", ratio=2)
    facts.set_value(fixed, 9, "nine")
    assert facts.render(one) == "N"
    assert facts.render(two) == "2*N"
    assert facts.render(unknown) is None
    assert facts.render(fixed) == 9
    assert facts.value(one) is None
    assert facts.batch_multiple(two) == 2


def test_batch_never_receives_a_value():
    facts = Facts()
    a = facts.new("a")
    facts.equate(a, facts.batch, "a is the batch")
    fails("E_CONSTRAINT", facts.set_value, a, 4, "a is 4")
    fixed = facts.new("fixed")
    facts.set_value(fixed, 4, "fixed is 4")
    fails("E_CONSTRAINT", facts.equate, fixed, facts.batch, "fixed is the batch")


# -- bounds ----------------------------------------------------------------------------------------
def test_a_value_above_max_dimension_is_a_resource_failure():
    facts = Facts(max_dimension=100)
    a = facts.new("a")
    facts.set_value(a, 100, "a is 100")
    b, c = facts.new("b"), facts.new("c")
    facts.equate(b, c, "b = 4*c", ratio=4)
    fails("E_RESOURCE", facts.set_value, c, 26, "c is 26")


@pytest.mark.parametrize("value", [0, -1])
def test_extents_are_positive(value):
    facts = Facts()
    fails("E_CONSTRAINT", facts.set_value, facts.new("a"), value, "bad")


# -- tensors --------------------------------------------------------------------------------------
def test_a_tensor_gets_axis_variables_once_its_rank_is_known():
    facts = Facts()
    tensor = TensorFacts(facts, "t")
    assert tensor.shape() is None and not tensor.complete()
    tensor.set_rank(3, "rank 3")
    assert tensor.shape() == [None, None, None]
    facts.equate(tensor.dims[0], facts.batch, "batch")
    facts.set_value(tensor.dims[1], 4, "four")
    facts.set_value(tensor.dims[2], 5, "five")
    assert tensor.shape() == ["B", 4, 5] and tensor.complete()


def test_a_second_rank_contradicts_and_unsupported_ranks_fail():
    facts = Facts()
    tensor = TensorFacts(facts, "t")
    tensor.set_rank(2, "rank 2 from the contract")
    error = fails("E_CONSTRAINT", tensor.set_rank, 3, "rank 3 from a pattern")
    assert error.chain == ("rank 2 from the contract", "rank 3 from a pattern")
    fails("E_CONSTRAINT", TensorFacts(facts, "u").set_rank, 5, "rank 5")


# -- the lone-variable join is the general merge, only faster -----------------------------------
class _Counter:
    """A tensor's Watch stand-in that counts how often its variable's rendering changed."""

    def __init__(self):
        self.calls = 0

    def changed(self):
        self.calls += 1


def _random_history(seed: int):
    """Every observable of a Facts after a seeded random run of new/equate/set_value/bound."""
    rng = random.Random(seed)
    facts = Facts(max_dimension=4096, max_multiple=8)
    watches = {}
    outcomes = []

    def variable():
        if rng.random() < 0.5 or len(watches) < 2:
            watch = _Counter()
            var = facts.new(f"v{len(watches)}", port=rng.random() < 0.7, observer=watch)
            watches[var] = watch
            return var
        return rng.choice([facts.batch, *watches])

    for step in range(60):
        kind = rng.random()
        try:
            if kind < 0.6:
                ratio = rng.choice([1, 1, 1, 2, 3, 4, Fraction(1, 2), Fraction(2, 3), Fraction(3, 2)])
                facts.equate(variable(), variable(), f"eq{step}", ratio=ratio)
            elif kind < 0.85:
                facts.set_value(variable(), rng.choice([1, 2, 3, 6, 12, 5000]), f"set{step}")
            else:
                lo = rng.randint(1, 20)
                facts.bound(variable(), lo, lo + rng.randint(0, 30), f"bound{step}")
            outcomes.append(("ok", facts.version))
        except HNDLError as error:
            outcomes.append((type(error).__name__, str(error)))
    everything = [facts.batch, *watches]
    seen = tuple(
        (facts.find(v), facts.value(v), facts.render(v), facts.interval(v), facts.batch_multiple(v),
         facts.explain(v), facts.connection(v, everything[0]), watches[v].calls if v in watches else None)
        for v in everything
    )
    return outcomes, seen


@pytest.mark.parametrize("seed", range(40))
def test_the_lone_variable_join_gives_what_the_general_merge_gives(seed, monkeypatch):
    fast = _random_history(seed)
    monkeypatch.setattr(Facts, "_join_lone", lambda self, a, b, reason, ratio: False)
    assert fast == _random_history(seed)
