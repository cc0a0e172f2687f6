"""Every first-party operator's arguments at their edges (issue 29, item 9; §8, §11, §13).

An operator's arguments are author data, and an argument a declaration admits must build: its
bounds are what keep a resolved plan away from torch's int64 size arithmetic, from a float torch
cannot convert, and from state too large to allocate. For every operator of the basic, vision and
transformer packs the generators call it, through the trusted-callable frontend (which passes any
Python value, not only what configuration literals can spell), with argument values at the
edges: 0, 1, -1, the declared bounds and their neighbours, 2**31, 2**63 - 1, 2**63, digit
floods, the largest and smallest floats, nan and the infinities, the float16 / bfloat16 / float32
overflow points, wrong types, empty and oversized containers, and omitted arguments.

Each operator starts from its first catalog example: the example is resolved once, the nodes
before the operator are replayed with their resolved arguments, the operator is called with the
generated ones, and a stateless tail (flatten, unsqueeze, adaptive_avg_pool1d(1)) turns whatever
it produces into the fixed output contract ``[B, 1, 1]``.

Invariant: resolution returns a plan or raises HNDLError with a catalog code, never another
exception, never a hang, never exec/compile/import/open in the host (``conftest.untrusted_call``).
A build of that plan on cpu (under a small state budget, so nothing large is allocated) returns a
module or raises HNDLError E_RESOURCE or E_ARGUMENT, never another exception (the build compiles
its own generated forward program, so the host audit does not apply to it). A built module runs
on a contract-valid input. Building and running take less than the suite's hang bound.

Targets (``pytest -m fuzz``): one hypothesis target per pack, each drawing an operator of that
pack and one to three of its arguments (an edge value, a small ordinary value, a random int or
float, or the argument left out) in a random compute dtype; and a deterministic sweep that gives
every argument of every operator each of its edge values in turn (float arguments in float32,
float16 and bfloat16). The normal suite runs the generators under the bounded profile.
"""

from __future__ import annotations

import math
import sys
import time
from functools import lru_cache
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl.plan import PlanNode
from hndl.torch import build

NORMAL = settings.get_profile("hndl-normal")
LONG = settings.get_profile("hndl-fuzz")

PACKS = ("basic", "vision", "transformer")
REGISTRY = hndl.Registry.from_packs(*PACKS)
ALIASES = {pack: sorted(hndl.Registry.from_packs(pack).aliases()) for pack in PACKS}
EVERY_ALIAS = [alias for pack in PACKS for alias in ALIASES[pack]]

#: A build here may make at most 32 MiB of state: enough for every template, and what bounds the
#: real allocations the fuzz makes (the default follows the machine's memory).
LIMITS = {"max_state_bytes": 32 << 20, "max_node_modules": 512}
#: A built module is run when no tensor of its plan holds more elements than this per example.
RUN_ELEMENTS = 1 << 18
DTYPES = ("float32", "float16", "bfloat16")
OUTPUT = ("B", 1, 1)


# ---------------------------------------------------------------------------------------------
# Templates: each operator's first resolvable catalog example, as plan nodes to replay
# ---------------------------------------------------------------------------------------------


class Template(NamedTuple):
    """One operator in context: the example's contracts, the nodes before it, and its node."""

    alias: str
    input_shape: Any
    input_dtype: Any
    prefix: tuple[PlanNode, ...]
    target: PlanNode


@lru_cache(maxsize=None)
def template(alias: str) -> Template:
    """``alias`` in the context of its first example that resolves offline (resolved once)."""
    spec = REGISTRY.get(alias)
    for example in spec.examples:
        if example.network:
            continue
        plan = hndl.resolve(example.source, input_shape=example.input_shape, output_shape=example.output_shape,
                            input_dtype=example.input_dtype, registry=REGISTRY)
        for index, node in enumerate(plan.nodes):
            if node.op == spec.qualified:
                return Template(alias, example.input_shape, example.input_dtype, tuple(plan.nodes[:index]), node)
    raise AssertionError(f"no example of {alias} resolves offline")


def _given_args(node: PlanNode) -> dict[str, Any]:
    """The node's resolved arguments as an author would pass them (the frontends count inputs)."""
    return {name: value for name, value in node.args.items() if name != "input_count"}


def _call(alias: str, node_inputs, env: dict, args: dict):
    """Call ``alias`` with its ports bound by name to the symbols in ``env``."""
    ports = {port: env[ref] for port, ref in node_inputs.items()}
    return getattr(REGISTRY.ops, alias)(**ports, **args)


def _bind_outputs(node: PlanNode, result, env: dict) -> None:
    """Record the symbols a replayed call returned under the plan's references to ``node``'s outputs."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    for port, symbol in zip(node.outputs, results):
        env[f"node:{node.id}/{port}"] = symbol


def capture_with(case_template: Template, args: dict):
    """The callable that replays the template with ``args`` for its operator, then the tail."""
    ops = REGISTRY.ops

    def network(*positional, **named):
        env = {"input:x": positional[0]} if positional else {f"input:{name}": value for name, value in named.items()}
        for node in case_template.prefix:
            _bind_outputs(node, _call(node.alias, node.inputs, env, _given_args(node)), env)
        target = case_template.target
        given = {name: next(iter(env.values())) if value is A_TENSOR else value for name, value in args.items()}
        result = _call(case_template.alias, target.inputs, env, given)
        first = result[0] if isinstance(result, (tuple, list)) else result
        return ops.adaptive_avg_pool1d(ops.unsqueeze(ops.flatten(first), 1), 1)

    return network


# ---------------------------------------------------------------------------------------------
# Edge values
# ---------------------------------------------------------------------------------------------

FLOAT16_MAX, BFLOAT16_MAX, FLOAT32_MAX = (torch.finfo(dtype).max for dtype in (torch.float16, torch.bfloat16,
                                                                                 torch.float32))
INT_EDGES = [0, 1, -1, 2, 3, 7, 2**31 - 1, 2**31, 2**32 + 1, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63 - 1),
             -(2**63), 10**30, 10**5000, -(10**5000)]
FLOAT_EDGES = [0.0, -0.0, 5e-324, 1e-300, 1e-8, 0.5, 1.0 - 2**-53, 1.0, 2.0, 6.0, FLOAT16_MAX, 65520.0, 70000.0,
               -70000.0, BFLOAT16_MAX, FLOAT32_MAX, 3.5e38, 1e300, 1e308, sys.float_info.max, -1e300,
               float("nan"), float("inf"), float("-inf"), 2**63 - 1, 10**400]
#: Stands for a symbolic tensor (the network's first input) given as an argument value.
A_TENSOR = object()
WRONG_TYPES = [None, True, False, 1.5, "1", b"1", 1 + 1j, (), [], {}, {"a": 1}, object(), range(3), "none",
               "\ud800", "a" * 20_000, A_TENSOR]


def _float_neighbours(value: float) -> list[float]:
    return [math.nextafter(value, -math.inf), value, math.nextafter(value, math.inf)]


def bound_edges(arg) -> list:
    """The declared bounds and the values on either side of them."""
    edges: list = []
    for bound in (arg.min, arg.max):
        if bound is None:
            continue
        if arg.type is float:
            edges += _float_neighbours(float(bound))
        else:
            edges += [math.floor(bound) - 1, math.floor(bound), math.ceil(bound), math.ceil(bound) + 1]
    return edges


def edge_values(arg) -> list:
    """Values at the edges of one declared argument, of its own type and of others."""
    if arg.type is int:
        own = INT_EDGES + bound_edges(arg)
    elif arg.type is float:
        own = FLOAT_EDGES + bound_edges(arg)
    elif arg.type is bool:
        own = [True, False, 0, 1]
    elif arg.type is str:
        own = list(arg.choices or ("x",)) + ["", "NONE", " none", "\x00"]
    elif arg.type == "pair":
        scalars = INT_EDGES + bound_edges(arg)
        own = scalars + [(value, 1) for value in scalars] + [(1, value) for value in scalars] + [
            (), (1,), (1, 2, 3), [2, 2], (2**63, 2**63), (1.0, 1.0)]
    elif arg.type == "ints":
        own = [(), (1,), (2, 2), (0,), (-1,), (2**31,), (2**63 - 1,), (2**63,), (1,) * 65, [4, 2], (1.0,),
               tuple(range(1, 9))] + [(value,) for value in bound_edges(arg)]
    else:  # "strs"
        own = [(), tuple(arg.choices or ("x",))[:1], ("",), ("x",) * 65, ["x"]]
    return own + WRONG_TYPES


# ---------------------------------------------------------------------------------------------
# The invariant for one case
# ---------------------------------------------------------------------------------------------


def _largest_tensor(plan) -> int:
    sizes = [1]
    for node in plan.nodes:
        for shape in (*node.input_shapes.values(), *node.output_shapes.values()):
            sizes.append(math.prod(extent for extent in shape[1:]))
    return max(sizes)


def _inputs(plan) -> dict[str, torch.Tensor]:
    inputs = {}
    for port in plan.inputs:
        shape = (2, *port["shape"][1:])
        dtype = getattr(torch, port["dtype"])
        inputs[port["name"]] = torch.zeros(shape, dtype=dtype) if not dtype.is_floating_point else \
            torch.randn(shape).to(dtype)
    return inputs


def brief(value: Any) -> str:
    try:
        return repr(value)[:200]
    except ValueError:
        return f"<{type(value).__name__} too long to show>"


def check_case(support, alias: str, args: dict, dtype: str) -> str:
    """Resolve, build and run ``alias`` with ``args``; returns how far the case got."""
    case = template(alias)
    what = f"{alias}({', '.join(f'{name}={brief(value)}' for name, value in args.items())}) in {dtype}"
    resolved = support.untrusted_call(
        lambda: hndl.resolve_callable(capture_with(case, args), input_shape=case.input_shape, output_shape=OUTPUT,
                                      input_dtype=case.input_dtype, dtype=dtype, registry=REGISTRY),
        what=f"resolving {what}")
    if resolved.error is not None:
        return "refused at resolution"
    plan = resolved.value
    start = time.perf_counter()
    try:
        module = build(plan, device="cpu", registry=REGISTRY, limits=LIMITS)
    except hndl.HNDLError as error:
        assert error.code in ("E_RESOURCE", "E_ARGUMENT"), f"building {what}: {error}"
        return "refused at build"
    except Exception as error:
        raise AssertionError(f"building {what} raised {type(error).__name__} instead of HNDLError: "
                             f"{brief(error)}") from error
    if _largest_tensor(plan) <= RUN_ELEMENTS:
        try:
            with torch.no_grad():
                out = module(**_inputs(plan))["output"]
        except Exception as error:  # the inputs match the contract: any failure is the arguments'
            raise AssertionError(f"running {what} raised {type(error).__name__}: {error}") from error
        assert tuple(out.shape) == (2, 1, 1), what
    seconds = time.perf_counter() - start
    assert seconds < support.HANG_SECONDS, f"building and running {what} took {seconds:.2f} s"
    return "ran" if _largest_tensor(plan) <= RUN_ELEMENTS else "built"


# ---------------------------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------------------------


def ordinary_values(arg) -> st.SearchStrategy:
    """Small values of the argument's own type, mostly in bounds: combined with edges they reach
    the build far more often than edges alone."""
    if arg.type is float:
        return st.floats(min_value=-8.0, max_value=8.0)
    if arg.type is bool:
        return st.booleans()
    if arg.type in (str, "strs"):
        word = st.sampled_from(arg.choices or ("x",))
        return word if arg.type is str else st.lists(word, max_size=3).map(tuple)
    small = st.integers(min_value=-1, max_value=9)
    if arg.type == "pair":
        return st.one_of(small, st.tuples(small, small))
    if arg.type == "ints":
        return st.lists(small, max_size=4).map(tuple)
    return small


@st.composite
def operator_calls(draw, aliases):
    """An operator, its template's arguments with one to three replaced or dropped, and a dtype."""
    alias = draw(st.sampled_from(aliases))
    spec = REGISTRY.get(alias)
    args = _given_args(template(alias).target)
    names = [name for name in spec.args if name != "input_count"]
    if names:
        count = draw(st.integers(min_value=1, max_value=min(3, len(names))))
        for name in draw(st.permutations(names))[:count]:
            choice = draw(st.sampled_from(["edge", "edge", "ordinary", "ordinary", "drop", "integer", "float"]))
            if choice == "drop":
                args.pop(name, None)
            elif choice == "ordinary":
                args[name] = draw(ordinary_values(spec.args[name]))
            elif choice == "integer":
                args[name] = draw(st.integers(min_value=-(2**64), max_value=2**64))
            elif choice == "float":
                args[name] = draw(st.floats(allow_nan=True, allow_infinity=True))
            else:
                args[name] = draw(st.sampled_from(edge_values(spec.args[name])))
    if draw(st.integers(0, 19)) == 0:
        args["not_an_argument"] = 1
    return alias, args, draw(st.sampled_from(DTYPES))


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", EVERY_ALIAS)
def test_every_operator_template_resolves_builds_and_runs(support, alias):
    """Guard the generators: each operator's unchanged template reaches a run."""
    assert check_case(support, alias, _given_args(template(alias).target), "float32") == "ran"


@NORMAL
@given(call=operator_calls(EVERY_ALIAS))
def test_generated_operator_arguments_build_or_fail_with_a_code(support, call):
    check_case(support, *call)


@pytest.mark.fuzz
@pytest.mark.parametrize("alias", EVERY_ALIAS)
def test_fuzz_every_argument_of_every_operator_at_every_edge(support, alias):
    """Deterministic sweep: each argument of ``alias`` takes each of its edge values in turn, in
    every compute dtype for a float argument."""
    spec = REGISTRY.get(alias)
    base = _given_args(template(alias).target)
    for name, arg in spec.args.items():
        if name == "input_count":
            continue
        for dtype in DTYPES if arg.type is float else DTYPES[:1]:
            check_case(support, alias, {key: value for key, value in base.items() if key != name}, dtype)
            for value in edge_values(arg):
                check_case(support, alias, {**base, name: value}, dtype)


@pytest.mark.fuzz
@LONG
@given(call=operator_calls(ALIASES["basic"]))
def test_fuzz_basic_operator_arguments(support, call):
    check_case(support, *call)


@pytest.mark.fuzz
@LONG
@given(call=operator_calls(ALIASES["vision"]))
def test_fuzz_vision_operator_arguments(support, call):
    check_case(support, *call)


@pytest.mark.fuzz
@LONG
@given(call=operator_calls(ALIASES["transformer"]))
def test_fuzz_transformer_operator_arguments(support, call):
    check_case(support, *call)


# ---------------------------------------------------------------------------------------------
# The examples (issue 29, item 9): each resolved, then failed inside torch
# ---------------------------------------------------------------------------------------------

SEQUENCE = {"input_shape": ("B", 4, 8), "output_shape": ("B", 4, 8)}
IMAGE = {"input_shape": ("B", 8, 6, 6), "output_shape": ("B", 8, 6, 6)}
HUGE = 2**63 - 1


def _refused(call, code: str, field: str) -> hndl.HNDLError:
    with pytest.raises(hndl.HNDLError) as caught:
        call()
    assert caught.value.code == code, caught.value
    assert caught.value.location.field == field, caught.value
    return caught.value


def _resolved(source: str, contracts: dict, **keywords):
    return hndl.resolve(source, **contracts, registry=REGISTRY, **keywords)


@pytest.mark.parametrize("source, contracts, field", [
    (f"positional_embedding(max_length={HUGE})", SEQUENCE, "max_length"),
    (f"embedding({HUGE}, 8)", {"input_shape": ("B", 4), "output_shape": ("B", 4, 8), "input_dtype": "int64"},
     "num_embeddings"),
    (f"inverted_residual(8, 6, kernel_size={HUGE})", IMAGE, "kernel_size"),
    (f"depthwise_separable_conv(8, kernel_size={HUGE})", IMAGE, "kernel_size"),
    (f"inverted_residual(8, {HUGE})", IMAGE, "expand_ratio"),
    ("inverted_residual(8, 1e300)", IMAGE, "expand_ratio"),
    (f"feed_forward({HUGE})", SEQUENCE, "expansion"),
    (f"transformer_block(heads=2, expansion={HUGE})", SEQUENCE, "expansion"),
    (f"moe(experts=2, top_k=1, expansion={HUGE})", SEQUENCE, "expansion"),
    (f"moe(experts={HUGE}, top_k=1)", SEQUENCE, "experts"),
    ("layer_scale(1e300)", SEQUENCE, "init_value"),
    ("layer_scale(3.5e38)", SEQUENCE, "init_value"),
    ("leaky_relu(3.5e38)", SEQUENCE, "negative_slope"),
    ("hardtanh(-1e300)", SEQUENCE, "min_val"),
    ("max_pool(2, stride=2147483648)", {"input_shape": ("B", 8, 6, 6), "output_shape": ("B", 8, 1, 1)}, "stride"),
])
def test_an_argument_torch_cannot_build_is_refused_when_resolving(source, contracts, field):
    """Each resolved before and then failed inside torch (``Storage size calculation overflowed``,
    ``Overflow when unpacking long long``, ``cannot be converted to float``)."""
    error = _refused(lambda: _resolved(source, contracts), "E_ARGUMENT", field)
    assert "2147483647" in str(error) or "float32" in str(error), error


@pytest.mark.parametrize("source, contracts", [
    ("depthwise_separable_conv(8, kernel_size=2147483647)", IMAGE),
    ("inverted_residual(8, 6, kernel_size=2147483647)", IMAGE),
    ("inverted_residual(1048576, 2147483647.0)", {"input_shape": ("B", 1 << 20, 2, 2),
                                                   "output_shape": ("B", 1 << 20, 2, 2)}),
    ("feed_forward(2147483647)", {"input_shape": ("B", 4, 1 << 20), "output_shape": ("B", 4, 1 << 20)}),
    ("moe(experts=2, top_k=1, expansion=2147483647)", {"input_shape": ("B", 4, 1 << 20),
                                                       "output_shape": ("B", 4, 1 << 20)}),
    ("transformer_block(heads=2, expansion=2147483647)", {"input_shape": ("B", 4, 1 << 20),
                                                          "output_shape": ("B", 4, 1 << 20)}),
])
@pytest.mark.parametrize("run", ["build", "parameter_counts", "dry_run"])
def test_state_whose_size_overflows_torch_is_e_resource_before_any_allocation(source, contracts, run):
    """In bounds, but the state's element count overflows torch's int64 size arithmetic: the meta
    pass refuses it, naming the node, where torch used to raise RuntimeError / TypeError."""
    from hndl.torch import dry_run, parameter_counts

    plan = _resolved(source, contracts)
    call = {"build": lambda: build(plan, device="cpu", registry=REGISTRY),
            "parameter_counts": lambda: parameter_counts(plan, registry=REGISTRY),
            "dry_run": lambda: dry_run(plan, registry=REGISTRY)}[run]
    with pytest.raises(hndl.HNDLError) as caught:
        call()
    assert caught.value.code == "E_RESOURCE" and caught.value.location.node == "n0", caught.value
    assert "max_state_bytes" in str(caught.value), caught.value


@pytest.mark.parametrize("source, field, dtype, largest", [
    ("layer_scale(70000.0)", "init_value", "float16", "65504"),
    ("layer_scale(-3.4e38)", "init_value", "bfloat16", "3.38953"),
    ("hardtanh(max_val=100000.0)", "max_val", "float16", "65504"),
    ("hardtanh(-70000.0)", "min_val", "float16", "65504"),
])
def test_a_value_the_compute_dtype_cannot_hold_is_refused_at_resolution_naming_node_argument_and_dtype(
        source, field, dtype, largest):
    """layer_scale(70000.0) in float16 used to build a gamma of inf silently; hardtanh's bounds
    failed on the first call (``value cannot be converted to type c10::Half``). Every plan that
    resolves must build, so the value is refused where the compute dtype is chosen."""
    error = _refused(lambda: _resolved(source, SEQUENCE, dtype=dtype), "E_ARGUMENT", field)
    assert error.location.node == "n0" and dtype in error.message and largest in error.message, error
    assert any(field in remedy for remedy in error.remedies), error
    float32 = _resolved(source, SEQUENCE)  # the same value is fine in float32
    module = build(float32, device="cpu", registry=REGISTRY)
    assert all(torch.isfinite(tensor).all() for tensor in module.state_dict().values())


def test_a_re_signed_float16_plan_holding_a_value_float16_cannot_hold_is_refused_when_restored():
    """A float32 plan's layer_scale(70000.0), re-signed as a float16 plan with valid digests."""
    import json

    from hndl import persist

    record = json.loads(_resolved("layer_scale(70000.0)", SEQUENCE).to_json())
    record["dtype"] = record["input_dtype"] = "float16"
    semantic = persist.digest_of(persist.semantic_record(record))
    body = persist.fields_body(record)
    text = persist.with_digests(body, semantic, persist.sha256_of(persist.with_digests(body, semantic)))
    error = _refused(lambda: hndl.ResolvedPlan.from_json(text.decode("utf-8")), "E_INTEGRITY", "init_value")
    assert error.location.node == "n0" and "float16" in error.message and "65504" in error.message, error


def test_a_re_signed_plan_with_init_value_1e308_is_refused_when_restored():
    """The digests are valid; the saved argument is not (it used to restore, then fail in torch)."""
    import json

    from hndl import persist

    record = json.loads(_resolved("layer_scale(0.5)", SEQUENCE).to_json())
    record["nodes"][0]["args"]["init_value"] = 1e308
    semantic = persist.digest_of(persist.semantic_record(record))
    body = persist.fields_body(record)
    text = persist.with_digests(body, semantic, persist.sha256_of(persist.with_digests(body, semantic)))
    error = _refused(lambda: hndl.ResolvedPlan.from_json(text.decode("utf-8")), "E_INTEGRITY", "init_value")
    assert error.location.node == "n0" and "float32" in error.message, error


@pytest.mark.parametrize("value", [10**5000, -(10**5000), [10**5000], (1, 10**5000)],
                         ids=["10**5000", "-10**5000", "[10**5000]", "(1, 10**5000)"])
@pytest.mark.parametrize("alias, name", [("linear", "out_features"), ("leaky_relu", "negative_slope"),
                                         ("conv", "kernel_size"), ("reshape", "shape")])
def test_a_digit_flood_argument_is_e_argument_not_a_python_value_error(support, alias, name, value):
    """Python cannot even format such an int (its 4,300-digit limit); the message describes it."""
    case = template(alias)
    args = {**_given_args(case.target), name: value}
    outcome = support.untrusted_call(
        lambda: hndl.resolve_callable(capture_with(case, args), input_shape=case.input_shape, output_shape=OUTPUT,
                                      input_dtype=case.input_dtype, registry=REGISTRY),
        what=f"{alias}({name}=<digit flood>)")
    assert outcome.code == "E_ARGUMENT" and len(str(outcome.error)) < 2000, outcome.error
