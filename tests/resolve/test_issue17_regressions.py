"""Issue 17, items 9 and 10: ranks narrowed by their consumers, and contradictions blamed on
the node whose rule fails, in port terms."""

import pytest

import hndl
from hndl import HNDLError
from hndl.limits import DEFAULT_LIMITS
from hndl.resolve import resolver


def fails(source, code, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    assert error.value.code == code, str(error.value)
    assert error.value.remedies and all(remedy.strip() for remedy in error.value.remedies)
    return error.value


# -- 9: a rank from prefix bounds and connected contracts -------------------------------------------
def test_a_consumer_of_ranks_2_and_3_narrows_a_reshape_prefix_to_rank_3():
    # reshape(4, 1) admits ranks 3 and 4, linear ranks 2 and 3: only rank 3 fits both.
    plan = hndl.resolve("reshape(4, 1)\nlinear(3)\nflatten()", input_shape=("B", 4), output_shape=("B", 12))
    assert plan.node("n0").output_shapes["out"] == ("B", 4, 1)
    assert plan.node("n1").output_shapes["out"] == ("B", 4, 3)
    assert plan.node("n1").args["in_features"] == 1
    assert plan.node("n2").output_shapes["out"] == ("B", 12)


def test_a_bare_reshape_takes_its_rank_and_factors_from_linear_and_the_output_contract():
    plan = hndl.resolve("reshape()\nlinear(3)\nflatten()", input_shape=("B", 4), output_shape=("B", 12))
    assert plan.node("n0").output_shapes["out"] == ("B", 4, 1)


def test_a_genuinely_ambiguous_rank_names_the_ranks_that_fit_and_how_to_fix_the_rank():
    error = fails("reshape(2, 2)\nrelu()\nflatten()", "E_AMBIGUOUS", ("B", 4), ("B", 4))
    assert error.location.node == "n0" and error.location.field == "out" and error.location.line == 1
    assert error.message == ("reshape port 'out' is not determined: of unknown rank: "
                             "ranks 3 and 4 both fit its connected rules")
    assert error.remedies == (
        "Fix the rank of n0.out: give every non-batch axis where it is made (one entry per axis of a shape "
        "argument), or connect it to an operator or a contract of one rank.",
    )
    assert not any("width" in remedy for remedy in error.remedies)  # a width cannot fix a rank


def test_a_rank_no_supported_value_fits_is_a_contradiction_with_each_ranks_reason():
    error = fails("reshape(4, 1)\nlinear(3)\nflatten()", "E_CONSTRAINT", ("B", 4), ("B", 11))
    assert error.message == "n0.out fits none of the supported ranks 2, 3 and 4: each contradicts a connected rule"
    assert error.location.node == "n0" and error.location.field == "out"
    assert [fact.split(":")[0] for fact in error.chain] == ["at rank 2", "at rank 3", "at rank 4"]
    assert "reshape prefix of 2 dimensions" in error.chain[0]
    assert "11 elements" in error.chain[1]
    assert "linear acts on the last axis" in error.chain[2]


def test_the_rank_search_runs_a_bounded_number_of_trial_solves(monkeypatch):
    calls = []
    solve = resolver._solve
    monkeypatch.setattr(resolver, "_solve", lambda *args: calls.append(args[-1]) or solve(*args))
    source = "\n".join(["reshape(2, 2)\nrelu()"] * 20 + ["flatten()"])
    fails(source, "E_AMBIGUOUS", ("B", 4), ("B", 4))
    assert len(calls) <= 1 + DEFAULT_LIMITS["max_rank_trials"]


def test_specifications_whose_ranks_the_sweep_settles_run_no_trial(monkeypatch):
    calls = []
    solve = resolver._solve
    monkeypatch.setattr(resolver, "_solve", lambda *args: calls.append(args[-1]) or solve(*args))
    hndl.resolve("reshape(4, 2, 2)\nrelu()\nflatten()", input_shape=("B", 16), output_shape=("B", 16))
    assert calls == [{}]


# -- 10: a contradiction through an activation ------------------------------------------------------
def test_a_contradiction_through_an_activation_blames_the_node_whose_relation_fails():
    error = fails("conv(8, kernel_size=3)\nrelu()", "E_CONSTRAINT", ("B", 3, 8, 8), ("B", 8, 8, 8))
    assert (error.location.node, error.location.line, error.location.column) == ("n0", 1, 1)
    assert error.message == (
        "n0.out[2] is 6 (node n0 (conv) relation: out[2] = 6) but must equal n1.out[2], which is 8 "
        "(output contract 'output' axis 2 is 8), through the equations of node n1 (relu)"
    )
    assert "...." not in str(error)  # the ellipsis run is no port
    assert error.chain[-3:] == (
        "output contract 'output' axis 2 is 8",
        "node n1 (relu) x: axis 2 is part of '...'",
        "node n1 (relu) out: axis 2 is part of '...'",
    )
    assert "input contract 'x' axis 2 is 8" in error.chain  # what the 6 was computed from
    assert "node n0 (conv) relation: out[2] = 6" in error.chain


def test_a_literal_width_carried_through_an_activation_is_blamed_on_its_node():
    error = fails("linear(64)\nrelu()", "E_CONSTRAINT", ("B", 128), ("B", 10))
    assert (error.location.node, error.location.line) == ("n0", 1)
    assert error.message.startswith("n0.out[1] is 64 (node n0 (linear) out_features=64 (explicit)) but must "
                                    "equal n1.out[1], which is 10")


def test_a_second_value_names_a_tensor_axis_not_a_shape_symbol():
    error = fails("linear(64)", "E_CONSTRAINT", ("B", 128), ("B", 10))
    assert error.message == "n0.out[1] must be 64 but is already 10"
    assert error.location.node == "n0"


def test_two_branches_that_disagree_are_located_where_they_meet():
    source = "a = linear(4, x=x)\nb = linear(5, x=x)\nadd(a, b)"
    error = fails(source, "E_CONSTRAINT", ("B", 3), ("B", 4))
    assert error.location.node == "n2"  # both widths are node facts: the join is where they clash
    assert error.message == (
        "n1.out[1] is 5 (node n1 (linear) out_features=5 (explicit)) but must equal n0.out[1], which is 4 "
        "(node n0 (linear) out_features=4 (explicit)), through the equations of node n2 (add)"
    )
