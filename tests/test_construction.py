"""Initialization and trainability declarations as pure data (§11)."""

from __future__ import annotations

import copy
import inspect
import json
import math
import pickle
import struct

import pytest

from hndl import construction as c
from hndl.construction import (
    SCHEME_NAMES,
    InitScheme,
    canonical_float32,
    check_initialization_record,
    check_trainability_record,
    make_scheme,
    normalize_initialization,
    normalize_trainability,
)
from hndl.errors import HNDLError

F32_0_1 = struct.unpack("<f", struct.pack("<f", 0.1))[0]

DEFAULT_RECORDS = {
    "xavier_uniform": {"kind": "xavier_uniform", "gain": 1.0},
    "xavier_normal": {"kind": "xavier_normal", "gain": 1.0},
    "kaiming_uniform": {
        "kind": "kaiming_uniform",
        "a": 0.0,
        "mode": "fan_in",
        "nonlinearity": "leaky_relu",
    },
    "kaiming_normal": {
        "kind": "kaiming_normal",
        "a": 0.0,
        "mode": "fan_in",
        "nonlinearity": "leaky_relu",
    },
    "truncated_normal": {"kind": "truncated_normal", "mean": 0.0, "std": 1.0, "a": -2.0, "b": 2.0},
    "normal": {"kind": "normal", "mean": 0.0, "std": 1.0},
    "uniform": {"kind": "uniform", "a": 0.0, "b": 1.0},
    "orthogonal": {"kind": "orthogonal", "gain": 1.0},
}


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


def same_float(a, b):
    return struct.pack("<d", a) == struct.pack("<d", b)


# --- schemes ------------------------------------------------------------------------------


def test_scheme_names_are_the_closed_set():
    assert SCHEME_NAMES == tuple(DEFAULT_RECORDS)
    assert set(c.SCHEME_ROUTINES) == set(SCHEME_NAMES)
    assert c.SCHEME_ROUTINES["truncated_normal"] == "trunc_normal_"


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_scheme_defaults_and_record(name):
    fn = getattr(c, name)
    scheme = fn()
    assert isinstance(scheme, InitScheme)
    assert scheme.kind == name
    assert scheme.record() == DEFAULT_RECORDS[name]
    assert list(scheme.record())[0] == "kind"
    # Keyword-only with exactly the table's keywords and defaults.
    params = inspect.signature(fn).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert {k: p.default for k, p in params.items()} == {
        k: v for k, v in DEFAULT_RECORDS[name].items() if k != "kind"
    }
    with pytest.raises(TypeError):
        fn(1.0)
    # make_scheme with no keywords is the same call.
    assert make_scheme(name, {}) == scheme
    assert hash(make_scheme(name, {})) == hash(scheme)


def test_scheme_keywords_are_canonical():
    s = c.xavier_uniform(gain=2)
    assert s.kwargs["gain"] == 2.0 and type(s.kwargs["gain"]) is float
    assert c.normal(std=0.1).kwargs["std"] == F32_0_1
    k = c.kaiming_normal(a=0.2, mode="fan_out", nonlinearity="relu")
    assert k.record() == {
        "kind": "kaiming_normal",
        "a": struct.unpack("<f", struct.pack("<f", 0.2))[0],
        "mode": "fan_out",
        "nonlinearity": "relu",
    }
    for nl in c.NONLINEARITIES:
        assert c.kaiming_uniform(nonlinearity=nl).kwargs["nonlinearity"] == nl


def test_scheme_repr_and_immutability():
    s = c.xavier_uniform(gain=1.0)
    assert repr(s) == "xavier_uniform(gain=1.0)"
    assert repr(c.kaiming_uniform()) == (
        "kaiming_uniform(a=0.0, mode='fan_in', nonlinearity='leaky_relu')"
    )
    with pytest.raises(AttributeError):
        s.kind = "normal"
    with pytest.raises(TypeError):
        s.kwargs["gain"] = 3.0
    record = s.record()
    record["gain"] = 5.0
    assert s.kwargs["gain"] == 1.0


def test_scheme_equality_hash_and_copy():
    assert c.uniform(a=0, b=2) == c.uniform(a=0.0, b=2.0)
    assert c.uniform(a=0.0) != c.uniform(a=-0.0)  # the encodings differ
    assert c.xavier_uniform() != c.xavier_normal()
    assert c.xavier_uniform() != {"kind": "xavier_uniform", "gain": 1.0}
    assert len({c.normal(), c.normal(mean=0), c.normal(std=2)}) == 2
    s = c.truncated_normal(std=0.02)
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s and copy.copy(s) == s


def test_make_scheme_matches_the_python_functions():
    assert make_scheme("xavier_uniform", {"gain": 2}) == c.xavier_uniform(gain=2.0)
    assert (
        make_scheme("kaiming_uniform", {"mode": "fan_out"}).record()
        == c.kaiming_uniform(mode="fan_out").record()
    )


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("glorot", {}),
        ("xavier_uniform_", {}),
        ("xavier_uniform", {"gian": 1.0}),
        ("xavier_uniform", {"generator": None}),
        ("normal", {"a": 0.0}),
        ("xavier_uniform", {"gain": True}),
        ("xavier_uniform", {"gain": "1"}),
        ("xavier_uniform", {"gain": None}),
        ("xavier_uniform", {"gain": float("nan")}),
        ("xavier_uniform", {"gain": float("inf")}),
        ("xavier_uniform", {"gain": 1e39}),
        ("kaiming_uniform", {"mode": "fan_avg"}),
        ("kaiming_uniform", {"mode": 1}),
        ("kaiming_normal", {"nonlinearity": "gelu"}),
        ("kaiming_normal", {"nonlinearity": "ReLU"}),
        ("normal", {"std": -1.0}),
        ("truncated_normal", {"std": 0.0}),
        ("truncated_normal", {"a": 1.0, "b": 1.0}),
        ("truncated_normal", {"a": 2.0, "b": -2.0}),
        ("uniform", {"a": 1.0, "b": 0.0}),
    ],
)
def test_make_scheme_rejections(name, kwargs):
    with raises("E_INITIALIZATION"):
        make_scheme(name, kwargs)


def test_make_scheme_locates_node_and_keyword():
    with raises("E_INITIALIZATION") as info:
        make_scheme("xavier_uniform", {"gain": True}, node="proj")
    assert info.value.location.node == "proj"
    assert info.value.location.field == "xavier_uniform.gain"
    with raises("E_INITIALIZATION") as info:
        make_scheme("xavier_uniform", {"scale": 1.0})
    assert "gain" in info.value.message


def test_scheme_functions_validate_too():
    with raises("E_INITIALIZATION"):
        c.kaiming_uniform(mode="fan_avg")
    with raises("E_INITIALIZATION"):
        c.orthogonal(gain=True)
    assert c.normal(std=0.0).kwargs["std"] == 0.0
    assert c.uniform(a=1.0, b=1.0).record()["b"] == 1.0


# --- float32 constants -------------------------------------------------------------------


def test_canonical_float32_rounding():
    assert canonical_float32(0.1, field="x") == F32_0_1 != 0.1
    assert canonical_float32(1e-50, field="x") == 0.0
    assert same_float(canonical_float32(1e-50, field="x"), 0.0)
    assert same_float(canonical_float32(-1e-50, field="x"), -0.0)
    assert same_float(canonical_float32(-0.0, field="x"), -0.0)
    assert same_float(canonical_float32(0, field="x"), 0.0)
    # A float32 subnormal survives.
    assert 0.0 < canonical_float32(1e-40, field="x") < 1e-38
    assert canonical_float32(3, field="x") == 3.0 and type(canonical_float32(3, field="x")) is float
    assert canonical_float32(2**24 + 1, field="x") == 2.0**24
    flt_max = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
    assert canonical_float32(flt_max, field="x") == flt_max
    assert canonical_float32(-flt_max, field="x") == -flt_max


def test_canonical_float32_rounds_large_ints_once():
    # Halfway between FLT_MAX and 2**128 minus one: correct rounding gives FLT_MAX, while a
    # detour through float64 would round up to the halfway point and then to infinity.
    flt_max_int = (2**24 - 1) << 104
    just_below_tie = flt_max_int + (1 << 103) - 1
    assert canonical_float32(just_below_tie, field="x") == float(flt_max_int)
    with raises("E_INITIALIZATION"):
        canonical_float32(flt_max_int + (1 << 103), field="x")  # tie rounds to even: 2**128
    # Above 2**53: 2**60 + 2**36 + 1 is nearer 2**60 + 2**37 than 2**60 in binary32.
    value = 2**60 + 2**36 + 1
    assert canonical_float32(value, field="x") == float(2**60 + 2**37)
    assert canonical_float32(-value, field="x") == -float(2**60 + 2**37)


@pytest.mark.parametrize(
    "value",
    [1e39, -1e39, 2**128, 10**400, float("nan"), float("inf"), float("-inf"), True, False, None, "1", [1], 1j],
)
def test_canonical_float32_rejections(value):
    with raises("E_INITIALIZATION") as info:
        canonical_float32(value, field="init.weight", node="n0")
    assert info.value.location.field == "init.weight"
    assert info.value.location.node == "n0"


def test_canonical_float32_rejects_int_subclasses():
    import enum

    class Level(enum.IntEnum):
        ONE = 1

    with raises("E_INITIALIZATION"):
        canonical_float32(Level.ONE, field="x")


# --- paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["weight", "bias", "projection.weight", "layers.0.weight", "_private.x1", "0", "a" * 256],
)
def test_valid_paths(path):
    assert normalize_initialization({path: 0})["overrides"] == {path: 0.0}
    assert normalize_trainability({path: True})["overrides"] == {path: True}


@pytest.mark.parametrize(
    "path",
    [
        "",
        ".weight",
        "weight.",
        "a..b",
        "weight[0]",
        "layers[0].weight",
        "*.weight",
        "layers.*",
        "a b",
        " weight",
        "weight\n",
        "wéight",
        "a-b",
        "1a",
        "a.1b",
        "a" * 257,
        1,
        None,
        ("weight",),
    ],
)
def test_invalid_paths(path):
    with raises("E_INITIALIZATION"):
        normalize_initialization({path: 0})
    with raises("E_TRAINABILITY"):
        normalize_trainability({path: True})


def test_entry_bound():
    ok_init = {f"p{i}": 0 for i in range(256)}
    ok_train = {f"p{i}": True for i in range(256)}
    assert len(normalize_initialization(ok_init)["overrides"]) == 256
    assert len(normalize_trainability(ok_train)["overrides"]) == 256
    with raises("E_INITIALIZATION"):
        normalize_initialization({**ok_init, "p256": 0})
    with raises("E_TRAINABILITY"):
        normalize_trainability({**ok_train, "p256": True})


# --- initialization records ---------------------------------------------------------------


def test_initialization_default_and_constants_are_v1():
    assert normalize_initialization({}) == {"kind": "torch_default@1", "overrides": {}}
    record = normalize_initialization({"weight": 0, "bias": 0.1}, node="n1")
    assert record == {"kind": "torch_default@1", "overrides": {"bias": F32_0_1, "weight": 0.0}}
    assert list(record["overrides"]) == ["bias", "weight"]
    assert type(record["overrides"]["weight"]) is float


def test_any_scheme_selects_v2():
    record = normalize_initialization({"weight": c.xavier_uniform(gain=1.0), "bias": 0})
    assert record == {
        "kind": "torch_default@2",
        "overrides": {"bias": 0.0, "weight": {"kind": "xavier_uniform", "gain": 1.0}},
    }
    only = normalize_initialization({"w": c.orthogonal()})
    assert only["kind"] == "torch_default@2"


def test_initialization_records_are_sorted_and_order_independent():
    a = normalize_initialization({"z": 1, "a": c.normal(), "m.0": -0.0})
    b = normalize_initialization({"m.0": -0.0, "a": c.normal(), "z": 1})
    assert list(a["overrides"]) == ["a", "m.0", "z"]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(a["overrides"]["m.0"]) == "-0.0"


@pytest.mark.parametrize(
    "init",
    [
        None,
        c.xavier_uniform(),
        [("weight", 0)],
        0,
        "weight",
        {"weight": True},
        {"weight": None},
        {"weight": "0"},
        {"weight": float("nan")},
        {"weight": 1e39},
        {"weight": [c.xavier_uniform()]},
        {"weight": {"kind": "xavier_uniform", "gain": 1.0}},
        {"weight": c.xavier_uniform},
    ],
)
def test_initialization_rejections(init):
    with raises("E_INITIALIZATION") as info:
        normalize_initialization(init, node="proj")
    assert info.value.location.node == "proj"


def test_explicit_none_message():
    with raises("E_INITIALIZATION") as info:
        normalize_initialization(None)
    assert "None" in info.value.message
    with raises("E_TRAINABILITY") as info:
        normalize_trainability(None)
    assert "None" in info.value.message


# --- trainability records -----------------------------------------------------------------


def test_trainability_records():
    assert normalize_trainability(True) == {"default": True, "overrides": {}}
    assert normalize_trainability(False) == {"default": False, "overrides": {}}
    assert normalize_trainability({}) == {"default": None, "overrides": {}}
    record = normalize_trainability({"weight": True, "bias": False})
    assert record == {"default": None, "overrides": {"bias": False, "weight": True}}
    assert list(record["overrides"]) == ["bias", "weight"]


@pytest.mark.parametrize(
    "trainable", [None, 0, 1, "yes", [True], {"bias": 0}, {"bias": None}, {"bias": "False"}]
)
def test_trainability_rejections(trainable):
    with raises("E_TRAINABILITY"):
        normalize_trainability(trainable, node="n")


# --- stored records -----------------------------------------------------------------------


def test_records_round_trip_through_json():
    init = normalize_initialization(
        {
            "weight": c.kaiming_uniform(a=0.1, nonlinearity="relu"),
            "bias": 0.1,
            "layers.0.weight": c.truncated_normal(std=0.02),
            "neg": -0.0,
        }
    )
    train = normalize_trainability({"bias": False})
    for record, check in ((init, check_initialization_record), (train, check_trainability_record)):
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        restored = check(json.loads(text))
        assert restored == record
        assert json.dumps(restored, sort_keys=True, separators=(",", ":")) == text
    assert check_initialization_record({"kind": "torch_default@1", "overrides": {}}) == {
        "kind": "torch_default@1",
        "overrides": {},
    }
    assert check_trainability_record({"default": False, "overrides": {}})["default"] is False


def test_v2_requires_a_scheme_and_v1_rejects_one():
    with raises("E_INITIALIZATION") as info:
        check_initialization_record({"kind": "torch_default@2", "overrides": {"w": 0.0}})
    assert "at least one scheme" in info.value.message
    with raises("E_INITIALIZATION"):
        check_initialization_record({"kind": "torch_default@2", "overrides": {}})
    with raises("E_INITIALIZATION") as info:
        check_initialization_record(
            {"kind": "torch_default@1", "overrides": {"w": {"kind": "normal", "mean": 0.0, "std": 1.0}}}
        )
    assert "torch_default@1" in info.value.message


@pytest.mark.parametrize(
    "record",
    [
        None,
        [],
        {"kind": "torch_default@1"},
        {"overrides": {}},
        {"kind": "torch_default@1", "overrides": {}, "extra": 1},
        {"kind": "torch_default@3", "overrides": {}},
        {"kind": None, "overrides": {}},
        {"kind": "torch_default@1", "overrides": []},
        {"kind": "torch_default@1", "overrides": {"w": 0.1}},  # not a float32 value
        {"kind": "torch_default@1", "overrides": {"w": 0}},  # canonical constants are floats
        {"kind": "torch_default@1", "overrides": {"w": True}},
        {"kind": "torch_default@1", "overrides": {"w": float("nan")}},
        {"kind": "torch_default@1", "overrides": {"w": 1e39}},
        {"kind": "torch_default@1", "overrides": {"w[0]": 0.0}},
        {"kind": "torch_default@1", "overrides": {f"p{i}": 0.0 for i in range(257)}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "glorot", "gain": 1.0}}},
        {"kind": "torch_default@2", "overrides": {"w": {"gain": 1.0}}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "xavier_uniform"}}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "xavier_uniform", "gain": 1.0, "x": 1.0}}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "xavier_uniform", "gain": 1}}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "xavier_uniform", "gain": 0.1}}},
        {"kind": "torch_default@2", "overrides": {"w": {"kind": "uniform", "a": 1.0, "b": 0.0}}},
        {
            "kind": "torch_default@2",
            "overrides": {"w": {"kind": "kaiming_normal", "a": 0.0, "mode": "fan_avg", "nonlinearity": "relu"}},
        },
    ],
)
def test_malformed_initialization_records(record):
    with raises("E_INITIALIZATION"):
        check_initialization_record(record, node="n")


@pytest.mark.parametrize(
    "record",
    [
        None,
        {"default": None},
        {"overrides": {}},
        {"default": None, "overrides": {}, "x": 1},
        {"default": "yes", "overrides": {}},
        {"default": 1, "overrides": {}},
        {"default": None, "overrides": []},
        {"default": None, "overrides": {"w": 1}},
        {"default": None, "overrides": {"w": None}},
        {"default": None, "overrides": {"*": True}},
        {"default": True, "overrides": {"w": False}},  # never combined by the author API
        {"default": None, "overrides": {f"p{i}": True for i in range(257)}},
    ],
)
def test_malformed_trainability_records(record):
    with raises("E_TRAINABILITY"):
        check_trainability_record(record, node="n")


def test_scheme_from_record_round_trip():
    for name in SCHEME_NAMES:
        scheme = getattr(c, name)()
        assert c.scheme_from_record(scheme.record()) == scheme


def test_construction_imports_no_torch():
    import ast

    tree = ast.parse(inspect.getsource(c))
    imported = set()
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
            imported.add(stmt.module.split(".")[0])
    assert "torch" not in imported


# --- scheme keywords every compute dtype can apply (issue 15, item 5) ----------------------------


@pytest.mark.parametrize("name", ["xavier_uniform", "xavier_normal"])
def test_a_negative_xavier_gain_is_refused_where_it_is_written(name):
    with raises("E_INITIALIZATION") as info:
        getattr(c, name)(gain=-1.0)
    assert info.value.location.field == f"{name}.gain"
    assert "gain >= 0" in info.value.message and "non-negative gain" in info.value.remedies[0]
    with raises("E_INITIALIZATION") as info:
        make_scheme(name, {"gain": -1e-30}, node="proj")
    assert info.value.location.node == "proj"
    assert getattr(c, name)(gain=0.0).kwargs["gain"] == 0.0
    assert c.orthogonal(gain=-1.0).kwargs["gain"] == -1.0  # a sign flip is a valid orthogonal matrix


@pytest.mark.parametrize("kwargs", [{"mean": 3e38, "std": 3e38}, {"std": 3e38}, {"mean": -3e38, "std": 1e37}])
def test_a_normal_scheme_that_cannot_stay_finite_in_float32_is_refused(kwargs):
    with raises("E_INITIALIZATION") as info:
        c.normal(**kwargs)
    assert info.value.location.field == "normal.std"
    assert f"|mean| + {c.NORMAL_REACH:g} * std" in info.value.message
    assert "largest float32 value" in info.value.message
    c.normal(mean=3e38, std=0.0)
    c.normal(std=3e38 / c.NORMAL_REACH)


def test_a_uniform_range_wider_than_float32_is_refused():
    with raises("E_INITIALIZATION") as info:
        c.uniform(a=-3e38, b=3e38)
    assert "b - a" in info.value.remedies[0]
    c.uniform(a=-1.7e38, b=1.7e38)


@pytest.mark.parametrize(
    "record",
    [
        {"kind": "xavier_uniform", "gain": -1.0},
        {"kind": "xavier_normal", "gain": -2.0},
        {"kind": "normal", "mean": 3.0000000054977558e38, "std": 3.0000000054977558e38},
    ],
)
def test_a_saved_record_no_build_could_apply_fails_on_load(record):
    with raises("E_INITIALIZATION"):
        check_initialization_record({"kind": "torch_default@2", "overrides": {"weight": record}})


def test_a_negative_gain_fails_at_resolution_in_both_frontends():
    import hndl
    from hndl import ops

    contract = {"input_shape": ("B", 8), "output_shape": ("B", 4)}
    with raises("E_INITIALIZATION") as info:
        hndl.resolve('linear(init={"weight": xavier_uniform(gain=-1.0)})', **contract)
    assert (info.value.location.line, info.value.location.column) == (1, 24)

    def fn(x):
        ops.linear(init={"weight": hndl.xavier_normal(gain=-1.0)})

    with raises("E_INITIALIZATION"):
        hndl.resolve_callable(fn, **contract)
