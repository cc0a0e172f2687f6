"""Optional input ports (``name?[dims]``), end to end: the DSL, both frontends, resolution, the saved
plan, restoration, the built module (checked, fast, fx, export, compile), the tables and the harness.

The operators are declared here: ``shift(x, offset?)`` adds an offset when one is bound,
``blend(x, a?, b?)`` adds 2*a and 3*b for whichever is bound (so an unbound port can sit
between the required input and a bound one), and ``gate(x, mask?)`` has an unpatterned optional
port that its relation ties to ``x`` only when bound.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch import nn

import hndl
from hndl import Example, HNDLError, Registry, ResolvedPlan, operator
from hndl.docs.catalog import operator_page
from hndl.persist import canonical
from hndl.shape_dsl import parse_shape
from hndl.testing import check_operator
from hndl.torch import build, network, network_from_callable

ROW = ("B", 4)


@operator(
    "shift", summary="Add an optional offset to x.", shape="x[B, D], offset?[B, D] -> out[B, D]",
    category="test", reference=lambda module: (lambda x, offset=None: x if offset is None else x + offset),
    examples=[Example("shift()", ROW, ROW, note="offset unbound"),
              Example("o = linear(x, 4)\nshift(x, o)", ROW, ROW, note="offset bound")],
)
class Shift(nn.Module):
    """`x + offset` when `offset` is bound, else `x`."""

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        return x if offset is None else x + offset


@operator(
    "blend", summary="Add 2*a and 3*b to x, each when bound.", shape="x[B, D], a?[B, D], b?[B, D] -> out[B, D]",
    category="test", examples=[Example("blend()", ROW, ROW),
                               Example("p = linear(x, 4)\nq = linear(x, 4)\nblend(x, p, q)", ROW, ROW)],
)
class Blend(nn.Module):
    """`x + 2a + 3b`, leaving out an unbound term."""

    def forward(self, x, a=None, b=None):
        out = x
        if a is not None:
            out = out + 2 * a
        if b is not None:
            out = out + 3 * b
        return out


def _gate_relation(s) -> None:
    assert s.bound("x") and s.bound("out")
    if s.bound("mask"):
        s.equal("mask", "x")
    else:
        assert s.shape("mask") is None and s.dtype("mask") is None and s.batch("mask") is None
        assert "mask" not in s.inputs


@operator(
    "gate", summary="Multiply x by an optional mask.", shape="x[B, D], mask? -> out[B, D]",
    relation=_gate_relation, shape_text="mask, when bound, has the shape of x.",
    category="test", examples=[Example("gate()", ROW, ROW), Example("m = linear(x, 4)\ngate(x, m)", ROW, ROW)],
)
class Gate(nn.Module):
    """`x * mask` when `mask` is bound, else `x`."""

    def forward(self, x, mask=None):
        return x if mask is None else x * mask


def _careless_relation(s) -> None:
    s.rank("mask", 2)  # never asks s.bound("mask"): a bug in the declaration


@operator("careless", summary="A relation that forgets to test s.bound.", shape="x[B, D], mask? -> out[B, D]",
          relation=_careless_relation, category="test", examples=[Example("careless()", ROW, ROW)])
class Careless(nn.Module):
    """Identity."""

    def forward(self, x, mask=None):
        return x


@pytest.fixture(scope="module")
def registry() -> Registry:
    registry = Registry.from_packs("basic")
    for cls in (Shift, Blend, Gate, Careless):
        registry.add(cls)
    return registry


def configured(source, registry, **contract):
    contract = {"input_shape": ROW, "output_shape": ROW, **contract}
    return hndl.resolve(source, registry=registry, **contract)


def shift_node(plan):
    return next(node for node in plan.nodes if node.alias in ("shift", "blend", "gate"))


# == the DSL ===============================================================================================
def test_the_dsl_marks_optional_input_ports():
    signature = parse_shape("x[B, D], bias?[B, H, T, T], rope?:float32[B, 2, T, R], mask? -> out[B, D]")
    assert [port.optional for port in signature.inputs] == [False, True, True, True]
    assert signature.optional_inputs == ("bias", "rope", "mask")
    assert [port.name for port in signature.required_inputs] == ["x"]
    assert signature.inputs[2].dtype == "float32" and signature.inputs[3].dims is None
    assert str(signature) == "x[B, D], bias?[B, H, T, T], rope?[B, 2, T, R]:float32, mask? -> out[B, D]"
    assert parse_shape(str(signature)) .inputs == signature.inputs


@pytest.mark.parametrize("text, problem", [
    ("x?[B, D] -> out[B, D]", "the first input port 'x' cannot be optional"),
    ("x[B, D], a?[B, D], b[B, D] -> out[B, D]", "required input port 'b' follows an optional port"),
    ("x[B, D] -> out?[B, D]", "output port 'out?' cannot be optional"),
    ("x[B, D], a?*[B, D] -> out[B, D]", "cannot be both optional and variadic"),
    ("x*? -> out", "cannot be both optional and variadic"),
    ("x[B, D], a[B, D]? -> out[B, D]", "'?' must directly follow the port name"),
    ("x[B, D], a?? -> out[B, D]", "'?' must directly follow the port name"),
    ("x[B, D], a:float32? -> out[B, D]", "'?' must directly follow the port name"),
])
def test_misplaced_optional_marks_fail_registration(text, problem):
    with pytest.raises(HNDLError) as caught:
        parse_shape(text)
    assert caught.value.code == "E_REGISTRY" and problem in caught.value.message
    assert caught.value.remedies


def test_a_declaration_with_a_misplaced_optional_port_is_refused():
    with pytest.raises(HNDLError) as caught:
        @operator("bad", summary="Bad.", shape="x[B, D] -> out?[B, D]", category="test")
        class Bad(nn.Module):
            """Bad."""
    assert caught.value.code == "E_REGISTRY"


def test_an_optional_port_without_a_pattern_needs_a_relation():
    with pytest.raises(HNDLError) as caught:
        @operator("loose", summary="Loose.", shape="x[B, D], mask? -> out[B, D]", category="test")
        class Loose(nn.Module):
            """Loose."""
    assert caught.value.code == "E_REGISTRY" and "needs relation=" in caught.value.message


def test_the_declaration_lists_required_and_optional_ports():
    spec = hndl.declaration.spec_of(Blend)
    assert spec.input_ports() == ("x", "a", "b")
    assert spec.required_inputs == ("x",)
    assert spec.optional_inputs == frozenset({"a", "b"})
    assert spec.bound_inputs(["b", "x"]) == ("x", "b")


# == binding, in both frontends ============================================================================
CASES = {
    # name: (configuration, callable body over ops, the ports bound at the node)
    "current": ("linear(4)\nshift()", lambda ops, x: ops.shift(ops.linear(x, 4)), ("x",)),
    "positional": ("o = linear(x, 4)\nshift(x, o)", lambda ops, x: ops.shift(x, ops.linear(x, 4)), ("x", "offset")),
    "keyword": ("o = linear(x, 4)\nshift(offset=o, x=x)",
                lambda ops, x: ops.shift(offset=ops.linear(x, 4), x=x), ("x", "offset")),
    "keyword over current": ("o = linear(x, 4)\nlinear(x, 4)\nshift(offset=o)",
                             lambda ops, x: (lambda o: ops.shift(offset=o))(
                                 (lambda o: (ops.linear(x, 4), o)[1])(ops.linear(x, 4))), ("x", "offset")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_configuration_and_capture_bind_alike(case, registry):
    source, body, ports = CASES[case]
    plan = configured(source, registry)
    captured = hndl.resolve_callable(lambda x: body(registry.ops, x), input_shape=ROW, output_shape=ROW,
                                     registry=registry)
    node = shift_node(plan)
    assert tuple(node.inputs) == ports and tuple(node.input_shapes) == ports
    assert tuple(shift_node(captured).inputs) == ports
    assert plan.semantic_digest == captured.semantic_digest


def test_an_unbound_middle_port_keeps_the_declared_order(registry):
    plan = configured("o = linear(x, 4)\nblend(b=o)", registry)
    assert tuple(shift_node(plan).inputs) == ("x", "b")
    plan = configured("o = linear(x, 4)\np = linear(x, 4)\nblend(x, b=o, a=p)", registry)
    assert tuple(shift_node(plan).inputs) == ("x", "a", "b")


def test_variadic_keywords_still_bind_in_declared_order(registry):
    plan = configured("a = linear(x, 4)\nb = linear(x, 4)\nconcat(x1=b, x0=a)", registry, output_shape=("B", 8))
    assert list(plan.nodes[-1].inputs.items()) == [("x0", "node:n0/out"), ("x1", "node:n1/out")]


def test_multi_input_keyword_binding_in_capture_matches_configuration(registry):
    source = "l = linear(x, 4)\nr = linear(x, 4)\nadd(y=r, x=l)"

    def body(x):
        ops = registry.ops
        left, right = ops.linear(x, 4), ops.linear(x, 4)
        return ops.add(y=right, x=left)

    plan = configured(source, registry)
    captured = hndl.resolve_callable(body, input_shape=ROW, output_shape=ROW, registry=registry)
    assert plan.semantic_digest == captured.semantic_digest
    add = plan.nodes[-1]
    assert dict(add.inputs) == {"x": "node:n0/out", "y": "node:n1/out"} and tuple(add.inputs) == ("x", "y")


@pytest.mark.parametrize("source, code, words", [
    ("o = linear(x, 4)\nshift(x, o, offset=o)", "E_ARGUMENT", "bound twice"),
    ("o = linear(x, 4)\nshift(x, o, o)", "E_ARGUMENT", "takes 2 tensor input(s) (x, offset?), got 3"),
    ("shift(offset=3)", "E_ARGUMENT", "takes a symbolic tensor"),
    ("o = linear(x, 4)\nshift(ofset=o)", "E_ARGUMENT", "has no argument"),
    ("a, b = split(2)\nshift(offset=b)", "E_CURRENT", "cleared current"),
])
def test_binding_errors(source, code, words, registry):
    with pytest.raises(HNDLError) as caught:
        configured(source, registry)
    assert caught.value.code == code and words in caught.value.message


def test_a_misspelt_optional_port_is_suggested(registry):
    with pytest.raises(HNDLError) as caught:
        configured("o = linear(x, 4)\nshift(ofset=o)", registry)
    assert any("offset" in remedy for remedy in caught.value.remedies)


def test_a_required_port_of_a_multi_input_operator_still_needs_binding(registry):
    with pytest.raises(HNDLError) as caught:
        configured("add(y=x)", registry)
    assert caught.value.code == "E_BINDING" and "missing x" in caught.value.message


# == resolution and the relation view =====================================================================
def test_patterns_infer_through_a_bound_optional_port_in_both_directions(registry):
    # forward: offset's width comes from x; backward: linear's width comes from offset's pattern
    plan = configured("o = linear(x)\nshift(x, o)", registry)
    assert plan.nodes[0].args["out_features"] == 4
    assert dict(shift_node(plan).input_shapes) == {"x": ("B", 4), "offset": ("B", 4)}


def test_an_unbound_port_adds_no_fact(registry):
    plan = configured("linear(4)\nshift()", registry)
    assert dict(shift_node(plan).input_shapes) == {"x": ("B", 4)}


def test_a_relation_reads_bound_and_asserts_only_when_bound(registry):
    bound = configured("m = linear(x)\ngate(x, m)", registry)
    assert bound.nodes[0].args["out_features"] == 4  # inferred through the relation's s.equal
    absent = configured("gate()", registry)
    assert tuple(shift_node(absent).inputs) == ("x",)


def test_asserting_about_an_unbound_port_is_a_declaration_bug(registry):
    with pytest.raises(HNDLError) as caught:
        configured("careless()", registry)
    assert caught.value.code == "E_REGISTRY" and "leaves unbound" in caught.value.message
    assert any("s.bound('mask')" in remedy for remedy in caught.value.remedies)


def test_the_view_refuses_an_undeclared_port(registry):
    def nosy(s):
        s.bound("nothing")

    @operator("nosy", summary="Asks about a port it lacks.", shape="x[B, D], m? -> out[B, D]", relation=nosy,
              category="test")
    class Nosy(nn.Module):
        """Identity."""

    local = Registry.from_packs("basic")
    local.add(Nosy)
    with pytest.raises(HNDLError) as caught:
        configured("nosy()", local)
    assert caught.value.code == "E_REGISTRY" and "does not declare" in caught.value.message


# == the saved plan ===========================================================================================
def resign(record: dict) -> str:
    """Recompute both digests as §10 defines them (tests/test_persist.py does the same)."""
    semantic = {key: value for key, value in record.items() if key not in ("frontend", "digests")}
    semantic["nodes"] = [{key: value for key, value in node.items() if key not in ("source", "provenance")}
                         for node in record["nodes"]]
    record["digests"] = {"semantic": "sha256:" + hashlib.sha256(canonical(semantic)).hexdigest()}
    record["digests"]["artifact"] = "sha256:" + hashlib.sha256(canonical(record)).hexdigest()
    return canonical(record).decode("utf-8")


def test_an_unbound_port_is_absent_from_the_saved_plan(registry):
    absent = configured("linear(4)\nshift()", registry)
    node = json.loads(absent.to_json())["nodes"][-1]
    assert node["inputs"] == {"x": "node:n0/out"} and set(node["input_shapes"]) == {"x"}
    present = configured("o = linear(x, 4)\nshift(x, o)", registry)
    node = json.loads(present.to_json())["nodes"][-1]
    assert set(node["inputs"]) == {"x", "offset"}


@pytest.mark.parametrize("source", ["linear(4)\nshift()", "o = linear(x, 4)\nshift(x, o)",
                                    "o = linear(x, 4)\nblend(b=o)", "m = linear(x)\ngate(x, m)"])
def test_round_trip_is_byte_exact_with_and_without_optional_ports(source, registry):
    plan = configured(source, registry)
    text = plan.to_json()
    restored = ResolvedPlan.from_json(text, registry=registry)
    assert restored == plan and restored.to_json() == text
    assert restored.semantic_digest == plan.semantic_digest
    assert tuple(shift_node(restored).inputs) == tuple(shift_node(plan).inputs)


def test_a_plan_without_optional_ports_encodes_as_before(registry):
    """An operator whose call binds every port it has saves exactly what it saved before optional
    ports existed: this digest was computed before the feature."""
    plan = configured("linear(4)\nrelu()", registry)
    before = hndl.resolve("linear(4)\nrelu()", input_shape=ROW, output_shape=ROW)
    assert plan.semantic_digest == before.semantic_digest
    assert "?" not in plan.to_json()


def test_restoration_refuses_a_missing_required_port(registry):
    plan = configured("o = linear(x, 4)\nshift(x, o)", registry)
    record = json.loads(plan.to_json())
    node = record["nodes"][-1]
    del node["inputs"]["x"], node["input_shapes"]["x"]
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(resign(record), registry=registry)
    assert caught.value.code == "E_BINDING" and "declares [x, offset?]" in caught.value.message


def test_restoration_refuses_an_unknown_port(registry):
    plan = configured("o = linear(x, 4)\nshift(x, o)", registry)
    record = json.loads(plan.to_json())
    node = record["nodes"][-1]
    node["inputs"]["bias"] = node["inputs"].pop("offset")
    node["input_shapes"]["bias"] = node["input_shapes"].pop("offset")
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(resign(record), registry=registry)
    assert caught.value.code == "E_BINDING"


def test_restoration_revalidates_a_bound_optional_port(registry):
    plan = configured("o = linear(x, 4)\nshift(x, o)", registry)
    record = json.loads(plan.to_json())
    record["nodes"][-1]["input_shapes"]["offset"] = ["B", 5]
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(resign(record), registry=registry)
    assert caught.value.code == "E_INTEGRITY" and "offset" in caught.value.message


def test_restoration_accepts_an_optional_port_removed_consistently(registry):
    """Dropping a bound optional port (and the node that fed it) is a different, valid plan."""
    plan = configured("o = linear(x, 4)\nlinear(x, 4)\nshift(offset=o)", registry)
    record = json.loads(plan.to_json())
    shift = record["nodes"][-1]
    del shift["inputs"]["offset"], shift["input_shapes"]["offset"]
    record["nodes"] = [node for node in record["nodes"] if node["id"] != "n0"]
    restored = ResolvedPlan.from_json(resign(record), registry=registry)
    assert tuple(shift_node(restored).inputs) == ("x",)


# == the built module ==========================================================================================
@pytest.fixture(scope="module")
def blended(registry):
    torch.manual_seed(0)
    return network("o = linear(x, 4)\nblend(x, b=o)", input_shape=ROW, output_shape=ROW, registry=registry,
                   device="cpu")


def test_modules_receive_none_at_an_unbound_port(blended):
    seen = []
    handle = blended.nodes["n_n1"].register_forward_pre_hook(lambda module, args: seen.append(args))
    try:
        x = torch.randn(2, 4)
        expected = x + 3 * blended.nodes["n_n0"](x)
        for _ in range(3):  # the checked program, then the fast path for a remembered signature
            torch.testing.assert_close(blended(x), expected)
    finally:
        handle.remove()
    assert [len(args) for args in seen] == [3, 3, 3] and all(args[1] is None for args in seen)


def test_the_fast_path_passes_none_positionally(blended, registry):
    x = torch.randn(2, 4)
    blended(x)
    blended(x)
    plain = build(blended.plan, device="cpu", registry=registry)
    plain.load_state_dict(blended.state_dict())
    torch.testing.assert_close(plain(x=x)["output"], blended(x))


def test_numerics_forward_and_backward_with_and_without_the_port(registry):
    torch.manual_seed(0)
    bound = network("o = linear(x, 4)\nshift(x, o)", input_shape=ROW, output_shape=ROW, registry=registry,
                    device="cpu")
    x = torch.randn(3, 4, requires_grad=True)
    linear = bound.nodes["n_n0"]
    torch.testing.assert_close(bound(x), x + linear(x))
    bound(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3, 4) + linear.weight.sum(0).expand(3, 4))
    absent = network("shift()", input_shape=ROW, output_shape=ROW, registry=registry, device="cpu")
    torch.testing.assert_close(absent(x), x)


def test_runtime_validation_checks_a_bound_optional_port_and_skips_an_unbound_one(registry, blended):
    named = {"x": ROW, "o": ROW}
    model = network("shift(x, o)", input_shape=named, output_shape=ROW, registry=registry, device="cpu")
    assert [port.name for port in model._steps[0].ports_in] == ["x", "offset"]
    with pytest.raises(HNDLError) as caught:
        model(torch.randn(2, 4), torch.randn(2, 5))
    assert caught.value.code in ("E_BINDING", "E_RUNTIME") and "'o'" in caught.value.message
    assert [port.name for port in blended._steps[1].ports_in] == ["x", "b"]
    assert blended._steps[1].slots == (0, None, 1)


def test_fx_export_and_compile_trace_an_unbound_port(blended):
    x = torch.randn(2, 4)
    expected = blended(x)
    traced = torch.fx.symbolic_trace(blended)
    torch.testing.assert_close(traced(x), expected)
    assert "None" in traced.code
    exported = torch.export.export(blended, (x,))
    torch.testing.assert_close(exported.module()(x), expected)
    compiled = torch.compile(blended, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), expected)


def test_capture_builds_the_same_module(registry):
    def body(x):
        ops = registry.ops
        return ops.blend(x, b=ops.linear(x, 4))

    torch.manual_seed(0)
    model = network_from_callable(body, input_shape=ROW, output_shape=ROW, registry=registry, device="cpu")
    x = torch.randn(2, 4)
    torch.testing.assert_close(model(x), x + 3 * model.nodes["n_n0"](x))


def test_an_operator_with_optional_ports_chains_when_they_are_unbound(registry):
    model = network("linear(4)\nshift()\nrelu()", input_shape=ROW, output_shape=ROW, registry=registry,
                    device="cpu")
    x = torch.randn(2, 4)
    torch.testing.assert_close(model[:2](x), model.nodes["n_n0"](x))
    assert isinstance(model[1], Shift)


def test_preflight_runs_a_node_with_an_unbound_port(blended, registry):
    from hndl.torch import preflight

    report = preflight(blended.plan, registry=registry)
    assert report is not None


# == tables, describe, drawing, catalog =======================================================================
def test_the_tables_show_bound_optional_ports_by_name(registry):
    plan = configured("o = linear(x, 4)\nshift(x, o)", registry)
    assert "offset=[B, 4] <- node:n0/out" in str(plan)
    chain = configured("linear(4)\nshift()", registry)
    assert "shift" in str(chain) and "offset" not in str(chain)


def test_describe_names_the_unbound_optional_ports(registry):
    plan = configured("o = linear(x, 4)\nblend(b=o)", registry)
    with hndl.registry.using_registry(registry):
        text = plan.describe()
    assert "unbound optional ports: a" in text


def test_drawing_labels_a_bound_optional_edge(registry):
    from hndl.drawing.dot import plan_dot

    dot = plan_dot(configured("o = linear(x, 4)\nshift(x, o)", registry))
    assert "offset [B, 4]" in dot


def test_the_catalog_marks_optional_ports(registry):
    page = operator_page(hndl.declaration.spec_of(Blend), "test", registry)
    assert "`x[B, D], a?[B, D], b?[B, D] -> out[B, D]`" in page
    assert "| input | `a?` |" in page and "Optional input ports (marked `?`): `a`, `b`." in page
    assert "receives `None`" in page


# == the harness ==================================================================================================
def test_check_operator_runs_examples_with_and_without_the_port(registry):
    check_operator(Shift, registry=registry, on=("cpu",))
    check_operator(Gate, registry=registry, on=("cpu",))


def test_check_operator_wants_each_optional_port_bound_and_unbound(registry):
    check_operator(Blend, registry=registry, on=("cpu",))

    @operator("lazy", summary="Never binds its optional port in an example.", shape="x[B, D], m?[B, D] -> out[B, D]",
              category="test", examples=[Example("lazy()", ROW, ROW)])
    class Lazy(nn.Module):
        """Identity."""

        def forward(self, x, m=None):
            return x

    with pytest.raises(AssertionError, match="no example binds optional port 'm'"):
        check_operator(Lazy, on=("cpu",))


def test_a_constructor_symbol_only_an_unbound_port_carries_is_none():
    @operator("widen", summary="Records the widths its constructor received.",
              shape="x[B, D], extra?[B, E] -> out[B, D]", category="test",
              examples=[Example("widen()", ROW, ROW)])
    class Widen(nn.Module):
        """Identity; keeps D and E."""

        def __init__(self, *, D: int, E: int | None) -> None:
            super().__init__()
            self.widths = (D, E)

        def forward(self, x, extra=None):
            return x

    local = Registry.from_packs("basic")
    local.add(Widen)
    absent = network("widen()", input_shape=ROW, output_shape=ROW, registry=local, device="cpu")
    assert absent.nodes["n_n0"].widths == (4, None)
    bound = network("e = linear(x, 6)\nwiden(x, e)", input_shape=ROW, output_shape=ROW, registry=local, device="cpu")
    assert bound.nodes["n_n1"].widths == (4, 6)


def test_copies_and_pickles_keep_the_unbound_port(blended):
    import copy
    import pickle

    x = torch.randn(2, 4)
    expected = blended(x)
    for clone in (copy.deepcopy(blended), pickle.loads(pickle.dumps(blended))):
        torch.testing.assert_close(clone(x), expected)
        torch.testing.assert_close(clone(x), expected)  # the fast path of the copy
        assert clone._steps[1].slots == (0, None, 1)
