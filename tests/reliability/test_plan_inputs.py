"""Saved plans and resolution requests as untrusted data, second pass (issue 15).

A saved plan must be UTF-8 text (§10), its batch entries are spelled ``B`` or ``k*B`` with
2 <= k <= 1024 (§3), schema checks come before the digests whatever the digests say, and a
plan that resolves under the default limits can always be saved and restored (16 MiB).
"""

from __future__ import annotations

import hashlib
import json

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
