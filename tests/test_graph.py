"""The author graph (§4): structural validation and stable topological order."""

from __future__ import annotations

import pytest
from torch import nn

from hndl import HNDLError, Registry
from hndl.contracts import parse_contracts
from hndl.graph import Graph, Node, Ref, execution_order
from hndl.limits import DEFAULT_LIMITS
from hndl.resolve.resolver import resolve_graph


@pytest.fixture(scope="module")
def registry():
    registry = Registry.builtins()

    @registry.operator("join", summary="Add two tensors.", shape="a[B, D], b[B, D] -> out[B, D]")
    class Join(nn.Module):
        def forward(self, a, b):
            return a + b

    @registry.operator("pair", summary="Two copies.", shape="x[B, D] -> first[B, D], rest[B, D]")
    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    return registry


def node(registry, node_id, alias, inputs, **args):
    spec = registry.get(alias)
    return Node(node_id, spec, dict(args), {port: Ref.parse(ref) for port, ref in inputs.items()},
                spec.output_ports({}))


def graph(nodes, outputs, inputs=("B", 8), output_shape=None):
    contracts = parse_contracts(inputs, output_shape or {name: ("B", 8) for name in outputs})
    return Graph(contracts, list(nodes), {name: Ref.parse(ref) for name, ref in outputs.items()}, "test")


def order(g, **limits):
    merged = {**DEFAULT_LIMITS, **limits}
    return [n.id for n in execution_order(g, max_nodes=merged["max_nodes"], max_edges=merged["max_edges"])]


def fails(code, g, **limits):
    with pytest.raises(HNDLError) as caught:
        order(g, **limits)
    assert caught.value.code == code, str(caught.value)
    return caught.value


# -- references --------------------------------------------------------------------------------
def test_refs_parse_and_print_as_input_or_node_port():
    assert Ref.parse("input:z") == Ref(None, "z")
    assert Ref.parse("node:hidden/out") == Ref("hidden", "out")
    assert str(Ref("hidden", "out")) == "node:hidden/out"
    assert str(Ref(None, "z")) == "input:z"


@pytest.mark.parametrize("text", ["x", "input:", "node:a", "node:/out", "node:a/", "node:a/b/c", 3])
def test_malformed_refs_are_binding_errors(text):
    with pytest.raises(HNDLError) as caught:
        Ref.parse(text)
    assert caught.value.code == "E_BINDING"


# -- valid graphs ------------------------------------------------------------------------------
def test_a_chain_is_ordered_as_declared(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"}), node(registry, "b", "relu", {"x": "node:a/out"})],
              {"output": "node:b/out"})
    assert order(g) == ["a", "b"]


def test_topological_order_breaks_ties_by_declaration_order(registry):
    # c reads b, which is declared after it; a and b are independent branches.
    nodes = [
        node(registry, "c", "join", {"a": "node:a/out", "b": "node:b/out"}),
        node(registry, "b", "relu", {"x": "input:x"}),
        node(registry, "a", "relu", {"x": "input:x"}),
    ]
    assert order(graph(nodes, {"output": "node:c/out"})) == ["b", "a", "c"]
    swapped = [nodes[0], nodes[2], nodes[1]]
    assert order(graph(swapped, {"output": "node:c/out"})) == ["a", "b", "c"]


def test_an_output_may_select_an_external_input_directly(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"})],
              {"features": "node:a/out", "skip": "input:x"})
    assert order(g) == ["a"]


def test_two_outputs_may_share_one_reference(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"})], {"first": "node:a/out", "second": "node:a/out"})
    assert order(g) == ["a"]
    plan = resolve_graph(g, limits=DEFAULT_LIMITS)
    assert [port["ref"] for port in plan.outputs] == ["node:a/out", "node:a/out"]


def test_unused_output_ports_of_a_reachable_node_are_allowed(registry):
    g = graph([node(registry, "p", "pair", {"x": "input:x"})], {"output": "node:p/first"})
    assert order(g) == ["p"]


def test_an_identity_graph_has_no_nodes(registry):
    assert order(graph([], {"output": "input:x"})) == []


# -- structural failures -----------------------------------------------------------------------
def test_duplicate_node_ids_are_name_errors(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"}), node(registry, "a", "relu", {"x": "input:x"})],
              {"output": "node:a/out"})
    assert "a" in fails("E_NAME", g).message


@pytest.mark.parametrize("bad", ["Hidden", "1a", "_a", "a-b"])
def test_node_ids_must_match_the_identifier_pattern(registry, bad):
    fails("E_NAME", graph([node(registry, bad, "relu", {"x": "input:x"})], {"output": "input:x"}))


def test_a_reference_to_an_unknown_node_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "node:ghost/out"})], {"output": "node:a/out"})
    fails("E_BINDING", g)


def test_a_reference_to_an_undeclared_input_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:z"})], {"output": "node:a/out"})
    fails("E_BINDING", g)


def test_a_reference_to_an_undeclared_output_port_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"}), node(registry, "b", "relu", {"x": "node:a/nope"})],
              {"output": "node:b/out"})
    fails("E_BINDING", g)


def test_an_output_selecting_an_undeclared_port_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"})], {"output": "node:a/nope"})
    fails("E_BINDING", g)
    with pytest.raises(HNDLError) as caught:
        resolve_graph(g, limits=DEFAULT_LIMITS)
    assert caught.value.code == "E_BINDING"


def test_binding_an_undeclared_input_port_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x", "y": "input:x"})], {"output": "node:a/out"})
    assert "'y'" in fails("E_BINDING", g).message


def test_a_missing_port_binding_is_a_binding_error(registry):
    g = graph([node(registry, "j", "join", {"a": "input:x"})], {"output": "node:j/out"})
    assert "'b'" in fails("E_BINDING", g).message


def test_a_cycle_is_a_binding_error(registry):
    nodes = [node(registry, "a", "relu", {"x": "node:b/out"}), node(registry, "b", "relu", {"x": "node:a/out"})]
    g = graph(nodes, {"output": "node:b/out", "skip": "input:x"})
    assert "cycle" in fails("E_BINDING", g).message


def test_a_node_reading_itself_is_a_cycle(registry):
    g = graph([node(registry, "a", "join", {"a": "input:x", "b": "node:a/out"})], {"output": "node:a/out"})
    assert "cycle" in fails("E_BINDING", g).message


def test_a_node_reaching_no_selected_output_is_a_binding_error(registry):
    nodes = [node(registry, "a", "relu", {"x": "input:x"}), node(registry, "dead", "relu", {"x": "node:a/out"})]
    error = fails("E_BINDING", graph(nodes, {"output": "node:a/out"}))
    assert error.location.node == "dead"


def test_a_declared_input_nothing_reads_is_a_binding_error(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:z"})], {"output": "node:a/out"},
              inputs={"z": ("B", 8), "y": ("B", 8)})
    error = fails("E_BINDING", g)
    assert "'y'" in error.message


def test_an_input_read_only_by_an_output_counts_as_read(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:z"})], {"features": "node:a/out", "label": "input:y"},
              inputs={"z": ("B", 8), "y": ("B", 8)})
    assert order(g) == ["a"]


def test_an_output_the_contract_does_not_declare_or_leaves_unselected_fails(registry):
    g = graph([node(registry, "a", "relu", {"x": "input:x"})], {"output": "node:a/out"})
    g.outputs = {}
    fails("E_OUTPUT", g)
    g.outputs = {"output": Ref("a", "out"), "extra": Ref("a", "out")}
    fails("E_OUTPUT", g)


# -- limits --------------------------------------------------------------------------------------
def test_max_nodes_bounds_the_graph(registry):
    nodes = [node(registry, "a", "relu", {"x": "input:x"}), node(registry, "b", "relu", {"x": "node:a/out"})]
    g = graph(nodes, {"output": "node:b/out"})
    assert order(g, max_nodes=2) == ["a", "b"]
    fails("E_RESOURCE", g, max_nodes=1)


def test_max_edges_bounds_the_graph(registry):
    nodes = [
        node(registry, "a", "relu", {"x": "input:x"}),
        node(registry, "j", "join", {"a": "input:x", "b": "node:a/out"}),
    ]
    g = graph(nodes, {"output": "node:j/out"})
    assert order(g, max_edges=3) == ["a", "j"]
    fails("E_RESOURCE", g, max_edges=2)
