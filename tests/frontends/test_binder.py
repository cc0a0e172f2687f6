"""Current-tensor semantics (§7), driven through both frontends: configuration and callable.

Every rule is checked in configuration text and in a trusted callable, because both frontends
drive the one binder and must build the same graph.
"""

from __future__ import annotations

import pytest
from torch import nn

from hndl import HNDLError, Registry, ops, resolve, resolve_callable


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


def config(source, input_shape=("B", 4), output_shape=("B", 4), **kwargs):
    return resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)


def capture(fn, input_shape=("B", 4), output_shape=("B", 4), **kwargs):
    return resolve_callable(fn, input_shape=input_shape, output_shape=output_shape, **kwargs)


def fails(code, resolver, *args, **kwargs):
    with pytest.raises(HNDLError) as caught:
        resolver(*args, **kwargs)
    assert caught.value.code == code, str(caught.value)
    return caught.value


def wiring(plan):
    """Node ids, operators and input references: what current decided."""
    return [(node.id, node.alias, dict(node.inputs)) for node in plan.nodes]


def graph_of(plan):
    """Everything about a plan that must not depend on the frontend."""
    return (
        [
            (node.id, node.op, dict(node.args), dict(node.inputs), node.outputs, dict(node.input_shapes),
             dict(node.output_shapes), dict(node.provenance), node.source["policy"])
            for node in plan.nodes
        ],
        [dict(port) for port in plan.inputs],
        [dict(port) for port in plan.outputs],
    )


# -- call-only sequences ------------------------------------------------------------------------
def test_a_call_only_sequence_chains_through_current():
    def classifier(x):
        ops.linear(64)
        ops.relu()
        ops.linear()

    expected = [
        ("n0", "linear", {"x": "input:x"}),
        ("n1", "relu", {"x": "node:n0/out"}),
        ("n2", "linear", {"x": "node:n1/out"}),
    ]
    by_config = config("linear(64)\nrelu()\nlinear()", ("B", 128), ("B", 10))
    by_callable = capture(classifier, ("B", 128), ("B", 10))
    assert wiring(by_config) == wiring(by_callable) == expected
    assert by_config.output_ref == by_callable.output_ref == "node:n2/out"


# -- positional and keyword tensor binding ----------------------------------------------------------
def test_a_leading_tensor_and_the_port_keyword_are_equivalent():
    shapes = ({"x": ("B", 4), "z1": ("B", 3)}, {"a": ("B", 64), "skip": ("B", 4)})
    positional = config("a = linear(z1, 64)\nskip = x", *shapes)
    keyword = config("a = linear(64, x=z1)\nskip = x", *shapes)
    implicit = config("a = linear(64)\nskip = x", {"z1": ("B", 3), "x": ("B", 4)}, shapes[1])
    assert graph_of(positional)[0] == graph_of(keyword)[0] == graph_of(implicit)[0]
    assert positional.node("n0").inputs["x"] == "input:z1"
    assert positional.node("n0").args["out_features"] == 64

    def by_position(*, x, z1):
        return {"a": ops.linear(z1, 64), "skip": x}

    def by_keyword(*, x, z1):
        return {"a": ops.linear(64, x=z1), "skip": x}

    assert graph_of(capture(by_position, *shapes)) == graph_of(capture(by_keyword, *shapes)) == graph_of(positional)


def test_a_tensor_bound_both_positionally_and_by_keyword_fails():
    error = fails("E_ARGUMENT", config, "h = relu()\nlinear(h, x=x)")
    assert error.location.field == "x"
    fails("E_ARGUMENT", capture, lambda x: ops.linear(ops.relu(), x=x))


def test_an_author_value_supplied_twice_fails():
    fails("E_ARGUMENT", config, "linear(4, out_features=4)")
    fails("E_ARGUMENT", capture, lambda x: ops.linear(4, out_features=4))


def test_a_tensor_after_an_author_value_fails():
    fails("E_ARGUMENT", capture, lambda x: ops.linear(4, x))


def test_a_tensor_given_as_an_author_argument_fails():
    fails("E_ARGUMENT", capture, lambda x: ops.linear(out_features=x))


# -- assignments never move current --------------------------------------------------------------
def test_assignments_only_store_references():
    source = "saved = x\nh = linear(8)\nx = saved\nrelu()"

    def fn(x):
        saved = x
        h = ops.linear(8)  # noqa: F841
        x = saved  # noqa: F841
        ops.relu()

    for plan in (config(source, output_shape=("B", 8)), capture(fn, output_shape=("B", 8))):
        assert wiring(plan) == [("n0", "linear", {"x": "input:x"}), ("n1", "relu", {"x": "node:n0/out"})]


def test_out_selects_the_output_without_moving_current(registry):
    plan = config("a = linear(4)\nout = x\nb = relu()\nout = join(a, b)", registry=registry)
    assert plan.node("n1").inputs["x"] == "node:n0/out"
    assert plan.output_ref == "node:n2/out"


def test_out_selects_an_earlier_tensor(registry):
    plan = config("first, rest = pair()\nout = first", registry=registry)
    assert plan.output_ref == "node:n0/first"
    plan = config("h = linear(4)\nout = h")
    assert plan.output_ref == "node:n0/out"


def test_out_bound_to_a_tuple_fails(registry):
    fails("E_OUTPUT", config, "out = pair()", registry=registry)


def test_the_final_binding_of_out_must_be_one_tensor(registry):
    plan = config("out = pair()\na, b = out\nout = join(a, b)", registry=registry)
    assert plan.output_ref == "node:n1/out"


# -- nested calls --------------------------------------------------------------------------------
def test_nested_calls_evaluate_first_and_chain_through_current(registry):
    def fn(x):
        return registry.ops.join(ops.linear(64), ops.linear(64))

    expected = [
        ("n0", "linear", {"x": "input:x"}),
        ("n1", "linear", {"x": "node:n0/out"}),
        ("n2", "join", {"a": "node:n0/out", "b": "node:n1/out"}),
    ]
    by_config = config("join(linear(64), linear(64))", output_shape=("B", 64), registry=registry)
    by_callable = capture(fn, output_shape=("B", 64), registry=registry)
    assert wiring(by_config) == wiring(by_callable) == expected


def test_explicit_input_calls_and_joins_update_current(registry):
    source = "h = linear(4)\nlinear(x, 4)\nr = relu()\njoin(h, r)\nrelu()"

    def fn(x):
        h = ops.linear(4)
        ops.linear(x, 4)
        r = ops.relu()
        registry.ops.join(h, r)
        ops.relu()

    for plan in (config(source, registry=registry), capture(fn, registry=registry)):
        assert plan.node("n2").inputs["x"] == "node:n1/out"
        assert plan.node("n4").inputs["x"] == "node:n3/out"
        assert plan.output_ref == "node:n4/out"


def test_a_multi_input_operator_never_uses_current(registry):
    error = fails("E_BINDING", config, "join(x)", registry=registry)
    assert "b" in error.message
    fails("E_BINDING", config, "join()", registry=registry)
    fails("E_BINDING", capture, lambda x: registry.ops.join(x), registry=registry)
    fails("E_BINDING", capture, lambda x: registry.ops.join(b=x), registry=registry)


# -- multi-output calls ------------------------------------------------------------------------------
def test_a_multi_output_call_returns_a_tuple_and_clears_current(registry):
    seen = {}

    def fn(x):
        parts = registry.ops.pair()
        seen["parts"] = parts
        with pytest.raises(HNDLError) as caught:
            ops.relu()
        seen["code"] = caught.value.code
        first, rest = parts
        return registry.ops.join(first, rest)

    plan = capture(fn, registry=registry)
    assert isinstance(seen["parts"], tuple) and len(seen["parts"]) == 2
    assert seen["code"] == "E_CURRENT"
    assert wiring(plan)[1] == ("n1", "join", {"a": "node:n0/first", "b": "node:n0/rest"})


def test_after_a_multi_output_call_an_implicit_input_fails(registry):
    fails("E_CURRENT", config, "a, b = pair()\nrelu()", registry=registry)
    fails("E_CURRENT", config, "pair()\nrelu()", registry=registry)

    def fn(x):
        registry.ops.pair()
        ops.relu()

    fails("E_CURRENT", capture, fn, registry=registry)


def test_unpacking_does_not_restore_current(registry):
    fails("E_CURRENT", config, "parts = pair()\na, b = parts\nrelu()", registry=registry)


def test_an_explicit_input_recovers_current_after_a_split(registry):
    plan = config("a, b = pair()\nlinear(a, 4)\nr = relu()\nout = join(r, b)", registry=registry)
    assert plan.node("n2").inputs["x"] == "node:n1/out"


def test_unpacking_the_wrong_number_of_names_fails(registry):
    fails("E_OUTPUT_ARITY", config, "a, b, c = pair()", registry=registry)
    fails("E_OUTPUT_ARITY", config, "a, b = relu()", registry=registry)


def test_default_output_after_a_multi_output_call_fails(registry):
    fails("E_CURRENT", config, "a, b = pair()", registry=registry)

    def fn(x):
        registry.ops.pair()

    fails("E_CURRENT", capture, fn, registry=registry)


# -- node ids --------------------------------------------------------------------------------------------
def test_node_ids_count_every_call_including_named_ones():
    source = "# a comment\nh = linear(8, name='hidden')\nsaved = h\nrelu()\nlinear()"

    def fn(x):
        h = ops.linear(8, name="hidden")
        saved = h  # noqa: F841
        ops.relu()
        ops.linear()

    for plan in (config(source), capture(fn)):
        assert [node.id for node in plan.nodes] == ["hidden", "n1", "n2"]


def test_a_duplicate_name_fails():
    fails("E_NAME", config, "linear(8, name='a')\nlinear(name='a')")
    fails("E_NAME", config, "linear(8, name='n1')\nlinear()")  # collides with the generated id

    def fn(x):
        ops.linear(8, name="a")
        ops.linear(name="a")

    fails("E_NAME", capture, fn)


@pytest.mark.parametrize("name", ["Hidden", "1st", "", 3])
def test_a_malformed_name_fails(name):
    fails("E_NAME", capture, lambda x: ops.linear(4, name=name))


# -- named inputs and outputs --------------------------------------------------------------------------
NAMED_IN = {"z": ("B", 4), "y": ("B", 6)}
NAMED_OUT = {"logits": ("B", 1), "features": ("B", 8)}


def test_named_inputs_are_prebound_and_the_first_is_current(registry):
    source = "features = linear(8)\nlogits = linear(y, 1)"

    def fn(*, z, y):
        features = ops.linear(8)
        return {"logits": ops.linear(y, 1), "features": features}

    for plan in (config(source, NAMED_IN, NAMED_OUT), capture(fn, NAMED_IN, NAMED_OUT)):
        assert plan.node("n0").inputs["x"] == "input:z"
        assert plan.node("n1").inputs["x"] == "input:y"
        assert [(port["name"], port["ref"]) for port in plan.outputs] == [
            ("logits", "node:n1/out"), ("features", "node:n0/out"),
        ]


def test_named_outputs_may_share_a_tensor_or_select_an_input():
    plan = config("a = linear(8)\nb = a\nlabel = y", {"z": ("B", 4), "y": ("B", 6)},
                  {"a": ("B", 8), "b": ("B", 8), "label": ("B", 6)})
    assert [port["ref"] for port in plan.outputs] == ["node:n0/out", "node:n0/out", "input:y"]


def test_a_named_output_never_bound_fails():
    error = fails("E_OUTPUT", config, "features = linear(8)\nlinear(y, 1)", NAMED_IN, NAMED_OUT)
    assert "logits" in error.message
    fails("E_OUTPUT", config, "features = linear(8)\nout = linear(y, 1)", NAMED_IN, NAMED_OUT)


def test_a_named_output_bound_to_a_tuple_fails(registry):
    fails("E_OUTPUT", config, "features = linear(8)\nlogits = pair(y)", NAMED_IN, NAMED_OUT, registry=registry)


def test_a_callable_with_named_outputs_must_return_exactly_the_declared_mapping():
    def missing(*, z, y):
        return {"features": ops.linear(8)}

    def extra(*, z, y):
        return {"features": ops.linear(8), "logits": ops.linear(y, 1), "more": z}

    def bare(*, z, y):
        ops.linear(8)
        return ops.linear(y, 1)

    def nothing(*, z, y):
        ops.linear(8)

    def not_a_symbol(*, z, y):
        return {"features": ops.linear(8), "logits": 1}

    for fn in (missing, extra, bare, nothing, not_a_symbol):
        fails("E_OUTPUT", capture, fn, NAMED_IN, NAMED_OUT)


def test_an_unread_named_input_fails():
    fails("E_BINDING", config, "features = linear(8)\nlogits = linear(1)", NAMED_IN, NAMED_OUT)


# -- output selection in callables -------------------------------------------------------------------------
def test_a_returned_symbol_overrides_current():
    def fn(x):
        h = ops.linear(4)
        ops.relu()
        return ops.linear(h, 4)

    fails("E_BINDING", capture, fn)  # the relu is dead: the return did not select it

    def chosen(x):
        h = ops.linear(4)
        return h

    assert capture(chosen).output_ref == "node:n0/out"


@pytest.mark.parametrize("value", [3, "out", (), [1], {"output": None}])
def test_a_callable_returning_anything_but_a_symbol_or_none_fails(value):
    def fn(x):
        ops.relu()
        return value

    fails("E_OUTPUT", capture, fn)


def test_a_callable_returning_a_tuple_of_symbols_fails(registry):
    fails("E_OUTPUT", capture, lambda x: registry.ops.pair(), registry=registry)


# -- identity plans ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["", "# nothing\n", "saved = x\nout = saved"])
def test_configuration_without_calls_is_the_identity_when_contracts_agree(source):
    plan = config(source, ("B", 4, 5), ("B", 4, 5))
    assert plan.nodes == () and plan.output_ref == "input:x"
    fails("E_CONSTRAINT", config, source, ("B", 4, 5), ("B", 4, 6))
    fails("E_CONSTRAINT", config, source, ("B", 4, 5), ("B", 20))


def test_a_callable_without_calls_is_the_identity_when_contracts_agree():
    def nothing(x):
        pass

    for fn in (nothing, lambda x: x):
        plan = capture(fn, ("B", 4), ("B", 4))
        assert plan.nodes == () and plan.output_ref == "input:x"
        fails("E_CONSTRAINT", capture, fn, ("B", 4), ("B", 5))


# -- configuration and callable agree ----------------------------------------------------------------------
def test_both_frontends_build_identical_graphs(registry):
    source = """
h = linear(64, name="hidden")
g = relu()
a, b = pair(g)
joined = join(linear(a, 64, bias=False), b)
out = linear(joined)
"""

    def fn(x):
        ops.linear(64, name="hidden")
        g = ops.relu()
        a, b = registry.ops.pair(g)
        joined = registry.ops.join(ops.linear(a, 64, bias=False), b)
        return ops.linear(joined)

    by_config = config(source, ("B", 128), ("B", 10), registry=registry)
    by_callable = capture(fn, ("B", 128), ("B", 10), registry=registry)
    assert graph_of(by_config) == graph_of(by_callable)
    assert [node.id for node in by_config.nodes] == ["hidden", "n1", "n2", "n3", "n4", "n5"]
    assert by_config.frontend["kind"] == "python_config@1"
    assert by_callable.frontend["kind"] == "python_callable@1"


def test_both_frontends_agree_on_named_ports():
    source = "features = linear(8)\nlogits = linear(y, 1)"

    def fn(*, z, y):
        features = ops.linear(8)
        return {"features": features, "logits": ops.linear(y, 1)}

    assert graph_of(config(source, NAMED_IN, NAMED_OUT)) == graph_of(capture(fn, NAMED_IN, NAMED_OUT))
