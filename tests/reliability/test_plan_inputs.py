"""Saved plans and resolution requests as untrusted data, second pass (issue 15).

A saved plan must be UTF-8 text (§10), its batch entries are spelled ``B`` or ``k*B`` with
2 <= k <= 1024 (§3), schema checks come before the digests whatever the digests say, and a
plan that resolves under the default limits can always be saved and restored (16 MiB).
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from torch import nn

import hndl
from hndl import Arg, HNDLError, ResolvedPlan
from hndl.limits import DEFAULT_LIMITS
from hndl.persist import MAX_PLAN_BYTES, canonical

REGISTRY = hndl.Registry.from_packs("basic")
MLP = "linear(64)\nrelu()\nlinear()\n"
BATCH = "both = concat(x, x, axis=0)\nthree = concat(both, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, c)\n"


def resolved(source: str, shape=("B", 128), out=("B", 10)):
    return hndl.resolve(source, input_shape=shape, output_shape=out, registry=REGISTRY)


def resign(record: dict) -> str:
    """Canonical text of ``record`` with both digests recomputed as §10 defines them."""
    semantic = {key: value for key, value in record.items() if key not in ("frontend", "digests")}
    semantic["nodes"] = [{k: v for k, v in node.items() if k not in ("source", "provenance")} for node in record["nodes"]]
    record["digests"] = {"semantic": "sha256:" + hashlib.sha256(canonical(semantic)).hexdigest()}
    record["digests"]["artifact"] = "sha256:" + hashlib.sha256(canonical(record)).hexdigest()
    return canonical(record).decode("utf-8")


def refused(saved, code: str) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(saved, registry=REGISTRY)
    assert caught.value.code == code, str(caught.value)
    assert caught.value.remedies, "every refusal names a remedy"
    return caught.value


# -- item 1: lone surrogates ---------------------------------------------------------------------
@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\uDBFF"])
def test_a_lone_surrogate_escape_in_the_source_is_a_schema_error(escape):
    text = resolved(MLP).to_json().replace('"source":"', f'"source":"{escape}', 1)
    error = refused(text, "E_SCHEMA")
    assert "lone surrogate" in error.message and "not UTF-8" in error.message
    assert error.location.field == "frontend"


def test_a_lone_surrogate_in_a_key_or_a_node_string_is_a_schema_error():
    text = resolved(MLP).to_json()
    assert refused(text.replace('"frontend":{', '"frontend":{"\\udc00":1,', 1), "E_SCHEMA").location.field == "frontend"
    assert refused(text.replace('"id":"n1"', '"id":"n1\\ud800"', 1), "E_SCHEMA").location.field == "nodes"


def test_a_raw_lone_surrogate_is_a_schema_error_as_text_and_as_bytes():
    text = resolved(MLP).to_json()
    error = refused(text.replace('"source":"', '"source":"\ud800', 1), "E_SCHEMA")
    assert "lone surrogate" in error.message
    # the same character as (CESU-style) bytes is simply not UTF-8
    refused(text.encode("utf-8").replace(b'"source":"', b'"source":"\xed\xa0\x80', 1), "E_SCHEMA")


def test_an_escaped_surrogate_pair_is_one_character_and_still_restores():
    plan = hndl.resolve("# \U0001F600\n" + MLP, input_shape=("B", 128), output_shape=("B", 10), registry=REGISTRY)
    text = plan.to_json()
    escaped = text.replace("\U0001F600", "\\ud83d\\ude00")
    assert escaped != text
    assert ResolvedPlan.from_json(escaped, registry=REGISTRY).to_json() == text


def test_restore_refuses_a_lone_surrogate_with_the_same_code():
    from hndl.torch import restore

    text = resolved(MLP).to_json().replace('"source":"', '"source":"\\ud800', 1)
    with pytest.raises(HNDLError) as caught:
        restore(text, device="cpu", registry=REGISTRY)
    assert caught.value.code == "E_SCHEMA"


# -- item 2 and item 19: batch entries --------------------------------------------------------------
def _batch_record() -> dict:
    return json.loads(resolved(BATCH, ("B", 3, 8, 8), ("B", 3, 8, 8)).to_json())


def _set_entry(record: dict, entry: str) -> dict:
    nodes = {node["id"]: node for node in record["nodes"]}
    nodes["n0"]["output_shapes"]["out"][0] = entry  # both = concat(x, x, axis=0) -> 2*B
    nodes["n1"]["input_shapes"]["x0"][0] = entry
    return record


def test_a_batch_entry_of_thousands_of_digits_is_a_schema_error():
    error = refused(resign(_set_entry(_batch_record(), "1" * 5000 + "*B")), "E_SCHEMA")
    assert "malformed batch entry" in error.message and "2 <= k <= 1024" in error.message
    assert len(error.message) < 300, "the flood is not echoed back"
    assert error.location.node == "n0" and error.location.field == "output_shapes"


def test_batch_multiple_never_converts_a_digit_flood():
    from hndl.contracts import batch_multiple

    for entry in ("1" * 5000 + "*B", "0" * 5000 + "2*B", "10000*B"):
        with pytest.raises(HNDLError) as caught:
            batch_multiple(entry, "B")
        assert caught.value.code == "E_SCHEMA"
    with pytest.raises(HNDLError) as caught:
        batch_multiple("9999*B", "B")  # well spelled, only too large
    assert caught.value.code == "E_RESOURCE"


@pytest.mark.parametrize("entry", ["0*B", "B*2", "2*C", "1*B", "02*B"])
def test_a_malformed_batch_entry_is_a_schema_error_before_the_digests_are_read(entry):
    """Edited by hand, digests stale: §3 and §10 say E_SCHEMA, not E_INTEGRITY."""
    edited = canonical(_set_entry(_batch_record(), entry)).decode("utf-8")
    error = refused(edited, "E_SCHEMA")
    assert "malformed batch entry" in error.message
    assert error.location.node == "n0"


def test_a_stale_digest_is_still_an_integrity_error_once_the_schema_holds():
    edited = canonical(_set_entry(_batch_record(), "3*B")).decode("utf-8")
    refused(edited, "E_INTEGRITY")


# -- item 18: a resolvable plan is always restorable ---------------------------------------------------
def test_the_default_max_nodes_fits_a_saved_plan():
    """max_nodes ordinary nodes (linear(8) with its inferred in_features) stay within 16 MiB."""
    count = 200
    size = len(resolved("linear(8);" * count, ("B", 8), ("B", 8)).to_json().encode("utf-8"))
    assert DEFAULT_LIMITS["max_nodes"] * size / count < MAX_PLAN_BYTES / 2


def _tagging_registry():
    registry = hndl.Registry.from_packs("basic")

    @registry.operator("tag", summary="Identity carrying a text tag.", category="test",
                       shape="x[B, ...] -> out[B, ...]", args={"tag": Arg(str, "", help="Free text.")})
    class Tag(nn.Identity):
        """Passes its input through."""

        def __init__(self, *, tag: str) -> None:
            super().__init__()

    return registry


def test_a_plan_too_large_to_save_is_refused_at_resolution():
    registry = _tagging_registry()
    tag = "t" * 16_000  # the longest text an argument may hold is 16 KiB

    def graph(x):
        for _ in range(1_100):  # 1,100 x 16 KB is more than the 16 MiB a plan may hold
            registry.ops.tag(tag=tag)

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(graph, input_shape=("B", 8), output_shape=("B", 8), registry=registry)
    error = caught.value
    assert error.code == "E_RESOURCE"
    assert "MAX_PLAN_BYTES" in error.message and "16 MiB" in error.message and error.remedies

    def smaller(x):
        for _ in range(900):
            registry.ops.tag(tag=tag)

    plan = hndl.resolve_callable(smaller, input_shape=("B", 8), output_shape=("B", 8), registry=registry)
    text = plan.to_json()
    assert 14 * 2**20 < len(text.encode("utf-8")) <= MAX_PLAN_BYTES
    assert ResolvedPlan.from_json(text, registry=registry).to_json() == text


# -- issue 29, item 8: max_nodes is counted before the format, digest and rebuild passes -------------------
def _restored(text, **limits):
    return ResolvedPlan.from_json(text, registry=REGISTRY, limits=limits or None)


def _node_flood(record: dict) -> dict:
    record["nodes"] = [0] * len(record["nodes"])  # not even node objects
    return record


def _stale(record: dict) -> dict:
    record["digests"]["semantic"] = "sha256:" + "0" * 64
    return record


@pytest.mark.parametrize("edit", [None, _stale, _node_flood], ids=["re-signed", "stale digests", "no node objects"])
def test_more_nodes_than_max_nodes_are_refused_before_the_format_and_digests_are_read(edit):
    """A re-signed 48,000-node plan took 2-3 s to refuse: every node's format, both digests
    and the rebuild ran before revalidation counted the nodes. A plan of three nodes under
    max_nodes=2 shows the order: E_RESOURCE on the node list, whatever else is wrong."""
    record = json.loads(resolved(MLP).to_json())
    assert len(record["nodes"]) == 3
    text = canonical(edit(record)).decode("utf-8") if edit else resolved(MLP).to_json()
    with pytest.raises(HNDLError) as caught:
        _restored(text, max_nodes=2)
    error = caught.value
    assert error.code == "E_RESOURCE" and error.location.field == "nodes"
    assert error.message == "the saved plan has 3 nodes, above max_nodes=2"
    assert "limits['max_nodes']" in error.remedies[0]


def test_a_plan_of_exactly_max_nodes_nodes_restores():
    text = resolved(MLP).to_json()
    assert _restored(text, max_nodes=3).to_json() == text


# -- issue 29, items 11 and 12: every echoed name is bounded and escaped ---------------------------------------
HUGE = "q" * 2**20
OSC52 = "\x1b]52;c;aGVsbG8=\x07"


def _first_node(record: dict) -> dict:
    return record["nodes"][0]


def _edit(change):
    """The plan's record after ``change``, re-signed, so only the check it aims at can refuse it."""
    record = json.loads(resolved(MLP).to_json())
    change(record)
    return resign(record)


HOSTILE = {
    "a megabyte identity": (lambda r: _first_node(r).update(op=HUGE + "@1"), "E_STATE_VERSION"),
    "a megabyte field": (lambda r: r.update({HUGE: 1}), "E_SCHEMA"),
    "a megabyte node field": (lambda r: _first_node(r).update({HUGE: 1}), "E_SCHEMA"),
    "a megabyte argument name": (lambda r: _first_node(r)["args"].update({HUGE: 1}), "E_INTEGRITY"),
    "a megabyte node id": (lambda r: _first_node(r).update(id=HUGE, op="linear"), "E_SCHEMA"),
    "a megabyte id saved twice": (lambda r: [node.update(id=HUGE) for node in r["nodes"]], "E_INTEGRITY"),
    "a megabyte dtype": (lambda r: r.update(dtype=HUGE), "E_SCHEMA"),
    "a megabyte reference": (lambda r: r.update(output_ref=HUGE, inputs=[{"name": "x", "shape": ["B", 128],
                                                                           "dtype": "float32"}],
                                                outputs=[{"name": "y", "ref": HUGE, "shape": ["B", 10]}]),
                             "E_SCHEMA"),
    "twenty thousand fields": (lambda r: r.update({f"f{index:05d}": 0 for index in range(20_000)}), "E_SCHEMA"),
    "twenty thousand arguments": (lambda r: _first_node(r)["args"].update({f"a{index:05d}": 0 for index in range(20_000)}),
                                  "E_INTEGRITY"),
    "a terminal escape in a field": (lambda r: r.update({OSC52: 1}), "E_SCHEMA"),
    "a terminal escape in a node field": (lambda r: _first_node(r).update({OSC52: 1}), "E_SCHEMA"),
    "a terminal escape in an identity": (lambda r: _first_node(r).update(op=OSC52 + "@1"), "E_STATE_VERSION"),
}


def _has_controls(text: str) -> bool:
    return any((ord(character) < 0x20 and character != "\n") or 0x7f <= ord(character) < 0xa0 for character in text)


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_names_in_a_plan_are_echoed_bounded_and_escaped(kind):
    """A 1 MB identity, field or argument name made a 1 MB error; 20,000 unexpected names a
    list as long; an OSC 52 sequence (a clipboard write) in a field name reached the terminal."""
    change, code = HOSTILE[kind]
    error = refused(_edit(change), code)
    text = str(error)
    assert len(text) < 2_000, len(text)
    assert not _has_controls(text)
    if "megabyte" in kind:  # the name is cut, and its length said
        assert re.search(r"\.\.\. \(10485[78]\d characters\)", text)
    if "thousand" in kind:  # the list is cut between items, and the rest counted
        assert re.search(r", a?f?\d{5}, \.\.\. and 1998\d more", error.message)
    if "escape" in kind:
        assert "\\x1b]52;c;aGVsbG8=\\x07" in error.message
