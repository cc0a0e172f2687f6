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
from hndl.frontends.config.grammar import parse_config, validate_config
from hndl.frontends.config.ir import Assign, Call, Evaluate, Literal, Name, Pack, Pos, Program, SchemeCall
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
    return data[0][5]  # the linear(...) call of statement 1: ["c", line, column, alias, args, kwargs]


def _literal_4(data):
    return _call_h(data)[4][1]  # the literal 4: ["l", line, column, 4]


def _init_literal(data):
    return _call_h(data)[5][1][1]  # the init= literal record


def _init(data):
    return _init_literal(data)[3]  # {"dict": [["weight", {scheme}]]}


def _name_h(data):
    return data[1][5][4][0]  # the h of add(h, ...): ["n", line, column, "h"]


def _pack(data):
    return data[2][5]  # (h, x): ["p", line, column, [names]]


def test_the_fixture_program_decodes_before_any_edit():
    assert decode_program(_encoded(), load_text(SMALL)) == _program(SMALL)


def test_the_fixture_helpers_point_at_the_records_they_name():
    data = _encoded()
    assert _call_h(data)[:4] == ["c", 1, 5, "linear"] and _literal_4(data) == ["l", 1, 15, 4]
    assert _init(data)["dict"][0][0] == "weight" and _name_h(data) == ["n", 2, 11, "h"]
    assert _pack(data)[0] == "p" and len(_pack(data)[3]) == 2


def _set(record_of, index, value):
    return lambda d: record_of(d).__setitem__(index, value)


def _statement_1(data):
    return data[0]


REJECTED = {
    # shapes of the whole reply
    "program not a list": _Whole(lambda d: {"statements": d}),
    "statement not a list": _Whole(lambda d: [{"k": "assign"}]),
    "statement in the old dict form": _Whole(lambda d: [{"k": "eval", "call": None, "pos": [1, 1]}]),
    "statement is None": _Whole(lambda d: [None]),
    "empty statement": _Whole(lambda d: [[]]),
    # unknown kinds
    "unknown statement kind": _set(_statement_1, 0, "import"),
    "unknown expression kind": _set(_literal_4, 0, "exec"),
    "kind not a string": _set(_statement_1, 0, 1),
    "expression in the old dict form": _set(lambda d: _call_h(d)[4], 1, {"k": "literal", "value": 4, "pos": [1, 15]}),
    "statement kind as an expression": _set(lambda d: _call_h(d)[4], 1, ["e", 1, 15, 4]),
    # missing and extra fields
    "missing statement field": lambda d: d[0].pop(),
    "extra statement field": lambda d: d[0].append("print(1)"),
    "missing call field": lambda d: _call_h(d).pop(),
    "extra call field": lambda d: _call_h(d).append("eval"),
    "extra name field": lambda d: _name_h(d).append("__class__"),
    "missing literal field": lambda d: _literal_4(d).pop(),
    "extra pack field": lambda d: _pack(d).append([]),
    "extra literal wrapper key": _set(_literal_4, 3, {"float": "1.0", "x": 1}),
    # wrong types
    "unpack not a bool": _set(_statement_1, 4, 0),
    "targets not a list": _set(_statement_1, 3, "h"),
    "args not a list": _set(_call_h, 4, {"0": 1}),
    "kwargs not a list": _set(_call_h, 5, {"name": 1}),
    "kwargs pair of three": lambda d: _call_h(d)[5].append(["a", _literal_4(d), 1]),
    "kwargs pair as dict": _set(_call_h, 5, [{"name": 1}]),
    "alias not a string": _set(_call_h, 3, ["linear"]),
    "literal value is an object": _set(_literal_4, 3, {"__class__": "os"}),
    "literal value is a set-like tag": _set(_literal_4, 3, {"set": [1]}),
    "literal value is a bare list": _set(_literal_4, 3, [1, 2]),
    "float not a string": _set(_literal_4, 3, {"float": 1.5}),
    "float not a number": _set(_literal_4, 3, {"float": "one"}),
    "float not canonical (underscores)": _set(_literal_4, 3, {"float": "1_0.0"}),
    "float not canonical (spaces)": _set(_literal_4, 3, {"float": " 1.0"}),
    "tuple tag holding a dict": _set(_literal_4, 3, {"tuple": {"a": 1}}),
    "integer beyond the literal bound": _set(_literal_4, 3, 10**25),
    "negative integer beyond the literal bound": _set(_literal_4, 3, -(10**25)),
    "string beyond the literal bound": _set(_literal_4, 3, "a" * 20000),
    "string with a lone surrogate": _set(_literal_4, 3, "\ud800"),
    # non-finite floats
    "nan": _set(_literal_4, 3, {"float": "nan"}),
    "inf": _set(_literal_4, 3, {"float": "inf"}),
    "-inf": _set(_literal_4, 3, {"float": "-inf"}),
    "overflow to inf": _set(_literal_4, 3, {"float": "1e400"}),
    # names and aliases
    "alias not an identifier": _set(_call_h, 3, "os.system"),
    "alias is a keyword": _set(_call_h, 3, "import"),
    "alias with a space": _set(_call_h, 3, "linear "),
    "name not an identifier": _set(_name_h, 3, "a.b"),
    "name is a dunder": _set(_name_h, 3, "__builtins__"),
    "target is a dunder": _set(_statement_1, 3, ["__class__"]),
    "target not an identifier": _set(_statement_1, 3, ["1h"]),
    "keyword name not an identifier": lambda d: _call_h(d)[5][0].__setitem__(0, "na-me"),
    "keyword name is a keyword": lambda d: _call_h(d)[5][0].__setitem__(0, "lambda"),
    "repeated keyword": lambda d: _call_h(d)[5].append(copy.deepcopy(_call_h(d)[5][0])),
    # statement structure
    "no targets": _set(_statement_1, 3, []),
    "two targets without unpacking": _set(_statement_1, 3, ["a", "b"]),
    "repeated unpacking target": lambda d: d[0].__setitem__(slice(3, 5), [["a", "a"], True]),
    "literal assignment value": _set(_statement_1, 5, ["l", 1, 5, 4]),
    "expression statement that is not a call": lambda d: d.append(["e", 1, 1, ["n", 1, 1, "x"]]),
    "pack inside a call": lambda d: _call_h(d)[4].append(copy.deepcopy(_pack(d))),
    "pack as a keyword value": lambda d: _call_h(d)[5].append(["other", copy.deepcopy(_pack(d))]),
    "pack holding a call": lambda d: _pack(d)[3].append(copy.deepcopy(_call_h(d))),
    "empty pack": _set(_pack, 3, []),
    # scheme calls only as direct values of an init mapping
    "scheme outside init": _set(_literal_4, 3, {"scheme": "normal", "kwargs": [], "pos": [1, 1]}),
    "scheme nested inside an init value": lambda d: _init(d).update(dict=[["weight", {"list": [_init(d)["dict"][0][1]]}]]),
    "scheme under a non-init keyword": lambda d: _call_h(d)[5][1].__setitem__(0, "other"),
    "unknown scheme": lambda d: _init(d)["dict"][0][1].update(scheme="system"),
    "scheme with positional-style kwargs": lambda d: _init(d)["dict"][0][1].update(kwargs=[[0, 1]]),
    "scheme with an extra field": lambda d: _init(d)["dict"][0][1].update(extra=1),
    "init literal with an extra field": lambda d: _init_literal(d).append(1),
    # dict keys
    "duplicate dict keys": lambda d: _init(d).update(dict=[["bias", 0], ["bias", 1]]),
    "non-string dict key": lambda d: _init(d).update(dict=[[1, 0]]),
    "dict entry not a pair": lambda d: _init(d).update(dict=[["bias"]]),
    # positions
    "line not a number": _set(_statement_1, 1, {"line": 1}),
    "line as a list": _set(_statement_1, 1, [1, 1]),
    "column missing": _set(_statement_1, 2, None),
    "position as strings": lambda d: d[0].__setitem__(slice(1, 3), ["1", "1"]),
    "position as floats": lambda d: d[0].__setitem__(slice(1, 3), [1.0, 1]),
    "position as booleans": lambda d: d[0].__setitem__(slice(1, 3), [True, True]),
    "line zero": _set(_statement_1, 1, 0),
    "column zero": _set(_literal_4, 2, 0),
    "negative column": _set(_literal_4, 2, -3),
    "line past the end of the source": _set(_literal_4, 1, 99),
    "call line past the end": _set(_call_h, 1, 99),
    "name column zero": _set(_name_h, 2, 0),
    "pack line past the end": _set(_pack, 1, 99),
    "init literal line zero": _set(_init_literal, 1, 0),
    "scheme position past the end": lambda d: _init(d)["dict"][0][1].update(pos=[99, 1]),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_decode_program_rejects_anything_the_worker_would_not_produce(name):
    _assert_malformed(_edit(REJECTED[name]))


def _nested_call(depth: int) -> list:
    node = ["n", 1, 1, "x"]
    for _ in range(depth):
        node = ["c", 1, 1, "relu", [node], []]
    return node


def _nested_literal(depth: int):
    value = 0
    for _ in range(depth):
        value = {"list": [value]}
    return value


def test_decode_rejects_too_deep_nesting_of_calls_and_of_literals():
    ok = [["e", 1, 1, _nested_call(50)]]
    assert len(decode_program(ok, load_text("relu()")).statements) == 1
    _assert_malformed([["e", 1, 1, _nested_call(wire.MAX_DEPTH + 5)]], "relu()")
    deep = ["l", 1, 1, _nested_literal(wire.MAX_DEPTH + 5)]
    _assert_malformed([["e", 1, 1, ["c", 1, 1, "relu", [deep], []]]], "relu()")
    # A plain int at the deepest level still counts as one more level of nesting.
    assert decode_program([["e", 1, 1, _nested_call_with_arg(wire.MAX_DEPTH - 1)]], load_text("relu()"))
    _assert_malformed([["e", 1, 1, _nested_call_with_arg(wire.MAX_DEPTH)]], "relu()")


def _nested_call_with_arg(depth: int) -> list:
    """``depth`` nested calls whose innermost takes the literal 1 at expression depth ``depth``."""
    node = ["c", 1, 1, "relu", [["l", 1, 1, 1]], []]
    for _ in range(depth - 1):
        node = ["c", 1, 1, "relu", [node], []]
    return node


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
    data[2][5][4] = [["exec", "print(1)"]] * 10_000  # the fifth call's arguments
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(NESTED), max_nodes=4)
    assert "above max_nodes=4" in caught.value.message
    with pytest.raises(HNDLError) as caught:
        decode_program(data, load_text(NESTED), max_nodes=5)
    assert "unknown expression kind" in caught.value.message


# ---------------------------------------------------------------------------------------
# The worker's direct encoding: the validator building wire records instead of the IR
# ---------------------------------------------------------------------------------------

WIRE_SOURCES = {
    "rich": RICH,
    "small": SMALL,
    "nested": NESTED,
    "indented and non-ascii": "\n    h = linear(x, 4, name='ünï')\n    out = relu(h)  # ✓\n",
    "chain": "\n".join(["linear(16)"] * 50 + ["linear()"]),
}


@pytest.mark.parametrize("name", sorted(WIRE_SOURCES))
def test_the_wire_builder_encodes_exactly_what_encode_program_makes_of_the_ir(name):
    source = load_text(WIRE_SOURCES[name])
    direct = validate_config(source, aliases=ALIASES, inputs=("x",), build=wire.Wire)
    assert _over_json(direct) == _over_json(encode_program(parse_config(source, aliases=ALIASES, inputs=("x",))))
    assert decode_program(_over_json(direct), source) == parse_config(source, aliases=ALIASES, inputs=("x",))


def test_the_wire_builder_refuses_exactly_what_the_ir_builder_refuses():
    source = load_text("h = linear(x, 4)\nout = relu(h, name=1)\nlinear(y)\n")
    with pytest.raises(HNDLError) as by_ir:
        parse_config(source, aliases=ALIASES, inputs=("x",))
    with pytest.raises(HNDLError) as by_wire:
        validate_config(source, aliases=ALIASES, inputs=("x",), build=wire.Wire)
    assert str(by_wire.value) == str(by_ir.value) and by_wire.value.location == by_ir.value.location
