"""The savability check every resolution passes (§10): size bound, UTF-8 text, digit floods.

``require_savable`` bounds a plan's saved size without encoding it, so the tests here hold it
to the exact saved size at the limit itself: with MAX_PLAN_BYTES set to a plan's saved size
the plan passes, one byte lower it is refused, whatever text, numbers and repeats it holds.
"""

from __future__ import annotations

import pytest

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl import plan_encoding
from hndl.plan import PlanNode
from hndl.plan_encoding import require_savable

REGISTRY = hndl.Registry.from_packs("basic", "vision")
SURROGATE_MESSAGE = "the plan holds the lone surrogate '\\ud800', which is not UTF-8 text and could never be saved"


@pytest.fixture(scope="module")
def chain() -> ResolvedPlan:
    return hndl.resolve("linear(16)\nrelu()\nlinear(16)\nlinear()", input_shape=("B", 16), output_shape=("B", 10),
                        registry=REGISTRY)


@pytest.fixture(scope="module")
def convs() -> ResolvedPlan:
    def graph(x):
        for _ in range(3):
            REGISTRY.ops.conv(8, kernel_size=3, padding=1)

    return hndl.resolve_callable(graph, input_shape=("B", 3, 8, 8), output_shape=("B", 8, 8, 8), registry=REGISTRY)


def edited(plan: ResolvedPlan, index: int, **changes) -> ResolvedPlan:
    """``plan`` with the fields of node ``index`` replaced (each node field may hold any plan data)."""
    nodes = list(plan.nodes)
    fields = {name: getattr(nodes[index], name) for name in PlanNode.__slots__}
    nodes[index] = PlanNode(**{**fields, **changes})
    return ResolvedPlan(frontend=plan.frontend, batch=plan.batch, dtype=plan.dtype, inputs=plan.inputs,
                        outputs=plan.outputs, nodes=nodes)


def with_args(plan: ResolvedPlan, index: int, **args) -> ResolvedPlan:
    return edited(plan, index, args={**plan.nodes[index].args, **args})


def refusal(plan: ResolvedPlan) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        require_savable(plan)
    return caught.value


def saved_bytes(plan: ResolvedPlan) -> int:
    return len(plan.to_json().encode("utf-8"))


def long_text(plan: ResolvedPlan, text: str) -> ResolvedPlan:
    """``text`` as an argument of one node and as the provenance of another."""
    return edited(with_args(plan, 1, note=text), 2, provenance={"note": text})


# plans whose texts need escapes or several bytes a character, and numbers of every width and kind
VARIANTS = {
    "plain": lambda plan: plan,
    "quotes and backslashes": lambda plan: with_args(plan, 1, note='say "hi" \\ bye \\u0041'),
    "control characters": lambda plan: with_args(plan, 0, note="tab\there\nnew\x01\x1f\x7f"),
    "non-ASCII text": lambda plan: edited(plan, 2, id="n2é", provenance={"note": "日本語 😀 \u200b"}),
    "equal numbers of other types": lambda plan: with_args(plan, 1, a=1, b=True, c=1.0, d=(1, True, 1.0), e=(True, 1)),
    "wide numbers": lambda plan: with_args(plan, 0, a=10**17, b=float(10**17), c=(10**17,), d=(float(10**17),),
                                           e=-1.2345678901234567e+18, f=int(1e300), g=1e300, h=10**4000),
    "nested and mapping values": lambda plan: with_args(plan, 2, a=("x", ("y", 2.5)), b={"k": (1, "v")}, c=()),
    "odd outputs and derivations": lambda plan: edited(
        plan, 1, outputs=("out", "aux\"x"),
        source={**plan.nodes[1].source, "policy": "p\\q", "derivations": {"x": ("a", "b\n"), "y": "whole"}}),
    # text dominates these, so the bound is near the exact size and any miscount shows
    "long escaped text": lambda plan: long_text(plan, '"\\\n\x01' * 4000),
    "long quoted text": lambda plan: long_text(plan, 'say "a\\b" ' * 2000),
    "long multibyte text": lambda plan: long_text(plan, "é日😀" * 4000),
    # equal values of other types (an int, then floats equal to it; a float, then ints equal to it)
    # are bounded one by one where one bound would not cover the rest
    "floats equal to a long int": lambda plan: with_args(
        plan, 1, first=2**60, **{f"f{index}": float(2**60) for index in range(3000)}),
    "ints equal to a float": lambda plan: with_args(plan, 1, first=1e300, **{f"i{index}": int(1e300) for index in range(20)}),
    "many argument names": lambda plan: with_args(plan, 1, **{f"k{index}": "" for index in range(3000)}),
    "many ports": lambda plan: edited(plan, 1, inputs={f"x{index}": "" for index in range(2000)},
                                      outputs=tuple(f"o{index}" for index in range(2000))),
    "many derivation steps": lambda plan: edited(
        plan, 1, source={**plan.nodes[1].source, "derivations": {f"d{index}": () for index in range(3000)}}),
    "non-default records": lambda plan: edited(plan, 0, initialization={"kind": "normal@1", "overrides": {"std": 0.02}},
                                              trainability={"default": False, "overrides": {"weight": True}}),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("base", ["chain", "convs"])
def test_the_size_bound_refuses_exactly_the_plans_above_the_limit(variant, base, request, monkeypatch):
    plan = VARIANTS[variant](request.getfixturevalue(base))
    size = saved_bytes(plan)
    monkeypatch.setattr(plan_encoding, "MAX_PLAN_BYTES", size)
    require_savable(plan)  # exactly at the limit: savable, so never refused
    monkeypatch.setattr(plan_encoding, "MAX_PLAN_BYTES", size - 1)
    error = refusal(plan)
    assert error.code == "E_RESOURCE"
    assert f"would be saved as {size} bytes of JSON" in error.message and "MAX_PLAN_BYTES" in error.message


def test_a_plan_well_under_the_limit_passes(chain, convs):
    for plan in (chain, convs, *(variant(convs) for variant in VARIANTS.values())):
        require_savable(plan)


LONE = "\ud800"
PLACES = {
    "id": lambda plan: edited(plan, 1, id="n" + LONE),
    "operator": lambda plan: edited(plan, 1, op="relu@1" + LONE),
    "argument value": lambda plan: with_args(plan, 1, note="x" + LONE),
    "argument name": lambda plan: with_args(plan, 1, **{LONE: 1}),
    "nested argument": lambda plan: with_args(plan, 1, note=("a", ("b", LONE))),
    "mapping argument": lambda plan: with_args(plan, 1, note={"k": LONE}),
    "input binding": lambda plan: edited(plan, 1, inputs={"x": "node:n0/" + LONE}),
    "output name": lambda plan: edited(plan, 1, outputs=(LONE,)),
    "shape entry": lambda plan: edited(plan, 1, input_shapes={"x": (LONE, 16)}),
    "derivation": lambda plan: edited(plan, 1, source={**plan.nodes[1].source, "derivations": {"x": ("ok", LONE)}}),
    "source policy": lambda plan: edited(plan, 1, source={**plan.nodes[1].source, "policy": LONE}),
    "provenance": lambda plan: edited(plan, 1, provenance={"note": LONE}),
    "construction record": lambda plan: edited(plan, 1, initialization={"kind": LONE, "overrides": {}}),
}


@pytest.mark.parametrize("place", PLACES)
def test_a_lone_surrogate_anywhere_in_a_node_is_refused_naming_the_node(place, chain):
    plan = PLACES[place](chain)
    error = refusal(plan)
    assert error.code == "E_SCHEMA"
    assert error.message == SURROGATE_MESSAGE
    assert error.location.node == plan.nodes[1].id
    assert error.remedies == ("Pass names and text arguments as valid Unicode text.",)


def test_a_lone_surrogate_in_the_header_is_refused_without_a_node(chain):
    plan = ResolvedPlan(frontend={**chain.frontend, "source": "x" + LONE}, batch=chain.batch, dtype=chain.dtype,
                        inputs=chain.inputs, outputs=chain.outputs, nodes=chain.nodes)
    error = refusal(plan)
    assert error.code == "E_SCHEMA" and error.message == SURROGATE_MESSAGE and error.location.node is None


def test_the_first_node_holding_bad_text_is_the_one_named(chain):
    plan = with_args(with_args(chain, 3, note=LONE), 2, note="\udfff")
    error = refusal(plan)
    assert error.location.node == "n2" and "'\\udfff'" in error.message


@pytest.mark.parametrize("where", ["argument", "nested argument", "source line"])
def test_an_integer_too_long_to_write_is_a_resource_error_naming_the_node(where, chain):
    flood = 10**5000
    plan = {
        "argument": lambda: with_args(chain, 2, count=flood),
        "nested argument": lambda: with_args(chain, 2, counts=(1, (2, flood))),
        "source line": lambda: edited(chain, 2, source={**chain.nodes[2].source, "line": flood}),
    }[where]()
    error = refusal(plan)
    assert error.code == "E_RESOURCE"
    assert error.message.startswith("the plan holds an integer too long to save (Exceeds the limit (4300 digits)")
    assert error.location.node == "n2" and error.remedies == ("Use integers of at most a few dozen digits.",)
