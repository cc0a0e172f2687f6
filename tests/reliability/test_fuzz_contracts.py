"""Property-based fuzzing of tensor contracts and limits (issue 10, item 1; §3, §5, §13).

Contracts and limits usually come from a host's own configuration files, so they are fuzzed
with the values such files produce (JSON-like scalars, lists, tuples, mappings, huge and
non-positive numbers, odd strings, ``torch.Size``) against all three resolution entry points:
configuration text, a trusted callable and the contract parser itself.

Invariant (``conftest.untrusted_call``): a plan or HNDLError with a catalog code; never
another exception, never a hang, never exec/compile/import/open in the host. A contract that
is accepted must come back in the plan exactly as validated (batch symbol first, positive
integer extents, at most ``max_dimension``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl.contracts import parse_contracts
from hndl.limits import DEFAULT_LIMITS

NORMAL = settings.get_profile("hndl-normal")
LONG = settings.get_profile("hndl-fuzz")

REGISTRY = hndl.Registry.from_packs("basic", "vision", "transformer")
ALIASES = REGISTRY.aliases()

#: Digit floods (issue 15): ints and digit strings longer than Python's 4,300-digit str() limit,
#: the same values `hndl resolve --input-shape B,<5000 digits>` used to turn into a traceback.
FLOODS = [10**4300, 10**5000, -(10**5000), "9" * 5000, "1" + "0" * 4300]
EXTENTS = [1, 2, 3, 8, 16, 128, 2**31 - 1, 2**31, 2**63, 10**30, 0, -1, -(2**63), True, False, 1.0, 8.0, float("nan"),
           float("inf"), "8", "B", None, (), [], {}, *FLOODS]
SYMBOLS = ["B", "N", "batch", "b", "_", "B1", "2*B", "1*B", "B*2", "x", "", " B", "B ", "é", "None", "class", 1, None,
           b"B", ("B",)]
NAMES = ["x", "y", "output", "image", "label", "a_1", "Image", "1x", "", "linear", "relu", "x-y", "ü", "_x",
         "a" * 40, 0, None, ("x",)]
DTYPES = ["float32", "float16", "bfloat16", "int64", "int32", "bool", "float64", "any", "compute", "", None, 32,
          torch.float32, "FLOAT32", ["float32"]]


def shapes():
    entry = st.one_of(st.sampled_from(EXTENTS), st.integers(min_value=-5, max_value=2**40))
    plain = st.tuples(st.sampled_from(SYMBOLS), st.lists(entry, min_size=0, max_size=5)).map(
        lambda parts: (parts[0], *parts[1]))
    valid = st.tuples(st.just("B"), st.lists(st.integers(1, 64), min_size=1, max_size=3)).map(
        lambda parts: (parts[0], *parts[1]))
    return st.one_of(
        valid, valid, plain,
        plain.map(list),
        valid.map(lambda shape: torch.Size([1, *shape[1:]])),
        st.sampled_from([None, "B, 8", ("B",), ("B", 8, 8, 8, 8), 8, b"B8", {"B": 8}, ("B", (8,)), ("B", [8])]),
    )


def contracts():
    named = st.dictionaries(st.sampled_from(NAMES), shapes(), min_size=0, max_size=4)
    many = st.integers(30, 40).map(lambda count: {f"p{index}": ("B", 4) for index in range(count)})
    return st.one_of(shapes(), shapes(), named, many)


def limits():
    keys = st.one_of(st.sampled_from(sorted(DEFAULT_LIMITS)), st.sampled_from(["max_depth", "", "max_nodez"]))
    values = st.one_of(st.integers(min_value=-2, max_value=2**70),
                       st.sampled_from([0, 1, True, None, 1.5, "10", 10**5000, -(10**5000), "9" * 5000]))
    return st.one_of(st.none(), st.none(), st.dictionaries(keys, values, max_size=3),
                     st.sampled_from([[("max_nodes", 1)], 10, "max_nodes=1", {}]))


def input_dtypes():
    return st.one_of(st.none(), st.sampled_from(DTYPES),
                     st.dictionaries(st.sampled_from(NAMES), st.sampled_from(DTYPES), max_size=3))


SOURCES = ["", "linear()", "relu()", "linear(8)\nrelu()\nlinear()", "flatten()\nlinear()", "reshape()",
           "embedding(16)\nlinear()"]


def _callable(source):
    def fn(*args, **kwargs):
        for line in source.splitlines():
            getattr(REGISTRY.ops, line.split("(")[0])()
    return fn


def brief(value) -> str:
    """A short repr for failure messages; a digit flood cannot even be formatted by Python."""
    try:
        return repr(value)[:300]
    except ValueError:
        return f"<{type(value).__name__} holding an integer beyond Python's str() digit limit>"


def check_accepted(plan, input_shape, output_shape, checked_limits):
    for port in (*plan.inputs, *plan.outputs):
        shape = port["shape"]
        assert isinstance(shape[0], str) and shape[0].isidentifier()
        assert all(type(extent) is int and 0 < extent <= checked_limits["max_dimension"] for extent in shape[1:])


def check_contract(support, entry, source, input_shape, output_shape, dtype, input_dtype, limits_value):
    support.ensure_worker(REGISTRY)
    keywords = dict(input_shape=input_shape, output_shape=output_shape, input_dtype=input_dtype,
                    registry=REGISTRY, limits=limits_value)
    if dtype is not None:
        keywords["dtype"] = dtype
    if entry == "resolve":
        call = lambda: hndl.resolve(source, **keywords)  # noqa: E731
    elif entry == "callable":
        call = lambda: hndl.resolve_callable(_callable(source), **keywords)  # noqa: E731
    else:
        keywords.pop("registry"), keywords.pop("limits")
        call = lambda: parse_contracts(**keywords, aliases=ALIASES)  # noqa: E731
    outcome = support.untrusted_call(call, what=f"{entry}({source!r}, {brief(keywords)})")
    if outcome.error is None and entry != "parse":
        from hndl.limits import validate_limits

        check_accepted(outcome.value, input_shape, output_shape, validate_limits(limits_value))


CASE = dict(
    entry=st.sampled_from(["resolve", "callable", "parse"]),
    source=st.sampled_from(SOURCES),
    input_shape=contracts(),
    output_shape=contracts(),
    dtype=st.one_of(st.none(), st.none(), st.sampled_from(DTYPES)),
    input_dtype=input_dtypes(),
    limits_value=limits(),
)


@NORMAL
@given(**CASE)
def test_generated_contracts_resolve_or_fail_with_a_code(warm, support, entry, source, input_shape, output_shape,
                                                         dtype, input_dtype, limits_value):
    check_contract(support, entry, source, input_shape, output_shape, dtype, input_dtype, limits_value)


@pytest.mark.fuzz
@LONG
@given(**CASE)
def test_fuzz_generated_contracts(warm, support, entry, source, input_shape, output_shape, dtype, input_dtype,
                                  limits_value):
    check_contract(support, entry, source, input_shape, output_shape, dtype, input_dtype, limits_value)


@pytest.mark.parametrize("flood", [10**5000, -(10**5000), "9" * 5000], ids=["10**5000", "-10**5000", "'9'*5000"])
@pytest.mark.parametrize("where", ["input", "output", "named input", "limits"])
def test_digit_floods_in_shapes_and_limits_fail_with_a_code(warm, support, where, flood):
    """Every entry point turns a digit flood into a short HNDLError: formatting such an int for
    a message raises ValueError in Python itself, so no diagnostic may print it whole."""
    keywords = dict(input_shape=("B", 8), output_shape=("B", 8), registry=REGISTRY)
    if where == "input":
        keywords["input_shape"] = ("B", flood)
    elif where == "output":
        keywords["output_shape"] = ("B", 4, flood)
    elif where == "named input":
        keywords["input_shape"] = {"x": ("B", 8), "y": ("B", flood)}
    else:
        keywords["limits"] = {"max_dimension": flood}
    for call in (lambda: hndl.resolve("linear(8)", **keywords),
                 lambda: hndl.resolve_callable(_callable("linear(8)"), **keywords)):
        support.ensure_worker(REGISTRY)
        outcome = support.untrusted_call(call, what=f"{where} flood")
        if outcome.error is not None:
            assert outcome.code in ("E_SCHEMA", "E_RESOURCE", "E_BINDING"), outcome.error
            assert len(str(outcome.error)) < 2000, str(outcome.error)[:300]
        else:
            assert where == "limits" and type(flood) is int and flood > 0  # a huge limit is a valid limit


def test_the_contract_generator_reaches_successful_resolutions(warm):
    """Guard the generator: valid contracts are part of what it draws."""
    plan = hndl.resolve("linear()", input_shape=("B", 8), output_shape=["B", 4], registry=REGISTRY)
    assert plan.input_shape == ("B", 8) and plan.output_shape == ("B", 4)
