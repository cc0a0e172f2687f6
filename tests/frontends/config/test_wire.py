"""The strict JSON codec between the parser worker and the host (§7 "Loading limits and trust
boundaries": bound the worker's returned data and diagnostics, and validate their format
before accepting them).

Every IR form survives encode -> JSON text -> decode with its exact Python types (tuple vs
list, bool vs int, -0.0, unicode), and the decoder rejects anything the worker would not have
produced itself with E_RESOURCE "malformed", never with a Python exception.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest

from hndl.errors import CODES, HNDLError
from hndl.frontends.config import wire
from hndl.frontends.config.grammar import (
    Assign,
    Call,
    Evaluate,
    Literal,
    Name,
    Pack,
    Pos,
    Program,
    SchemeCall,
    parse_config,
)
from hndl.frontends.config.source import load_text
from hndl.frontends.config.wire import decode_error, decode_program, encode_error, encode_program

ALIASES = ("add", "adaptive_norm", "concat", "conv", "linear", "relu", "reshape", "split")

RICH = '''
# every statement form, argument form and literal type python_config@1 has
z1, z2 = split(64, name="partition")
[p, q] = split(z1, 32)
h = linear(z1, 128, name="content", init={"weight": xavier_uniform(gain=1.0), "bias": 0.0})
pair = (h, z2)
listed = [h, z2]
a, b = pair
same = a
relu(a)
out = add(a, relu(linear(b, out_features=128)), name="combined")
conv(out, 8, kernel_size=(3, 3), padding=[1, 1], note={"k": -0.0, "e": 1e-05, "big": -123456789012345678})
linear(x, 4, flags=(True, False, None), text="ünïcødé ✓ 𝔘", empty=(), nested=[(1, [2.5, {"a": ()}])])
linear(x, 4, init={"weight": normal(mean=-0.5, std=2e-3), "bias": uniform()}, trainable={"bias": False})
linear(x, +7, scale=-1.5e-300, tiny=5e-324, huge=1.7976931348623157e308)
'''


def _program(text: str = RICH) -> Program:
    return parse_config(load_text(text), aliases=ALIASES, inputs=("x",))


def _over_json(data):
    """The real channel: JSON text, as the worker writes it and the host reads it."""
    return json.loads(json.dumps(data, ensure_ascii=False))


def _typed(value):
    """A comparison key that keeps what == forgets: bool vs int, tuple vs list, -0.0 vs 0.0."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,) + tuple(
            _typed(getattr(value, field.name)) for field in dataclasses.fields(value) if field.compare
        )
    if isinstance(value, float):
        return ("float", repr(value), math.copysign(1.0, value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_typed(item) for item in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((key, _typed(item)) for key, item in value.items())
    return (type(value).__name__, value)


def _roundtrip(program: Program) -> Program:
    return decode_program(_over_json(encode_program(program)), program.source)


# ---------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------


def test_every_ir_form_of_a_parsed_program_round_trips_exactly():
    program = _program()
    back = _roundtrip(program)
    assert back == program
    assert _typed(back) == _typed(program)
    assert back.source is program.source  # the host keeps its own source, never the worker's


def test_the_rich_program_really_contains_every_form():
    """Guard the round-trip test itself: it must exercise each IR node and literal type."""
    seen: set = set()

    def walk(value):
        seen.add(type(value).__name__)
        if isinstance(value, float) and value == 0 and math.copysign(1, value) < 0:
            seen.add("-0.0")
        if dataclasses.is_dataclass(value):
            for field in dataclasses.fields(value):
                if field.name != "source":
                    walk(getattr(value, field.name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    walk(_program())
    assert {"Assign", "Evaluate", "Name", "Pack", "Call", "Literal", "SchemeCall", "Pos"} <= seen
    assert {"int", "float", "bool", "NoneType", "str", "tuple", "list", "dict", "-0.0"} <= seen


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        10**19,
        True,
        False,
        None,
        0.0,
        -0.0,
        1e-05,
        1e-5,
        -2.5,
        5e-324,
        1.7976931348623157e308,
        "",
        "ünïcødé ✓ 𝔘 \n\t\"'\\",
        (),
        [],
        {},
        (1, 2),
        [1, 2],
        ((1,), [2]),
        [(), []],
        {"a": (1, [2, {"b": None}]), "": "x"},
        (True, 1, 1.0),
    ],
    ids=repr,
)
def test_literal_values_keep_their_exact_python_types(value):
    pos = Pos(1, 8)
    call = Call(alias="linear", args=(), kwargs=(("value", Literal(value=value, pos=pos)),), pos=Pos(1, 1))
    program = Program(statements=(Evaluate(call=call, pos=Pos(1, 1)),), source=load_text("linear(value=...)"))
    back = _roundtrip(program)
    assert _typed(back) == _typed(program)
    decoded = back.statements[0].call.kwargs[0][1].value
    assert type(decoded) is type(value)
    if isinstance(value, float):
        assert repr(decoded) == repr(value)


def test_hand_built_ir_round_trips_names_packs_nested_calls_and_schemes():
    pos = Pos(1, 1)
    scheme = SchemeCall(scheme="kaiming_uniform", kwargs=(("a", 0.5), ("mode", "fan_in")), pos=Pos(2, 3))
    inner = Call(alias="relu", args=(Name("x", pos),), kwargs=(), pos=Pos(1, 2))
    outer = Call(
        alias="linear",
        args=(inner, Literal(value=16, pos=pos)),
        kwargs=(("init", Literal(value={"weight": scheme, "bias": 0.0}, pos=pos)), ("name", Literal("n", pos))),
        pos=pos,
    )
    program = Program(
        statements=(
            Assign(targets=("h",), unpack=False, value=outer, pos=pos),
            Assign(targets=("t",), unpack=False, value=Pack(items=(Name("h", pos), Name("x", pos)), pos=pos), pos=pos),
            Assign(targets=("a", "b"), unpack=True, value=Name("t", pos), pos=Pos(2, 1)),
            Evaluate(call=Call(alias="add", args=(Name("a", pos), Name("b", pos)), kwargs=(), pos=pos), pos=pos),
        ),
        source=load_text("line one\nline two\n"),
    )
    back = _roundtrip(program)
    assert back == program and _typed(back) == _typed(program)


def test_encoding_is_plain_json_data_without_python_objects():
    data = encode_program(_program())
    assert json.loads(json.dumps(data)) == data  # nothing that JSON would alter or refuse


def test_decode_error_round_trips_every_field_of_an_hndl_error():
    error = HNDLError(
        "E_NAME",
        "undefined or forward reference 'ünï'",
        line=3,
        column=7,
        node="n4",
        field="x",
        file="/tmp/ignored-by-the-worker.py",
        chain=("fact one", "fact two"),
        remedies=("first remedy", "second remedy"),
    )
    back = decode_error(_over_json(encode_error(error)))
    assert (back.code, back.message, back.chain, back.remedies) == (error.code, error.message, error.chain, error.remedies)
    assert (back.location.line, back.location.column, back.location.node, back.location.field) == (3, 7, "n4", "x")
    # The worker never sees a path: the host re-attaches the one it read.
    assert back.location.file is None
    assert decode_error(_over_json(encode_error(error)), file="/cfg/model.py").location.file == "/cfg/model.py"


def test_decode_error_accepts_every_catalog_code_and_absent_positions():
    for code in CODES:
        back = decode_error(_over_json(encode_error(HNDLError(code, "m"))))
        assert back.code == code
        assert back.location.line is None and back.location.column is None


# ---------------------------------------------------------------------------------------
# Rejections: anything else is a malformed reply (E_RESOURCE), never a Python exception
# ---------------------------------------------------------------------------------------

SMALL = "h = linear(x, 4, name=\"h\", init={\"weight\": xavier_uniform(gain=1.0)})\nout = add(h, relu(h))\npair = (h, x)\n"


def _encoded() -> list:
    return _over_json(encode_program(_program(SMALL)))


def _assert_malformed(data, source_text: str = SMALL):
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(source_text))
    assert caught.value.code == "E_RESOURCE"
    assert "malformed" in caught.value.message


class _Whole:
    """A rejection case that replaces the whole reply instead of editing it in place."""

    def __init__(self, make):
        self.make = make


def _edit(change):
    data = _encoded()
    if isinstance(change, _Whole):
        return change.make(data)
    change(data)
    return data


def _call_h(data):
    return data[0]["value"]  # the linear(...) call of statement 1


def _literal_4(data):
    return _call_h(data)["args"][1]  # the literal 4


def _init(data):
    return _call_h(data)["kwargs"][1][1]["value"]  # {"dict": [["weight", {scheme}]]}


def test_the_fixture_program_decodes_before_any_edit():
    assert decode_program(_encoded(), load_text(SMALL)) == _program(SMALL)


REJECTED = {
    # shapes of the whole reply
    "program not a list": _Whole(lambda d: {"statements": d}),
    "statement not a dict": _Whole(lambda d: [["assign"]]),
    "statement is None": _Whole(lambda d: [None]),
    # unknown kinds
    "unknown statement kind": lambda d: d[0].update(k="import"),
    "unknown expression kind": lambda d: _literal_4(d).update(k="exec"),
    "kind not a string": lambda d: d[0].update(k=1),
    "kind missing": lambda d: d[0].pop("k"),
    # missing and extra fields
    "missing statement field": lambda d: d[0].pop("pos"),
    "extra statement field": lambda d: d[0].update(code="print(1)"),
    "missing call field": lambda d: _call_h(d).pop("kwargs"),
    "extra call field": lambda d: _call_h(d).update(func="eval"),
    "extra name field": lambda d: d[1]["value"]["args"][0].update(attr="__class__"),
    "extra literal wrapper key": lambda d: _literal_4(d).update(value={"float": "1.0", "x": 1}),
    # wrong types
    "unpack not a bool": lambda d: d[0].update(unpack=0),
    "targets not a list": lambda d: d[0].update(targets="h"),
    "args not a list": lambda d: _call_h(d).update(args={"0": 1}),
    "kwargs pair of three": lambda d: _call_h(d)["kwargs"].append(["a", _literal_4(d), 1]),
    "kwargs pair as dict": lambda d: _call_h(d).update(kwargs=[{"name": 1}]),
    "alias not a string": lambda d: _call_h(d).update(alias=["linear"]),
    "literal value is an object": lambda d: _literal_4(d).update(value={"__class__": "os"}),
    "literal value is a set-like tag": lambda d: _literal_4(d).update(value={"set": [1]}),
    "float not a string": lambda d: _literal_4(d).update(value={"float": 1.5}),
    "float not a number": lambda d: _literal_4(d).update(value={"float": "one"}),
    "float not canonical (underscores)": lambda d: _literal_4(d).update(value={"float": "1_0.0"}),
    "float not canonical (spaces)": lambda d: _literal_4(d).update(value={"float": " 1.0"}),
    "tuple tag holding a dict": lambda d: _literal_4(d).update(value={"tuple": {"a": 1}}),
    "integer beyond the literal bound": lambda d: _literal_4(d).update(value=10**25),
    "string beyond the literal bound": lambda d: _literal_4(d).update(value="a" * 20000),
    "string with a lone surrogate": lambda d: _literal_4(d).update(value="\ud800"),
    # non-finite floats
    "nan": lambda d: _literal_4(d).update(value={"float": "nan"}),
    "inf": lambda d: _literal_4(d).update(value={"float": "inf"}),
    "-inf": lambda d: _literal_4(d).update(value={"float": "-inf"}),
    "overflow to inf": lambda d: _literal_4(d).update(value={"float": "1e400"}),
    # names and aliases
    "alias not an identifier": lambda d: _call_h(d).update(alias="os.system"),
    "alias is a keyword": lambda d: _call_h(d).update(alias="import"),
    "alias with a space": lambda d: _call_h(d).update(alias="linear "),
    "name not an identifier": lambda d: d[1]["value"]["args"].__setitem__(0, {"k": "name", "name": "a.b", "pos": [2, 11]}),
    "name is a dunder": lambda d: d[1]["value"]["args"][0].update(name="__builtins__"),
    "target is a dunder": lambda d: d[0].update(targets=["__class__"]),
    "target not an identifier": lambda d: d[0].update(targets=["1h"]),
    "keyword name not an identifier": lambda d: _call_h(d)["kwargs"][0].__setitem__(0, "na-me"),
    "keyword name is a keyword": lambda d: _call_h(d)["kwargs"][0].__setitem__(0, "lambda"),
    "repeated keyword": lambda d: _call_h(d)["kwargs"].append(copy.deepcopy(_call_h(d)["kwargs"][0])),
    # statement structure
    "no targets": lambda d: d[0].update(targets=[]),
    "two targets without unpacking": lambda d: d[0].update(targets=["a", "b"]),
    "repeated unpacking target": lambda d: d[0].update(targets=["a", "a"], unpack=True),
    "literal assignment value": lambda d: d[0].update(value={"k": "literal", "value": 4, "pos": [1, 5]}),
    "expression statement that is not a call": lambda d: d.append({"k": "eval", "call": {"k": "name", "name": "x", "pos": [1, 1]}, "pos": [1, 1]}),
    "pack inside a call": lambda d: _call_h(d)["args"].append(copy.deepcopy(d[2]["value"])),
    "pack holding a call": lambda d: d[2]["value"]["items"].append(copy.deepcopy(_call_h(d))),
    "empty pack": lambda d: d[2]["value"].update(items=[]),
    # scheme calls only as direct values of an init mapping
    "scheme outside init": lambda d: _literal_4(d).update(value={"scheme": "normal", "kwargs": [], "pos": [1, 1]}),
    "scheme nested inside an init value": lambda d: _init(d).update(dict=[["weight", {"list": [_init(d)["dict"][0][1]]}]]),
    "scheme under a non-init keyword": lambda d: _call_h(d)["kwargs"][1].__setitem__(0, "other"),
    "unknown scheme": lambda d: _init(d)["dict"][0][1].update(scheme="system"),
    "scheme with positional-style kwargs": lambda d: _init(d)["dict"][0][1].update(kwargs=[[0, 1]]),
    "scheme with an extra field": lambda d: _init(d)["dict"][0][1].update(extra=1),
    # dict keys
    "duplicate dict keys": lambda d: _init(d).update(dict=[["bias", 0], ["bias", 1]]),
    "non-string dict key": lambda d: _init(d).update(dict=[[1, 0]]),
    "dict entry not a pair": lambda d: _init(d).update(dict=[["bias"]]),
    # positions
    "position not a list": lambda d: d[0].update(pos={"line": 1}),
    "position of one number": lambda d: d[0].update(pos=[1]),
    "position of three numbers": lambda d: d[0].update(pos=[1, 1, 1]),
    "position as strings": lambda d: d[0].update(pos=["1", "1"]),
    "position as floats": lambda d: d[0].update(pos=[1.0, 1]),
    "position as booleans": lambda d: d[0].update(pos=[True, True]),
    "line zero": lambda d: d[0].update(pos=[0, 1]),
    "column zero": lambda d: _literal_4(d).update(pos=[1, 0]),
    "negative column": lambda d: _literal_4(d).update(pos=[1, -3]),
    "line past the end of the source": lambda d: _literal_4(d).update(pos=[99, 1]),
    "scheme position past the end": lambda d: _init(d)["dict"][0][1].update(pos=[99, 1]),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_decode_program_rejects_anything_the_worker_would_not_produce(name):
    _assert_malformed(_edit(REJECTED[name]))


def _nested_call(depth: int) -> dict:
    node = {"k": "name", "name": "x", "pos": [1, 1]}
    for _ in range(depth):
        node = {"k": "call", "alias": "relu", "args": [node], "kwargs": [], "pos": [1, 1]}
    return node


def _nested_literal(depth: int):
    value = 0
    for _ in range(depth):
        value = {"list": [value]}
    return value


def test_decode_rejects_too_deep_nesting_of_calls_and_of_literals():
    ok = [{"k": "eval", "call": _nested_call(50), "pos": [1, 1]}]
    assert len(decode_program(ok, load_text("relu()")).statements) == 1
    _assert_malformed([{"k": "eval", "call": _nested_call(wire.MAX_DEPTH + 5), "pos": [1, 1]}], "relu()")
    deep = {"k": "literal", "value": _nested_literal(wire.MAX_DEPTH + 5), "pos": [1, 1]}
    _assert_malformed([{"k": "eval", "call": {"k": "call", "alias": "relu", "args": [deep], "kwargs": [],
                                              "pos": [1, 1]}, "pos": [1, 1]}], "relu()")


def _error_record() -> dict:
    return _over_json(encode_error(HNDLError("E_SYNTAX", "bad", line=2, column=5, remedies=("fix it",))))


ERROR_REJECTED = {
    "unknown code": lambda r: r.update(code="E_PWNED"),
    "code not a string": lambda r: r.update(code=["E_SYNTAX"]),
    "missing field": lambda r: r.pop("chain"),
    "extra field": lambda r: r.update(traceback="..."),
    "message not a string": lambda r: r.update(message=None),
    "line a string": lambda r: r.update(line="2"),
    "line a bool": lambda r: r.update(line=True),
    "line zero": lambda r: r.update(line=0),
    "negative column": lambda r: r.update(column=-1),
    "node not a string": lambda r: r.update(node=3),
    "chain not a list": lambda r: r.update(chain="fact"),
    "chain of non-strings": lambda r: r.update(chain=[1]),
    "remedies not a list": lambda r: r.update(remedies="fix"),
    "no remedies": lambda r: r.update(remedies=[]),
}


@pytest.mark.parametrize("name", sorted(ERROR_REJECTED))
def test_decode_error_rejects_malformed_error_records(name):
    record = _error_record()
    assert decode_error(record).code == "E_SYNTAX"
    ERROR_REJECTED[name](record)
    with pytest.raises(HNDLError) as caught:
        decode_error(record)
    assert caught.value.code == "E_RESOURCE" and "malformed" in caught.value.message


@pytest.mark.parametrize("record", [None, [], "E_SYNTAX", 7, {"code": "E_SYNTAX"}])
def test_decode_error_rejects_records_that_are_not_error_objects(record):
    with pytest.raises(HNDLError) as caught:
        decode_error(record)
    assert caught.value.code == "E_RESOURCE" and "malformed" in caught.value.message


# ---------------------------------------------------------------------------------------
# max_nodes: the host's backstop behind the worker's own count (issue 15, item 18)
# ---------------------------------------------------------------------------------------

NESTED = "a = relu(relu(x))\nb = relu(relu(a))\nout = relu(b)\n"  # five operator calls


def test_a_reply_with_more_calls_than_max_nodes_is_malformed_and_exactly_max_nodes_decodes():
    data = _over_json(encode_program(_program(NESTED)))
    assert decode_program(data, load_text(NESTED), max_nodes=5) == _program(NESTED)
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(NESTED), max_nodes=4)
    assert caught.value.code == "E_RESOURCE"
    assert "malformed" in caught.value.message and "more than 4 operator calls, above max_nodes=4" in caught.value.message


def test_the_call_past_max_nodes_is_refused_before_its_arguments_are_decoded():
    """Calls are counted as their records are reached, so the host never builds (or even checks)
    anything inside the call that passes the bound."""
    data = _over_json(encode_program(_program(NESTED)))
    data[2]["value"]["args"] = [{"k": "exec", "code": "print(1)"}] * 10_000  # the fifth call's arguments
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(NESTED), max_nodes=4)
    assert "above max_nodes=4" in caught.value.message
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(NESTED), max_nodes=5)
    assert "unknown expression kind" in caught.value.message
