"""Trusted callable capture (§7): symbols, scoped capture context, ops namespaces."""

from __future__ import annotations

import inspect
import threading

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry, ops, resolve, resolve_callable


def capture(fn, input_shape=("B", 4), output_shape=("B", 4), **kwargs):
    return resolve_callable(fn, input_shape=input_shape, output_shape=output_shape, **kwargs)


def fails(code, fn, *args, **kwargs):
    with pytest.raises(HNDLError) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == code, str(caught.value)
    return caught.value


@pytest.fixture(scope="module")
def registry():
    registry = Registry.builtins()

    @registry.operator("silu", identity="example.silu", summary="SiLU.", shape="x[B, ...] -> out[B, ...]")
    class SiLU(nn.SiLU):
        pass

    return registry


# -- invocation ------------------------------------------------------------------------------
def test_the_callable_runs_exactly_once_with_one_symbol_per_input():
    calls = []

    def fn(x):
        calls.append(x)
        ops.linear(8)

    plan = capture(fn, output_shape=("B", 8))
    assert len(calls) == 1
    assert repr(calls[0]) == "<symbolic tensor input:x>"
    assert plan.frontend["kind"] == "python_callable@1"
    assert plan.frontend["qualname"].endswith("fn")


def test_named_inputs_arrive_as_keyword_arguments_even_if_unused_in_the_body():
    received = {}

    def fn(*, image, label):
        received.update(image=image, label=label)
        return {"features": ops.linear(label, 8), "skip": image}

    plan = capture(fn, {"image": ("B", 3), "label": ("B", 2)}, {"features": ("B", 8), "skip": ("B", 3)})
    assert set(received) == {"image", "label"}
    assert [port["ref"] for port in plan.outputs] == ["node:n0/out", "input:image"]


def test_a_mapping_naming_only_x_keeps_the_positional_parameter():
    plan = capture(lambda x: ops.linear(x, 8), {"x": ("B", 4)}, {"output": ("B", 8)})
    assert plan.node("n0").inputs["x"] == "input:x"


def test_a_string_is_never_executed_as_a_callable():
    fails("E_CAPTURE", capture, "linear(8)")


def test_helpers_and_loops_build_a_static_graph():
    def block(h, width):
        return ops.relu(ops.linear(h, width))

    def fn(x):
        h = x
        for width in (8, 8, 4):
            h = block(h, width)
        return h

    plan = capture(fn)
    assert [node.alias for node in plan.nodes] == ["linear", "relu"] * 3


# -- symbols hold no value ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "use",
    [
        lambda s: bool(s),
        lambda s: 1 if s else 0,
        lambda s: int(s),
        lambda s: float(s),
        lambda s: range(s),
        lambda s: len(s),
        lambda s: list(s),
        lambda s: s + 1,
        lambda s: 2 * s,
        lambda s: s[0],
        lambda s: torch.relu(s),
        lambda s: torch.add(s, 1),
    ],
    ids=["bool", "if", "int", "float", "index", "len", "iter", "add", "mul", "getitem", "torch.relu", "torch.add"],
)
def test_a_symbol_cannot_be_coerced_or_executed_eagerly(use):
    def fn(x):
        use(ops.linear(8))

    fails("E_CAPTURE", capture, fn)


def test_an_eager_tensor_cannot_stand_in_for_a_symbol():
    eager = torch.zeros(2, 4)
    fails("E_ARGUMENT", capture, lambda x: ops.linear(8, x=eager))
    fails("E_ARGUMENT", capture, lambda x: ops.linear(eager, 8))


# -- scoped capture context ---------------------------------------------------------------------------
def test_ops_called_outside_a_capture_fail():
    fails("E_CAPTURE", ops.linear, 8)


def test_a_symbol_from_another_capture_fails():
    stash = {}

    def first(x):
        stash["h"] = ops.linear(4)

    capture(first)

    def as_input(x):
        return ops.linear(stash["h"], 4)

    def as_return(x):
        ops.relu()
        return stash["h"]

    def as_named_output(x):
        return {"output": ops.relu(), "extra": stash["h"]}

    fails("E_CAPTURE", capture, as_input)
    fails("E_CAPTURE", capture, as_return)
    fails("E_CAPTURE", capture, as_named_output, {"x": ("B", 4)}, {"output": ("B", 4), "extra": ("B", 4)})


def test_nested_captures_restore_the_outer_context():
    inner_plans = []

    def inner(x):
        ops.linear(3)

    def outer(x):
        ops.linear(5)
        inner_plans.append(capture(inner, ("B", 5), ("B", 3)))
        ops.relu()

    plan = capture(outer, ("B", 4), ("B", 5))
    assert [(node.id, node.alias) for node in plan.nodes] == [("n0", "linear"), ("n1", "relu")]
    assert plan.node("n1").inputs["x"] == "node:n0/out"
    assert [(node.id, node.alias) for node in inner_plans[0].nodes] == [("n0", "linear")]


def test_a_failing_inner_capture_restores_the_outer_context():
    def inner(x):
        ops.linear(0)

    def outer(x):
        ops.linear(5)
        with pytest.raises(HNDLError):
            capture(inner)
        ops.relu()

    assert [node.alias for node in capture(outer, ("B", 4), ("B", 5)).nodes] == ["linear", "relu"]


def test_the_context_is_cleaned_up_after_an_exception():
    class Boom(Exception):
        pass

    def fn(x):
        ops.linear(4)
        raise Boom

    with pytest.raises(Boom):
        capture(fn)
    fails("E_CAPTURE", ops.relu)


def test_concurrent_captures_are_isolated():
    barrier = threading.Barrier(2, timeout=10)
    plans, errors = {}, []

    def make(width):
        def fn(x):
            ops.linear(width)
            barrier.wait()
            ops.relu()
            barrier.wait()
            ops.linear(width)

        return fn

    def run(width):
        try:
            plans[width] = capture(make(width), ("B", 4), ("B", width))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(width,)) for width in (6, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for width, plan in plans.items():
        assert [node.id for node in plan.nodes] == ["n0", "n1", "n2"]
        assert plan.node("n0").args["out_features"] == width


# -- registries and ops namespaces --------------------------------------------------------------------
def test_registry_ops_capture_custom_operators(registry):
    plan = capture(lambda x: registry.ops.silu(ops.linear(8)), ("B", 4), ("B", 8), registry=registry)
    assert [node.op for node in plan.nodes] == ["linear@1", "example.silu@1"]


def test_an_operator_missing_from_the_resolution_registry_fails(registry):
    fails("E_OPERATOR", capture, lambda x: registry.ops.silu())


def test_an_unknown_alias_fails():
    with pytest.raises(HNDLError) as caught:
        Registry.builtins().ops.no_such_operator
    assert caught.value.code == "E_OPERATOR"


def test_hndl_ops_exposes_the_builtin_aliases():
    assert {"linear", "relu", "tanh"} <= set(dir(hndl.ops))
    assert hndl.ops.linear.__doc__


def test_an_error_names_the_node_and_the_call_site_line():
    def fn(x):
        ops.relu()
        ops.linear(0)

    line = inspect.getsourcelines(fn)[1] + 2
    error = fails("E_ARGUMENT", capture, fn)
    assert error.location.node == "n1"
    assert error.location.line == line


def test_explicit_none_for_init_or_trainable_fails_in_both_frontends():
    from hndl import ops

    contract = {"input_shape": ("B", 4), "output_shape": ("B", 4)}
    for keyword, code in (("init", "E_INITIALIZATION"), ("trainable", "E_TRAINABILITY")):
        with pytest.raises(HNDLError) as error:
            resolve(f"linear({keyword}=None)", **contract)
        assert error.value.code == code

        def fn(x, keyword=keyword):
            ops.linear(**{keyword: None})

        with pytest.raises(HNDLError) as error:
            resolve_callable(fn, **contract)
        assert error.value.code == code


def test_scheme_functions_return_exactly_the_records_the_parser_builds():
    import hndl

    source = 'linear(init={"weight": kaiming_normal(a=0.1, mode="fan_out"), "bias": normal(std=0.5)})'
    from_config = resolve(source, input_shape=("B", 4), output_shape=("B", 4)).nodes[0].initialization

    def fn(x):
        hndl.ops.linear(init={"weight": hndl.kaiming_normal(a=0.1, mode="fan_out"), "bias": hndl.normal(std=0.5)})

    from_callable = resolve_callable(fn, input_shape=("B", 4), output_shape=("B", 4)).nodes[0].initialization
    assert from_config == from_callable
    assert from_config["overrides"]["weight"]["nonlinearity"] == "leaky_relu"
