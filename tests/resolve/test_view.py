"""NodeView (§8): what a relation reads becomes the premises of what it asserts next, asserting a
known extent adds nothing, a different one or an empty interval is a contradiction naming both
facts, and naming an undeclared port or an axis before its rank is a declaration bug (E_REGISTRY)."""

import pytest
from torch import nn

from hndl import HNDLError, Registry, resolve


def registry_with(relation, shape="x[B, D] -> out[B, E]") -> Registry:
    registry = Registry.builtins()

    @registry.operator("probe", summary="Runs the relation under test.", shape=shape, relation=relation)
    class Probe(nn.Module):
        pass

    return registry


def fails(relation, source="probe()", input_shape=("B", 4), output_shape=("B", 3), **kwargs) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry_with(relation, **kwargs))
    return caught.value


def grow(s):
    """out[1] = x[1] + 1, then out[2] = 2 * out[1]: the second reads what the first just added."""
    x = s.shape("x")
    if x[1] is not None:
        s.axis("out", 1, x[1] + 1)
        s.axis("out", 2, 2 * s.shape("out")[1])


def test_an_asserted_extent_is_explained_by_the_extents_the_relation_read():
    plan = resolve("probe()\nlinear(4)", input_shape=("B", 4), output_shape=("B", 5, 4),
                   registry=registry_with(grow, shape="x[B, D] -> out[B, E, F]"))
    assert plan.nodes[0].output_shapes["out"] == ("B", 5, 10)
    assert plan.nodes[1].source["derivations"]["in_features"] == (
        "input contract 'x' axis 1 is 4",  # the premise of out[1], read before asserting it
        "node n0 (probe) relation: out[1] = 5",  # the premise of out[2], added by the relation itself
        "node n0 (probe) relation: out[2] = 10",
        "node n1 (linear) x: axis 2 is D_in in x[B, ..., D_in]",
    )


def test_asserting_a_known_extent_again_adds_nothing_and_a_different_one_names_both_facts():
    def twice(s):
        s.axis("out", 1, 3)
        s.axis("out", 1, 3)

    plan = resolve("probe()", input_shape=("B", 4), output_shape=("B", 3), registry=registry_with(twice))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3)

    def clash(s):
        s.axis("out", 1, 3)
        s.axis("out", 1, 4)

    error = fails(clash)
    assert error.code == "E_CONSTRAINT"
    assert error.message == "n0.out[1] must be 4 but is already 3"
    assert error.chain == (
        "output contract 'output' axis 1 is 3; node n0 (probe) out: axis 1 is E in out[B, E]",
        "node n0 (probe) relation: out[1] = 4",
    )


def test_an_interval_holding_the_known_extent_adds_nothing_and_one_collapsing_fixes_the_axis():
    def within(s):
        s.interval("x", 1, 2, 6)
        s.interval("out", 1, 3, 3)

    plan = resolve("linear()\nprobe()", input_shape=("B", 4), output_shape=("B", 3),
                   registry=registry_with(lambda s: (within(s), s.interval("x", 1, 6, 6))))
    assert plan.nodes[0].args["out_features"] == 6  # fixed backward by the collapsed interval

    def outside(s):
        s.interval("x", 1, 5, 6)

    error = fails(outside)
    assert error.code == "E_CONSTRAINT"
    assert error.message == "n0.D would be 4, outside the admissible interval [5, 6]"
    assert error.chain[-1] == "node n0 (probe) relation: x[1] lies in [5, 6]"


@pytest.mark.parametrize("relation, message", [
    (lambda s: s.axis("y", 1, 3), "relation of probe names port 'y', which it does not declare (ports: x, out)"),
    (lambda s: s.axis("out", 2, 3), "relation of probe used axis 2 of 'out' before its rank was known"),
    (lambda s: s.interval("x", -3, 1, 2), "relation of probe used axis -3 of 'x' before its rank was known"),
])
def test_naming_an_undeclared_port_or_a_missing_axis_is_a_declaration_bug(relation, message):
    error = fails(relation)
    assert (error.code, error.message) == ("E_REGISTRY", message)


def test_error_carries_the_remedies_and_the_derivations_of_the_named_axes():
    """s.error(code, message, remedies=..., because=...) (issue 30): a relation names the fix, and the
    chain says where the numbers in its message came from (each fact once, not its premises)."""
    def refuse(s):
        if s.shape("x")[1] is not None and s.shape("out")[1] is not None:
            s.error("E_CONSTRAINT", "probe: 4 is not 3", remedies=("Give probe width=3.",),
                    because=(("x", 1), ("out", 1), ("x", 1)))

    error = fails(refuse, source="linear(4)\nprobe()", input_shape=("B", 2))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1" and error.location.line == 2
    assert error.remedies == ("Give probe width=3.",)
    assert error.chain == ("node n0 (linear) out_features=4 (explicit)",
                           "node n0 (linear) out: axis 1 is D_out in out[B, ..., D_out]",
                           "output contract 'output' axis 1 is 3")


def test_error_without_remedies_keeps_the_codes_default():
    def refuse(s):
        s.error("E_CONSTRAINT", "probe refuses")

    error = fails(refuse)
    assert error.remedies == ("Change a literal or a contract so the declared relations agree.",)
    assert error.chain == ()


def test_fixed_by_names_the_node_that_gave_an_extent_and_none_for_a_contract():
    seen = {}

    def record(s):
        seen[s.shape("x")[1]] = s.fixed_by("x", 1)
        seen["out"] = s.fixed_by("out", 1)

    resolve("linear(4)\nrelu()\nprobe()", input_shape=("B", 2), output_shape=("B", 3), registry=registry_with(record))
    assert seen == {4: "node n0 (linear)", "out": None}  # carried unchanged through relu; out from the contract
