"""The resolver (§5, §8): bidirectional DSL patterns, relations, policies, provenance, invariants."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from hndl import Arg, HNDLError, Policy, Registry, resolve
from hndl.contracts import parse_contracts
from hndl.graph import Graph, Node, Ref
from hndl.limits import DEFAULT_LIMITS
from hndl.resolve.resolver import resolve_graph


def fails(code, source, input_shape=("B", 4), output_shape=("B", 4), **kwargs):
    with pytest.raises(HNDLError) as caught:
        resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    assert caught.value.code == code, str(caught.value)
    return caught.value


def plan_of(source, input_shape=("B", 4), output_shape=("B", 4), **kwargs):
    return resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)


def shapes(plan):
    return {node.id: (dict(node.input_shapes), dict(node.output_shapes)) for node in plan.nodes}


# -- custom operators used below -----------------------------------------------------------------
def fold_relation(s):
    """out is x folded into [B, parts, D / parts]; solves either side from the other."""
    s.rank("out", 3)
    parts = s.args["parts"]
    width, folded = s.shape("x")[1], s.shape("out")[2]
    if width is not None:
        if width % parts:
            s.error("E_RESHAPE", f"{width} features do not fold into {parts} equal parts")
        s.axis("out", 1, parts)
        s.axis("out", 2, width // parts)
    elif folded is not None:
        s.axis("x", 1, parts * folded)


def count_relation(s):
    """Fill the inferable ``seen`` argument with the input width."""
    width = s.shape("x")[1]
    if width is not None:
        s.arg("seen", width)


def typo_relation(s):
    s.shape("y")


def policy_relation(s):
    if s.policy == "test.wide@1":
        s.axis("out", 1, 2 * s.shape("x")[1]) if s.shape("x")[1] else None


SLOW = tuple(f"a{i}" for i in range(12))


def slow_relation(s):
    """Fills one more argument per call: it settles, but only after many sweeps."""
    for name in SLOW:
        if name not in s.args:
            s.arg(name, 1)
            return


@pytest.fixture(scope="module")
def registry():
    registry = Registry.builtins()

    @registry.operator("join", summary="Add two tensors.", shape="a[B, D], b[B, D] -> out[B, D]")
    class Join(nn.Module):
        pass

    @registry.operator("condition", summary="Adaptive-norm-like.",
                       shape="x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]")
    class Condition(nn.Module):
        pass

    @registry.operator("square", summary="Square features.", shape="x[B, D, D] -> out[B, D]")
    class Square(nn.Module):
        pass

    @registry.operator("head3", summary="Three-wide last axis.", shape="x[B, ..., D] -> out[B, ..., 3]")
    class Head3(nn.Module):
        pass

    @registry.operator("expect3", summary="Needs three features.", shape="x[B, 3] -> out[B, 3]")
    class Expect3(nn.Module):
        pass

    @registry.operator("silu", identity="example.silu", summary="SiLU.", shape="x[B, ...] -> out[B, ...]")
    class SiLU(nn.SiLU):
        pass

    @registry.operator("embed", summary="Token embedding.", shape="x:int64[B, T] -> out[B, T, 8]")
    class Embed(nn.Module):
        pass

    @registry.operator("fold", summary="Fold features.", shape="x[B, D] -> out", relation=fold_relation,
                       args={"parts": Arg(int, min=1, help="How many parts.")})
    class Fold(nn.Module):
        def __init__(self, *, parts):
            super().__init__()

    @registry.operator("count", summary="Counts width.", shape="x[B, D] -> out[B, D]", relation=count_relation,
                       args={"seen": Arg(int, min=1, inferable=True, help="The input width.")})
    class Count(nn.Module):
        def __init__(self, *, seen):
            super().__init__()

    @registry.operator("typo", summary="Bad relation.", shape="x[B, D] -> out[B, D]", relation=typo_relation)
    class Typo(nn.Module):
        pass

    @registry.operator("orphan", summary="Nothing solves gamma.", shape="x[B, D] -> out[B, D]",
                       args={"gamma": Arg(int, min=1, inferable=True, help="Never determined.")})
    class Orphan(nn.Module):
        def __init__(self, *, gamma):
            super().__init__()

    @registry.operator("slow", summary="Slow relation.", shape="x[B, D] -> out[B, D]", relation=slow_relation,
                       args={name: Arg(int, inferable=True, help="One step.") for name in SLOW})
    class Slow(nn.Module):
        def __init__(self, **args):
            super().__init__()

    @registry.operator(
        "mix",
        identity="test.mix",
        summary="Mixes features.",
        shape="x[B, D] -> out[B, E]",
        relation=policy_relation,
        args={
            "width": Arg(int, min=1, max=4096, inferable=True, dim="E", help="Output width."),
            "k": Arg(int, 1, min=1, max=8, help="Taps."),
            "mode": Arg(str, "a", choices=("a", "b"), help="Mode."),
            "factor": Arg(int, min=1, help="A required factor."),
        },
        policies={
            "fast": Policy("test.fast@1", {"mode": "b", "factor": 2}),
            "wide": Policy("test.wide@1", {"k": 4, "factor": 3}),
        },
    )
    class Mix(nn.Module):
        def __init__(self, *, width, k, mode, factor):
            super().__init__()

    return registry


# -- the §7 MLP ---------------------------------------------------------------------------------
def test_the_mlp_infers_widths_forward_and_backward():
    plan = resolve("linear(64)\nrelu()\nlinear()", input_shape=("B", 128), output_shape=("B", 10))
    assert shapes(plan) == {
        "n0": ({"x": ("B", 128)}, {"out": ("B", 64)}),
        "n1": ({"x": ("B", 64)}, {"out": ("B", 64)}),
        "n2": ({"x": ("B", 64)}, {"out": ("B", 10)}),
    }
    n0, n2 = plan.node("n0"), plan.node("n2")
    assert dict(n0.args) == {"out_features": 64, "bias": True, "in_features": 128}
    assert n0.provenance["in_features"] == "inferred"
    assert n2.args["out_features"] == 10 and n2.provenance["out_features"] == "inferred"


def test_the_internal_json_graph_of_section_4_resolves():
    registry = Registry.builtins()
    linear, relu = registry.get("linear"), registry.get("relu")
    contracts = parse_contracts(("B", 128), ("B", 10))
    graph = Graph(
        contracts,
        [
            Node("hidden", linear, {"out_features": 64, "bias": True}, {"x": Ref.parse("input:x")}, ("out",)),
            Node("act", relu, {}, {"x": Ref.parse("node:hidden/out")}, ("out",)),
            Node("head", linear, {"bias": True}, {"x": Ref.parse("node:act/out")}, ("out",)),
        ],
        {"output": Ref.parse("node:head/out")},
        "test",
    )
    plan = resolve_graph(graph, limits=DEFAULT_LIMITS)
    assert [node.id for node in plan.nodes] == ["hidden", "act", "head"]
    assert plan.node("head").args["out_features"] == 10
    assert plan.node("head").args["in_features"] == 64
    assert plan.node("head").provenance["bias"] == "explicit"


# -- DSL patterns in both directions ----------------------------------------------------------------
def test_a_scale_pattern_infers_an_upstream_width_backward(registry):
    plan = resolve(
        "style = linear(z)\ncondition(x, style)",
        input_shape={"x": ("B", 8, 4, 4), "z": ("B", 16)},
        output_shape=("B", 8, 4, 4),
        registry=registry,
    )
    style = plan.node("n0")
    assert style.args["out_features"] == 16 and style.provenance["out_features"] == "inferred"
    assert plan.node("n1").input_shapes["params"] == ("B", 16)


def test_a_scale_pattern_rejects_a_width_that_is_not_twice_an_integer(registry):
    error = fails(
        "E_CONSTRAINT", "condition(x, linear(z, 17))",
        input_shape={"x": ("B", 8, 4, 4), "z": ("B", 16)}, output_shape=("B", 8, 4, 4), registry=registry,
    )
    assert error.chain


def test_a_scale_pattern_solves_channels_from_the_params_width(registry):
    plan = resolve(
        "params = linear(z, 64)\nout = condition(x, params)",
        input_shape={"x": ("B", 32, 2, 2), "z": ("B", 5)},
        output_shape=("B", 32, 2, 2),
        registry=registry,
    )
    assert plan.node("n1").output_shapes["out"] == ("B", 32, 2, 2)
    fails("E_CONSTRAINT", "params = linear(z, 62)\nout = condition(x, params)",
          input_shape={"x": ("B", 32, 2, 2), "z": ("B", 5)}, output_shape=("B", 32, 2, 2), registry=registry)


def test_a_symbol_shared_across_ports_asserts_equality_both_ways(registry):
    plan = resolve("join(linear(x), y)", input_shape={"x": ("B", 4), "y": ("B", 12)},
                   output_shape=("B", 12), registry=registry)
    assert plan.node("n0").args["out_features"] == 12
    fails("E_CONSTRAINT", "join(linear(x, 11), y)", input_shape={"x": ("B", 4), "y": ("B", 12)},
          output_shape=("B", 12), registry=registry)


def test_a_symbol_repeated_on_two_axes_of_one_port(registry):
    plan = resolve("square()", input_shape=("B", 5, 5), output_shape=("B", 5), registry=registry)
    assert plan.node("n0").output_shapes["out"] == ("B", 5)
    fails("E_CONSTRAINT", "square()", input_shape=("B", 5, 6), output_shape=("B", 5), registry=registry)


def test_a_literal_in_a_pattern_constrains_in_both_directions(registry):
    plan = resolve("linear()\nexpect3()", input_shape=("B", 4), output_shape=("B", 3), registry=registry)
    assert plan.node("n0").args["out_features"] == 3
    fails("E_CONSTRAINT", "expect3()", input_shape=("B", 4), output_shape=("B", 3), registry=registry)
    error = fails("E_CONSTRAINT", "head3()", input_shape=("B", 4), output_shape=("B", 5), registry=registry)
    assert any("out[B, ..., 3]" in fact for fact in error.chain)


@pytest.mark.parametrize("shape", [("B", 6), ("B", 5, 6), ("B", 2, 5, 6)])
def test_the_ellipsis_preserves_rank_and_middle_axes(registry, shape):
    plan = resolve("silu()\nhead3()", input_shape=shape, output_shape=shape[:-1] + (3,), registry=registry)
    assert plan.node("n0").output_shapes["out"] == shape
    assert plan.node("n1").output_shapes["out"] == shape[:-1] + (3,)


def test_the_ellipsis_carries_rank_and_extents_backward(registry):
    plan = resolve("linear()\nsilu()", input_shape=("B", 5, 4), output_shape=("B", 5, 7), registry=registry)
    assert plan.node("n0").output_shapes["out"] == ("B", 5, 7)
    assert plan.node("n0").args["out_features"] == 7


def test_the_ellipsis_rejects_mismatched_middle_axes_and_ranks(registry):
    fails("E_CONSTRAINT", "silu()", input_shape=("B", 5, 4), output_shape=("B", 6, 4), registry=registry)
    fails("E_CONSTRAINT", "silu()", input_shape=("B", 5, 4), output_shape=("B", 20), registry=registry)


def test_linear_on_a_rank_4_input_is_a_constraint_failure():
    error = fails("E_CONSTRAINT", "linear(8)", input_shape=("B", 3, 4, 4), output_shape=("B", 3, 4, 8))
    assert error.location.node == "n0"


# -- ambiguity and contradiction --------------------------------------------------------------------
def test_two_omitted_widths_leave_one_free_and_fail_as_ambiguous():
    error = fails("E_AMBIGUOUS", "linear()\nlinear()", input_shape=("B", 128), output_shape=("B", 10))
    assert error.location.node == "n0"


def test_a_literal_width_contradicting_the_output_contract_keeps_the_literal():
    error = fails("E_CONSTRAINT", "linear(64)", input_shape=("B", 128), output_shape=("B", 10))
    text = " ".join(error.chain)
    assert "out_features=64" in text and "output contract" in text
    assert error.location.node == "n0" and error.location.line == 1


# -- dtypes --------------------------------------------------------------------------------------
def test_an_integer_input_reaching_a_floating_port_fails():
    error = fails("E_DTYPE", "linear(8)", input_shape=("B", 4), output_shape=("B", 8), input_dtype="int64")
    assert error.location.node == "n0" and error.location.field == "x"


def test_a_port_declared_int64_accepts_integer_ids(registry):
    plan = resolve("embed()\nlinear()", input_shape=("B", 5), output_shape=("B", 5, 3),
                   input_dtype="int64", registry=registry)
    assert plan.node("n1").input_shapes["x"] == ("B", 5, 8)
    assert plan.inputs[0]["dtype"] == "int64"
    fails("E_DTYPE", "embed()", input_shape=("B", 5), output_shape=("B", 5, 8), registry=registry)


# -- arguments and policies ---------------------------------------------------------------------------
def test_a_policy_requirement_fills_an_omitted_argument(registry):
    plan = plan_of("mix(8, policy='fast')", output_shape=("B", 8), registry=registry)
    node = plan.node("n0")
    assert node.args["mode"] == "b" and node.provenance["mode"] == "policy"
    assert node.args["factor"] == 2 and node.provenance["factor"] == "policy"
    assert node.source["policy"] == "test.fast@1"


def test_every_argument_records_its_origin(registry):
    plan = plan_of("mix(k=2, policy='fast')", output_shape=("B", 8), registry=registry)
    assert dict(plan.node("n0").provenance) == {
        "width": "inferred", "k": "explicit", "mode": "policy", "factor": "policy",
    }
    plan = plan_of("mix(8, factor=5)", output_shape=("B", 8), registry=registry)
    assert dict(plan.node("n0").provenance) == {
        "width": "explicit", "k": "default", "mode": "default", "factor": "explicit",
    }
    assert plan.node("n0").source["policy"] is None


def test_an_explicit_value_agreeing_with_a_policy_stays_explicit(registry):
    plan = plan_of("mix(8, mode='b', policy='fast')", output_shape=("B", 8), registry=registry)
    assert plan.node("n0").provenance["mode"] == "explicit"


def test_an_explicit_value_contradicting_a_policy_is_a_policy_conflict(registry):
    error = fails("E_POLICY_CONFLICT", "mix(8, mode='a', policy='fast')", output_shape=("B", 8), registry=registry)
    assert error.location.field == "mode"


def test_an_undeclared_policy_name_is_a_policy_conflict(registry):
    error = fails("E_POLICY_CONFLICT", "mix(8, factor=1, policy='up2')", output_shape=("B", 8), registry=registry)
    assert error.location.field == "policy"
    fails("E_POLICY_CONFLICT", "linear(8, policy='fast')", output_shape=("B", 8), registry=registry)


def test_a_relation_reads_the_selected_policy(registry):
    plan = plan_of("mix(policy='wide')", input_shape=("B", 4), output_shape=("B", 8), registry=registry)
    assert plan.node("n0").args["width"] == 8
    fails("E_CONSTRAINT", "mix(policy='wide')", input_shape=("B", 4), output_shape=("B", 9), registry=registry)


def _mix_registry(requires):
    registry = Registry.builtins()

    @registry.operator(
        "mix", identity="test.mix", summary="Mixes features.", shape="x[B, D] -> out[B, E]",
        args={
            "width": Arg(int, min=1, inferable=True, dim="E", help="Output width."),
            "k": Arg(int, 1, min=1, max=8, help="Taps."),
            "mode": Arg(str, "a", choices=("a", "b"), help="Mode."),
        },
        policies={"fast": Policy("test.fast@1", requires)},
    )
    class Mix(nn.Module):
        def __init__(self, *, width, k, mode):
            super().__init__()

    return registry


def test_policy_requirement_order_does_not_change_the_plan():
    plans = [
        resolve("mix(policy='fast')", input_shape=("B", 4), output_shape=("B", 8), registry=_mix_registry(requires))
        for requires in ({"k": 3, "mode": "b"}, {"mode": "b", "k": 3})
    ]
    assert plans[0] == plans[1]
    for field in ("args", "provenance"):
        assert [list(getattr(plan.node("n0"), field).items()) for plan in plans][0] == \
            list(getattr(plans[1].node("n0"), field).items())


def test_a_missing_required_argument_fails(registry):
    error = fails("E_ARGUMENT", "mix(8)", output_shape=("B", 8), registry=registry)
    assert error.location.field == "factor"


@pytest.mark.parametrize("call", ["linear(0)", "linear(-4)", "linear('wide')", "linear(True)", "linear(8.0)",
                                  "linear(8, bias=1)", "linear(8, in_features=0)"])
def test_wrong_types_and_out_of_bounds_values_fail_as_arguments(call):
    error = fails("E_ARGUMENT", call, output_shape=("B", 8))
    assert error.location.node == "n0" and error.location.line == 1


def test_an_argument_the_operator_does_not_declare_fails():
    fails("E_ARGUMENT", "linear(8, width=8)", output_shape=("B", 8))
    registry = Registry.builtins()
    contracts = parse_contracts(("B", 4), ("B", 8))
    graph = Graph(contracts, [Node("n0", registry.get("linear"), {"width": 8}, {"x": Ref(None, "x")}, ("out",))],
                  {"output": Ref("n0", "out")}, "test")
    with pytest.raises(HNDLError) as caught:
        resolve_graph(graph, limits=DEFAULT_LIMITS)
    assert caught.value.code == "E_ARGUMENT"


# -- relations through the node view -------------------------------------------------------------------
def test_a_relation_refines_shapes_forward(registry):
    plan = resolve("fold(3)", input_shape=("B", 12), output_shape=("B", 3, 4), registry=registry)
    assert plan.node("n0").output_shapes["out"] == ("B", 3, 4)


def test_a_relation_refines_shapes_backward(registry):
    plan = resolve("linear()\nfold(3)", input_shape=("B", 5), output_shape=("B", 3, 4), registry=registry)
    assert plan.node("n0").args["out_features"] == 12


def test_a_relation_fails_with_its_stable_code_and_the_node_location(registry):
    error = fails("E_RESHAPE", "fold(5, name='folding')", input_shape=("B", 12), output_shape=("B", 5, 2),
                  registry=registry)
    assert error.location.node == "folding" and error.location.line == 1
    assert "12 features" in error.message


def test_a_relation_assertion_contradicting_a_contract_fails(registry):
    error = fails("E_CONSTRAINT", "fold(3)", input_shape=("B", 12), output_shape=("B", 3, 5), registry=registry)
    assert any("relation" in fact for fact in error.chain)
    fails("E_CONSTRAINT", "fold(3)", input_shape=("B", 12), output_shape=("B", 3), registry=registry)


def test_a_relation_fills_an_inferable_argument(registry):
    plan = resolve("count()", input_shape=("B", 6), output_shape=("B", 6), registry=registry)
    node = plan.node("n0")
    assert node.args["seen"] == 6 and node.provenance["seen"] == "inferred"


def test_a_relation_contradicting_an_explicit_argument_fails(registry):
    error = fails("E_CONSTRAINT", "count(seen=5)", input_shape=("B", 6), output_shape=("B", 6), registry=registry)
    assert error.location.node == "n0"


def test_a_relation_value_is_validated_and_confirmed_on_every_sweep():
    def relation(s):
        s.arg("window", 3)  # normalized to (3, 3), then confirmed on later sweeps

    registry = Registry.builtins()

    @registry.operator("window", summary="Windowed.", shape="x[B, D] -> out[B, D]", relation=relation,
                       args={"window": Arg("pair", min=1, inferable=True, help="Window size.")})
    class Window(nn.Module):
        def __init__(self, *, window):
            super().__init__()

    plan = resolve("linear()\nwindow()", input_shape=("B", 4), output_shape=("B", 6), registry=registry)
    assert plan.node("n1").args["window"] == (3, 3)
    fails("E_CONSTRAINT", "window(window=2)", registry=registry)


def test_a_relation_writing_an_invalid_or_undeclared_argument_fails():
    def invalid(s):
        s.arg("size", 0)

    def undeclared(s):
        s.args["width"] = 3

    registry = Registry.builtins()
    for alias, relation in (("invalid", invalid), ("undeclared", undeclared)):

        @registry.operator(alias, summary="Broken relation.", shape="x[B, D] -> out[B, D]", relation=relation,
                           args={"size": Arg(int, min=1, inferable=True, help="Size.")})
        class Broken(nn.Module):
            def __init__(self, *, size):
                super().__init__()

    fails("E_ARGUMENT", "invalid()", registry=registry)
    fails("E_REGISTRY", "undeclared()", registry=registry)


def test_a_relation_naming_an_undeclared_port_is_a_registry_error(registry):
    error = fails("E_REGISTRY", "typo()", registry=registry)
    assert "'y'" in error.message


def test_the_node_view_equal_and_rank_members():
    seen = {}

    def relation(s):
        s.equal("x", "out")
        seen["rank"] = s.rank("x", 3)
        seen["batch"] = s.batch("out")
        seen["dtype"] = s.dtype("x")
        seen["ports"] = (s.inputs, s.outputs)

    registry = Registry.builtins()

    @registry.operator("same", summary="Same shape.", shape="x -> out", relation=relation)
    class Same(nn.Module):
        pass

    plan = resolve("linear()\nsame()", input_shape=("B", 2, 4), output_shape=("B", 2, 7), registry=registry)
    assert plan.node("n0").args["out_features"] == 7
    assert seen == {"rank": ["B", 2, 7], "batch": "B", "dtype": "float32", "ports": (("x",), ("out",))}
    fails("E_CONSTRAINT", "same()", input_shape=("B", 2, 4), output_shape=("B", 2, 5), registry=registry)
    fails("E_CONSTRAINT", "same()", input_shape=("B", 8), output_shape=("B", 8), registry=registry)


def test_an_inferable_argument_nothing_determines_is_unresolved(registry):
    error = fails("E_UNRESOLVED", "orphan()", registry=registry)
    assert error.location.field == "gamma"


def test_a_relation_that_needs_more_sweeps_than_max_iterations_fails(registry):
    plan = plan_of("slow()", registry=registry)
    assert set(plan.node("n0").provenance.values()) == {"inferred"}
    error = fails("E_RESOURCE", "slow()", registry=registry, limits={"max_iterations": 3})
    assert "max_iterations" in error.message


def test_max_elements_bounds_every_port_and_the_identity():
    fails("E_RESOURCE", "linear(64)", input_shape=("B", 8, 16), output_shape=("B", 8, 64),
          limits={"max_elements": 511})
    resolve("linear(64)", input_shape=("B", 8, 16), output_shape=("B", 8, 64), limits={"max_elements": 512})
    fails("E_RESOURCE", "", input_shape=("B", 4, 4), output_shape=("B", 4, 4), limits={"max_elements": 15})


def test_max_dimension_bounds_inferred_values():
    fails("E_RESOURCE", "linear(100)", output_shape=("B", 100), limits={"max_dimension": 99})


# -- determinism and invariants ---------------------------------------------------------------------------
def test_repeated_resolution_gives_equal_plans(registry):
    source = "style = linear(z)\ncondition(x, style)"
    kwargs = dict(input_shape={"x": ("B", 8, 4, 4), "z": ("B", 16)}, output_shape=("B", 8, 4, 4),
                  registry=registry)
    assert resolve(source, **kwargs) == resolve(source, **kwargs)


def test_resolving_one_graph_twice_leaves_it_untouched():
    registry = Registry.builtins()
    contracts = parse_contracts(("B", 4), ("B", 8))
    graph = Graph(contracts, [Node("n0", registry.get("linear"), {}, {"x": Ref(None, "x")}, ("out",))],
                  {"output": Ref("n0", "out")}, "test")
    first = resolve_graph(graph, limits=DEFAULT_LIMITS)
    assert graph.nodes[0].args == {}
    assert resolve_graph(graph, limits=DEFAULT_LIMITS) == first


class _NoTorchOps(TorchDispatchMode):
    """Fails on any tensor operation, factory functions included."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"resolution ran the torch operation {func}")


@pytest.fixture
def no_allocation(monkeypatch):
    """Fail on tensor ops, factory calls and module construction; return an RNG check."""

    def refuse(what):
        def refused(*args, **kwargs):
            raise AssertionError(f"resolution called {what}")
        return refused

    for name in ("empty", "zeros", "ones", "full", "rand", "randn", "randint", "tensor", "as_tensor",
                 "arange", "manual_seed"):
        monkeypatch.setattr(torch, name, refuse(f"torch.{name}"))
    monkeypatch.setattr(nn.Module, "__init__", refuse("nn.Module.__init__"))
    return _NoTorchOps


def test_resolution_allocates_nothing_and_draws_no_randomness(registry, no_allocation):
    torch_rng, python_rng = torch.get_rng_state(), random.getstate()
    with no_allocation():
        with pytest.raises(AssertionError):
            torch.nn.functional.relu(torch_rng)  # the guard is live
        resolve("linear(64)\nrelu()\nlinear()", input_shape=("B", 128), output_shape=("B", 10))
        resolve("style = linear(z)\ncondition(x, style)", input_shape={"x": ("B", 8, 4, 4), "z": ("B", 16)},
                output_shape=("B", 8, 4, 4), registry=registry)
        resolve("linear()\nfold(3)", input_shape=("B", 5), output_shape=("B", 3, 4), registry=registry)
        with pytest.raises(HNDLError):
            resolve("linear()\nlinear()", input_shape=("B", 128), output_shape=("B", 10))
    with pytest.raises(AssertionError):
        nn.ReLU()  # module construction was refused throughout
    assert torch.equal(torch.get_rng_state(), torch_rng)
    assert random.getstate() == python_rng
