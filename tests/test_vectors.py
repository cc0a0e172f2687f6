"""The published plan vectors: the compatibility promise of schema 1 / resolution 1.

Every vector in tests/vectors must restore unchanged, re-encode to exactly its bytes, keep the
digests recorded in digests.json, and be reproduced by resolving its specification again with the
operator versions it records. A change that breaks one of these is a format change, not a fix.
"""

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from hndl import ResolvedPlan
from hndl.persist import canonical

VECTORS = Path(__file__).parent / "vectors"
_spec = importlib.util.spec_from_file_location("hndl_vector_specs", VECTORS / "specs.py")
specs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(specs)
DIGESTS = json.loads((VECTORS / "digests.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(specs.VECTORS))
def test_vector_restores_and_reencodes_to_the_same_bytes(name):
    text = (VECTORS / f"{name}.json").read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text, registry=specs.registry_for(name))
    assert plan.to_json() == text


@pytest.mark.parametrize("name", sorted(specs.VECTORS))
def test_vector_digests_are_recomputed_exactly(name):
    record = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert record["digests"] == DIGESTS[name]
    artifact = record["digests"].pop("artifact")
    assert "sha256:" + hashlib.sha256(canonical(record)).hexdigest() == artifact


@pytest.mark.parametrize("name", sorted(specs.VECTORS))
def test_resolving_the_specification_again_gives_the_same_semantic_plan(name):
    # Explanations (node source derivations) may improve between releases; the concrete graph may not,
    # with the operator versions the vector records (an alias whose operator has since raised its
    # version is spelled as the alias that keeps the recorded one, e.g. conv_v1).
    assert specs.resolve_vector(name).semantic_digest == DIGESTS[name]["semantic"]


def test_an_operator_that_raised_its_version_resolves_to_the_new_one_and_keeps_the_old_alias():
    # conv became conv2d@2 (padding="same", issue 30): today's spelling resolves to it, and the
    # recorded version stays reachable as conv_v1, so the published generator keeps its plan.
    today = specs.resolve_vector("generator", recorded_versions=False)
    assert {node.op for node in today.nodes} >= {"conv2d@2"}
    assert today.semantic_digest != DIGESTS["generator"]["semantic"]
    assert {node.op for node in specs.resolve_vector("generator").nodes} >= {"conv2d@1"}


def test_the_single_port_vectors_store_no_port_lists_and_the_named_one_does():
    for name in ("chain", "branched", "batch_multiples", "custom_operator", "init_trainability", "generator"):
        record = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
        assert "inputs" not in record and "outputs" not in record
    named = json.loads((VECTORS / "named_ports.json").read_text(encoding="utf-8"))
    assert [port["name"] for port in named["inputs"]] == ["x", "y"]
    assert [port["name"] for port in named["outputs"]] == ["logits", "features"]


def test_the_batch_vector_carries_multiples_only_on_internal_ports():
    record = json.loads((VECTORS / "batch_multiples.json").read_text(encoding="utf-8"))
    entries = {shape[0] for node in record["nodes"] for shape in node["output_shapes"].values()}
    assert entries == {"B", "2*B", "3*B"}
    assert record["input_shape"][0] == "B" and record["output_shape"][0] == "B"


def test_the_custom_vector_needs_its_operator():
    from hndl import HNDLError

    text = (VECTORS / "custom_operator.json").read_text(encoding="utf-8")
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(text)  # Registry.builtins() lacks example.silu@1
    assert error.value.code == "E_STATE_VERSION"
