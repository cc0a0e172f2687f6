"""Canonical plan JSON, its two digests, and validated restoration (§10, §11 records, §12).

Every plan kind the format knows — a chain, the worked generator, a branched graph, named
ports, batch multiples, a custom operator, initialization schemes and trainability, a
callable capture and a variadic port list — round-trips byte for byte. A tampering corpus
checks that every kind of damage is refused with its own code, including damage whose
digests were recomputed so that only revalidation can catch it.
"""

import hashlib
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
from hndl import HNDLError, Registry, ResolvedPlan, ops, persist
from hndl.persist import canonical
from hndl.plan import RESOLUTION_VERSION, SCHEMA_VERSION

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "plan.schema.json"

# -- the specifications ------------------------------------------------------------------------
MLP = """
# π ≈ 3.14159 — ünïcödé stays readable in the saved source
linear(64)
relu()
linear()
"""
MLP_CONTRACTS = dict(input_shape=("B", 128), output_shape=("B", 10))
SCORES = "linear(64)\nrelu()\nscores = linear()\n"

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""
GENERATOR_CONTRACTS = dict(input_shape=("B", 128), output_shape=("B", 3, 32, 32))

BRANCHED = """
z1, z2 = split(64, name="partition")
linear(z1, 128, name="content")
features = relu(name="features")
style = linear(z2, 128, name="style")
add(features, style, name="combined")
"""
BRANCHED_CONTRACTS = dict(input_shape=("B", 128), output_shape=("B", 128))

DISCRIMINATOR = """
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""
DISCRIMINATOR_CONTRACTS = dict(
    input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
    output_shape={"logits": ("B", 1), "features": ("B", 12544)},
)

BATCH = """
both = concat(x, x, axis=0)
three = concat(both, x, axis=0)
a, b, c = chunk(three, 3, dim=0)
add(a, c)
"""
BATCH_CONTRACTS = dict(input_shape=("B", 3, 8, 8), output_shape=("B", 3, 8, 8))

CUSTOM = """
linear(64)
softsign()
linear()
"""

INIT = """
linear(64, trainable=False)
relu()
linear(init={"weight": xavier_uniform(gain=1.0), "bias": 0.1}, trainable={"bias": False})
"""

CONSTANTS = """
linear(64, init={"weight": 0.1, "bias": -0.0})
relu()
linear()
"""

CHUNK = """
a, b = chunk(2)
add(a, b)
"""
CHUNK_CONTRACTS = dict(input_shape=("B", 128), output_shape=("B", 64))


def custom_registry() -> Registry:
    """A fresh built-in registry plus one custom operator, example.softsign@3."""
    registry = Registry.builtins()

    @registry.operator(
        "softsign",
        identity="example.softsign",
        version=3,
        summary="Softsign, x / (1 + |x|).",
        shape="x[B, ...] -> out[B, ...]",
    )
    class Softsign(nn.Softsign):
        """Out-of-place softsign without parameters or buffers."""

    return registry


def classifier(x):
    ops.linear(64)
    ops.relu()
    ops.linear()


@pytest.fixture(scope="module")
def registry():
    return Registry.builtins()


@pytest.fixture(scope="module")
def softsign_registry():
    return custom_registry()


@pytest.fixture(scope="module")
def plans(registry, softsign_registry):
    """Every plan kind the format must carry, resolved once."""
    return {
        "mlp": hndl.resolve(MLP, **MLP_CONTRACTS, registry=registry),
        "generator": hndl.resolve(GENERATOR, **GENERATOR_CONTRACTS, registry=registry),
        "branched": hndl.resolve(BRANCHED, **BRANCHED_CONTRACTS, registry=registry),
        "named_ports": hndl.resolve(DISCRIMINATOR, **DISCRIMINATOR_CONTRACTS, registry=registry),
        "batch_multiples": hndl.resolve(BATCH, **BATCH_CONTRACTS, registry=registry),
        "custom": hndl.resolve(CUSTOM, **MLP_CONTRACTS, registry=softsign_registry),
        "init": hndl.resolve(INIT, **MLP_CONTRACTS, registry=registry),
        "constants": hndl.resolve(CONSTANTS, **MLP_CONTRACTS, registry=registry),
        "callable": hndl.resolve_callable(classifier, **MLP_CONTRACTS, registry=registry),
        "chunk": hndl.resolve(CHUNK, **CHUNK_CONTRACTS, registry=registry),
    }


def _registry_for(name, registry, softsign_registry):
    return softsign_registry if name == "custom" else registry


# -- tampering helpers ------------------------------------------------------------------------------
def resign(record: dict) -> str:
    """Recompute both digests exactly as §10 defines them and return the canonical text.

    semantic: every top-level field but frontend and digests, every node field but source
    and provenance; artifact: the whole record with only the semantic digest in ``digests``.
    """
    semantic = {key: value for key, value in record.items() if key not in ("frontend", "digests")}
    semantic["nodes"] = [
        {key: value for key, value in node.items() if key not in ("source", "provenance")}
        for node in record["nodes"]
    ]
    record["digests"] = {"semantic": "sha256:" + hashlib.sha256(canonical(semantic)).hexdigest()}
    record["digests"]["artifact"] = "sha256:" + hashlib.sha256(canonical(record)).hexdigest()
    return canonical(record).decode("utf-8")


def tampered(plan, change) -> str:
    """The plan's record after ``change(record)``, with both digests recomputed."""
    record = json.loads(plan.to_json())
    change(record)
    return resign(record)


def node_of(record, node_id):
    return next(node for node in record["nodes"] if node["id"] == node_id)


def refused(text, code, **kwargs) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(text, **kwargs)
    assert caught.value.code == code, str(caught.value)
    return caught.value


# == canonical encoding ================================================================================
def test_encoding_is_sorted_compact_utf8_json(plans):
    text = plans["mlp"].to_json()
    record = json.loads(text)
    assert text == json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    outside_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    assert not re.search(r"\s", outside_strings)  # compact separators, no indentation
    assert list(record) == sorted(record)
    assert all(list(node) == sorted(node) for node in record["nodes"])
    # UTF-8 without ASCII escaping: the comment's characters appear as themselves
    assert "π ≈ 3.14159 — ünïcödé" in text and "\\u03c0" not in text
    assert record["frontend"]["source"] == MLP
    assert "π".encode("utf-8") in text.encode("utf-8")


def test_tuples_are_arrays_and_constants_are_kept_exactly(plans):
    text = plans["constants"].to_json()
    assert '"input_shape":["B",128]' in text and '"output_shape":["B",10]' in text
    assert '"x":["B",128]' in text
    # float32-rounded init constant and a negative zero survive as written
    assert '"weight":0.10000000149011612' in text
    assert '"bias":-0.0' in text
    restored = ResolvedPlan.from_json(text)
    bias = restored.node("n0").initialization["overrides"]["bias"]
    assert bias == 0.0 and math.copysign(1.0, bias) == -1.0
    assert restored.node("n0").initialization["overrides"]["weight"] == 0.10000000149011612
    assert restored.to_json() == text


@pytest.mark.parametrize("name", [
    "mlp", "generator", "branched", "named_ports", "batch_multiples", "custom", "init", "constants", "callable", "chunk",
])
def test_round_trip_is_byte_exact(name, plans, registry, softsign_registry):
    plan = plans[name]
    text = plan.to_json()
    restored = ResolvedPlan.from_json(text, registry=_registry_for(name, registry, softsign_registry))
    assert restored.to_json() == text
    assert restored == plan
    assert restored.semantic_digest == plan.semantic_digest
    assert str(restored) == str(plan)
    # the digest definition this file's tampering helper uses is the one persist writes
    assert resign(json.loads(text)) == text


def test_round_trip_accepts_bytes(plans):
    text = plans["named_ports"].to_json()
    assert ResolvedPlan.from_json(text.encode("utf-8")).to_json() == text
    assert ResolvedPlan.from_json(bytearray(text.encode("utf-8"))).to_json() == text


def test_identities_versions_and_records_survive(plans, softsign_registry):
    custom = ResolvedPlan.from_json(plans["custom"].to_json(), registry=softsign_registry)
    assert [node.op for node in custom.nodes] == ["linear@1", "example.softsign@3", "linear@1"]
    assert custom.node("n1").alias == "softsign"
    init = ResolvedPlan.from_json(plans["init"].to_json())
    head = init.node("n2")
    assert head.initialization["kind"] == "torch_default@2"
    assert dict(head.initialization["overrides"]["weight"]) == {"kind": "xavier_uniform", "gain": 1.0}
    assert head.initialization["overrides"]["bias"] == 0.10000000149011612
    assert dict(head.trainability["overrides"]) == {"bias": False} and head.trainability["default"] is None
    assert init.node("n0").trainability["default"] is False
    assert init.node("n0").initialization["kind"] == "torch_default@1"
    batch = ResolvedPlan.from_json(plans["batch_multiples"].to_json())
    assert batch.node("n0").output_shapes["out"] == ("2*B", 3, 8, 8)
    assert batch.node("n1").output_shapes["out"] == ("3*B", 3, 8, 8)
    assert batch.node("n2").input_shapes["x"] == ("3*B", 3, 8, 8)
    chunk = ResolvedPlan.from_json(plans["chunk"].to_json())
    assert chunk.node("n0").outputs == ("out0", "out1") and chunk.node("n0").args["chunks"] == 2


def test_custom_operator_needs_its_registry(plans):
    text = plans["custom"].to_json()
    error = refused(text, "E_STATE_VERSION")
    assert "example.softsign@3" in error.message
    error = refused(text, "E_STATE_VERSION", registry=Registry.builtins())
    assert error.remedies


def test_callable_provenance_is_kept(plans):
    record = json.loads(plans["callable"].to_json())
    frontend = record["frontend"]
    assert frontend["kind"] == "python_callable@1"
    assert frontend["qualname"] == "classifier"
    assert frontend["file"] == __file__ or Path(frontend["file"]) == Path(__file__)
    assert frontend["line"] == classifier.__code__.co_firstlineno
    restored = ResolvedPlan.from_json(plans["callable"].to_json())
    assert dict(restored.frontend) == frontend


# == single-port vs named-port encoding ======================================================================
def test_single_port_plan_stores_no_port_lists(plans):
    for name in ("mlp", "generator", "branched", "batch_multiples", "init", "callable", "chunk"):
        record = json.loads(plans[name].to_json())
        assert "inputs" not in record and "outputs" not in record, name


def test_mapping_contract_naming_x_and_output_keeps_the_tuple_encoding(plans, registry):
    mapped = hndl.resolve(
        MLP, input_shape={"x": ("B", 128)}, output_shape={"output": ("B", 10)}, registry=registry,
    )
    assert mapped.to_json() == plans["mlp"].to_json()


def test_named_ports_plan_stores_both_port_lists(plans):
    record = json.loads(plans["named_ports"].to_json())
    assert [port["name"] for port in record["inputs"]] == ["x", "y"]
    assert [port["name"] for port in record["outputs"]] == ["logits", "features"]
    assert record["inputs"][1] == {"name": "y", "shape": ["B", 10], "dtype": "float32"}
    assert record["outputs"][0] == {"name": "logits", "ref": "node:logits/out", "shape": ["B", 1]}
    assert record["input_shape"] == ["B", 1, 28, 28] and record["output_shape"] == ["B", 1]
    assert record["output_ref"] == "node:logits/out"


def test_an_output_renamed_from_output_stores_port_lists(registry):
    plan = hndl.resolve(SCORES, input_shape=("B", 128), output_shape={"scores": ("B", 10)}, registry=registry)
    record = json.loads(plan.to_json())
    assert record["outputs"] == [{"name": "scores", "ref": "node:n2/out", "shape": ["B", 10]}]
    assert ResolvedPlan.from_json(plan.to_json()).to_json() == plan.to_json()


# == digests ============================================================================================
def test_configuration_and_callable_share_the_semantic_digest(plans):
    config, captured = plans["mlp"], plans["callable"]
    assert config.semantic_digest == captured.semantic_digest
    config_record, captured_record = json.loads(config.to_json()), json.loads(captured.to_json())
    assert config_record["digests"]["semantic"] == captured_record["digests"]["semantic"]
    assert config_record["digests"]["artifact"] != captured_record["digests"]["artifact"]


def test_semantic_digest_ignores_comments_whitespace_and_locations(plans, registry):
    moved = hndl.resolve(
        "# a different comment\n\n\nlinear(64)   # trailing\n\n\nrelu( )\nlinear(\n    \n)\n",
        **MLP_CONTRACTS, registry=registry,
    )
    assert moved.node("n0").source["line"] != plans["mlp"].node("n0").source["line"]
    assert moved.semantic_digest == plans["mlp"].semantic_digest
    # the artifact digest covers the frontend source and the node locations
    before, after = json.loads(plans["mlp"].to_json()), json.loads(moved.to_json())
    assert before["digests"]["artifact"] != after["digests"]["artifact"]


def test_semantic_digest_tracks_every_concrete_field(plans, registry):
    base = plans["mlp"].semantic_digest
    variants = {
        "argument": hndl.resolve("linear(32)\nrelu()\nlinear()\n", **MLP_CONTRACTS, registry=registry),
        "bias": hndl.resolve("linear(64, bias=False)\nrelu()\nlinear()\n", **MLP_CONTRACTS, registry=registry),
        "shape": hndl.resolve(MLP, input_shape=("B", 128), output_shape=("B", 11), registry=registry),
        "input": hndl.resolve(MLP, input_shape=("B", 96), output_shape=("B", 10), registry=registry),
        "init": hndl.resolve('linear(64, init={"bias": 0})\nrelu()\nlinear()\n', **MLP_CONTRACTS, registry=registry),
        "scheme": hndl.resolve('linear(64, init={"weight": orthogonal()})\nrelu()\nlinear()\n', **MLP_CONTRACTS,
                               registry=registry),
        "trainability": hndl.resolve("linear(64, trainable=False)\nrelu()\nlinear()\n", **MLP_CONTRACTS,
                                     registry=registry),
        "trainability_map": hndl.resolve('linear(64, trainable={"bias": True})\nrelu()\nlinear()\n',
                                         **MLP_CONTRACTS, registry=registry),
        "dtype": hndl.resolve(MLP, **MLP_CONTRACTS, dtype="bfloat16", registry=registry),
        "name": hndl.resolve('linear(64, name="hidden")\nrelu()\nlinear()\n', **MLP_CONTRACTS, registry=registry),
        "output_name": hndl.resolve(SCORES, input_shape=("B", 128), output_shape={"scores": ("B", 10)},
                                    registry=registry),
    }
    digests = {name: plan.semantic_digest for name, plan in variants.items()}
    assert base not in digests.values()
    assert len(set(digests.values())) == len(digests)


def test_empty_construction_options_have_the_default_identity(plans, registry):
    explicit_empty = hndl.resolve("linear(64, init={}, trainable={})\nrelu()\nlinear()\n", **MLP_CONTRACTS,
                                  registry=registry)
    assert explicit_empty.semantic_digest == plans["mlp"].semantic_digest


def test_digests_have_the_published_form(plans):
    for plan in plans.values():
        digests = json.loads(plan.to_json())["digests"]
        assert set(digests) == {"semantic", "artifact"}
        for value in digests.values():
            assert value.startswith("sha256:") and len(value) == 7 + 64
            int(value[7:], 16)
        assert plan.semantic_digest == digests["semantic"]


# == restoration: the tampering corpus ====================================================================
def test_a_flipped_digit_in_an_argument_breaks_the_digests(plans):
    text = plans["mlp"].to_json()
    assert text.count('"out_features":64') == 1
    error = refused(text.replace('"out_features":64', '"out_features":65'), "E_INTEGRITY")
    assert error.location.field and error.location.field.startswith("digests")


def test_a_flipped_digit_in_a_shape_breaks_the_digests(plans):
    text = plans["mlp"].to_json()
    assert '"out":["B",64]' in text
    refused(text.replace('"out":["B",64]', '"out":["B",65]', 1), "E_INTEGRITY")


def test_a_changed_artifact_field_breaks_the_artifact_digest(plans):
    record = json.loads(plans["mlp"].to_json())
    node_of(record, "n0")["source"]["line"] += 1
    error = refused(canonical(record).decode("utf-8"), "E_INTEGRITY")
    assert error.location.field == "digests.artifact"
    record = json.loads(plans["mlp"].to_json())
    record["frontend"]["source"] = record["frontend"]["source"].replace("π", "pi")
    assert refused(canonical(record).decode("utf-8"), "E_INTEGRITY").location.field == "digests.artifact"


def test_malformed_digest_text_is_refused(plans):
    record = json.loads(plans["mlp"].to_json())
    record["digests"]["semantic"] = record["digests"]["semantic"].upper()
    refused(canonical(record).decode("utf-8"), "E_SCHEMA")
    record["digests"]["semantic"] = "sha256:" + "0" * 63
    refused(canonical(record).decode("utf-8"), "E_SCHEMA")
    record["digests"]["semantic"] = "sha256:" + "0" * 64  # well formed, just wrong
    refused(canonical(record).decode("utf-8"), "E_INTEGRITY")


@pytest.mark.parametrize("change", [
    "argument", "argument_and_its_port", "internal_shape", "upstream_width", "input_dtype",
])
def test_resigned_tampering_is_caught_by_revalidation(change, plans):
    """Both digests recomputed: only the concrete equations can tell."""

    def apply(record):
        head = node_of(record, "n2")
        if change == "argument":
            head["args"]["out_features"] = 11
        elif change == "argument_and_its_port":  # the public contract still says 10
            head["args"]["out_features"] = 11
            head["output_shapes"]["out"] = ["B", 11]
        elif change == "internal_shape":
            node_of(record, "n1")["output_shapes"]["out"] = ["B", 65]
        elif change == "upstream_width":  # n0 and n1 agree on 65, n2 still reads 64 features
            first, act = node_of(record, "n0"), node_of(record, "n1")
            first["args"]["out_features"] = 65
            first["output_shapes"]["out"] = ["B", 65]
            act["input_shapes"]["x"] = act["output_shapes"]["out"] = ["B", 65]
            head["input_shapes"]["x"] = ["B", 65]
        elif change == "input_dtype":
            record["input_dtype"] = "int64"

    refused(tampered(plans["mlp"], apply), "E_INTEGRITY")


def _deep_chain(width=16, depth=30):
    """``linear(width)`` repeated: every node but the last saves the same arguments and shapes."""
    return hndl.resolve("\n".join([f"linear({width})"] * (depth - 1) + ["linear()"]),
                        input_shape=("B", width), output_shape=("B", 10))


def test_tampering_one_of_many_repeated_nodes_is_caught():
    """Nodes that repeat one call on one shape share one check; a node whose saved output shape
    alone differs from its twins' is still checked, and blamed."""

    def widen_one(record):  # n21 reads 17 features consistently; only n20 (16 out features) is wrong
        node_of(record, "n20")["output_shapes"]["out"] = ["B", 17]
        reader = node_of(record, "n21")
        reader["input_shapes"]["x"] = ["B", 17]
        reader["args"]["in_features"] = 17

    error = refused(tampered(_deep_chain(), widen_one), "E_INTEGRITY")
    assert error.location.node == "n20", str(error)
    assert "17" in error.message


def test_a_retyped_argument_deep_in_a_chain_of_twins_is_refused():
    """``bias: 1`` is not ``bias: true``, even when twenty nodes before it saved ``true``."""

    def retype(record):
        node_of(record, "n25")["args"]["bias"] = 1

    error = refused(tampered(_deep_chain(), retype), "E_INTEGRITY")
    assert error.location.node == "n25"


def test_a_deep_chain_of_twins_restores_unchanged():
    plan = _deep_chain()
    assert ResolvedPlan.from_json(plan.to_json()).to_json() == plan.to_json()


def test_resigned_consistent_edits_are_not_tampering(plans):
    """A complete, consistent change is a different valid plan (the digests are not secrets)."""

    def widen(record):
        head = node_of(record, "n2")
        head["args"]["out_features"] = 11
        head["output_shapes"]["out"] = ["B", 11]
        record["output_shape"] = ["B", 11]

    restored = ResolvedPlan.from_json(tampered(plans["mlp"], widen))
    assert restored.output_shape == ("B", 11)


def test_a_non_normalized_argument_is_refused(plans):
    def loosen(record):
        node_of(record, "n4")["args"]["negative_slope"] = 1  # saved normalized as a float

    named = plans["named_ports"]
    assert node_of(json.loads(named.to_json()), "n4")["args"]["negative_slope"] == 0.2
    refused(tampered(named, loosen), "E_INTEGRITY")

    def retype(record):
        node_of(record, "n0")["args"]["bias"] = 1

    refused(tampered(plans["mlp"], retype), "E_INTEGRITY")


@pytest.mark.parametrize("where", ["top", "node"])
def test_a_removed_field_is_a_schema_error(where, plans):
    for field in (["output_ref", "input_dtype", "frontend", "digests"] if where == "top"
                  else ["trainability", "initialization", "provenance", "source", "args", "outputs"]):
        record = json.loads(plans["mlp"].to_json())
        if where == "top":
            del record[field]
            text = canonical(record).decode("utf-8")
        else:
            del node_of(record, "n1")[field]
            text = resign(record) if field != "outputs" else canonical(record).decode("utf-8")
        error = refused(text, "E_SCHEMA")
        assert field in error.message, error.message


def test_an_added_field_is_a_schema_error(plans):
    record = json.loads(plans["mlp"].to_json())
    record["comment"] = "hello"
    refused(resign(record), "E_SCHEMA")
    record = json.loads(plans["mlp"].to_json())
    node_of(record, "n0")["state_bytes"] = 33024  # §10: no node carries a state size
    refused(resign(record), "E_SCHEMA")
    record = json.loads(plans["mlp"].to_json())
    node_of(record, "n0")["source"]["note"] = "x"
    refused(resign(record), "E_SCHEMA")


def test_port_lists_are_saved_together_and_only_when_needed(plans):
    record = json.loads(plans["named_ports"].to_json())
    del record["outputs"]
    refused(resign(record), "E_SCHEMA")

    def add_default_lists(record):
        record["inputs"] = [{"name": "x", "shape": ["B", 128], "dtype": "float32"}]
        record["outputs"] = [{"name": "output", "ref": "node:n2/out", "shape": ["B", 10]}]

    refused(tampered(plans["mlp"], add_default_lists), "E_SCHEMA")

    def empty_inputs(record):
        record["inputs"] = []  # not the same as omitting the field

    refused(tampered(plans["named_ports"], empty_inputs), "E_SCHEMA")
    scores = hndl.resolve(SCORES, input_shape=("B", 128), output_shape={"scores": ("B", 10)})
    assert "inputs" in json.loads(scores.to_json())
    refused(tampered(scores, empty_inputs), "E_SCHEMA")

    def missing_restatement(record):
        record["input_shape"] = ["B", 2, 28, 28]

    refused(tampered(plans["named_ports"], missing_restatement), "E_SCHEMA")


def test_duplicate_keys_are_a_schema_error(plans):
    text = plans["mlp"].to_json()
    assert text.count(',"dtype":"float32"') == 1
    error = refused(text.replace(',"dtype":"float32"', ',"dtype":"float32","dtype":"float32"'), "E_SCHEMA")
    assert "duplicate" in error.message
    nested = text.replace('"bias":true', '"bias":true,"bias":true', 1)
    assert refused(nested, "E_SCHEMA")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_non_finite_numbers_are_a_schema_error(literal, plans):
    text = plans["init"].to_json()
    assert '"bias":0.10000000149011612' in text
    refused(text.replace('"bias":0.10000000149011612', f'"bias":{literal}'), "E_SCHEMA")


def test_non_finite_numbers_are_refused_even_where_the_digest_would_match(plans):
    record = json.loads(plans["mlp"].to_json())
    record["frontend"]["weight"] = 1.5
    text = resign(record).replace('"weight":1.5', '"weight":NaN')
    refused(text, "E_SCHEMA")


@pytest.mark.parametrize("field, value", [
    ("schema_version", 2), ("schema_version", 0), ("resolution_version", 2),
])
def test_unknown_versions_are_state_version_errors_with_a_remedy(field, value, plans):
    def bump(record):
        record[field] = value

    error = refused(tampered(plans["mlp"], bump), "E_STATE_VERSION")
    assert error.location.field == field
    assert error.remedies and any("re-resolve" in remedy or "release" in remedy for remedy in error.remedies)
    # the version check comes first: digests left stale give the same answer
    record = json.loads(plans["mlp"].to_json())
    record[field] = value
    refused(canonical(record).decode("utf-8"), "E_STATE_VERSION")


def test_a_version_that_is_not_an_integer_is_a_schema_error(plans):
    for value in (True, "1", 1.0):
        def bump(record, value=value):
            record["schema_version"] = value

        refused(tampered(plans["mlp"], bump), "E_SCHEMA")


def test_an_unregistered_identity_is_a_state_version_error(plans):
    def upgrade(record):
        node_of(record, "n0")["op"] = "linear@9"

    error = refused(tampered(plans["mlp"], upgrade), "E_STATE_VERSION")
    assert "linear@9" in error.message and error.remedies

    def unknown(record):
        node_of(record, "n1")["op"] = "example.gelu@1"

    refused(tampered(plans["mlp"], unknown), "E_STATE_VERSION")


def test_an_identity_without_a_version_is_a_schema_error(plans):
    def strip(record):
        node_of(record, "n1")["op"] = "relu"

    refused(tampered(plans["mlp"], strip), "E_SCHEMA")


@pytest.mark.parametrize("entry", ["0*B", "B*2", "2*C", "1*B", "02*B", "2 * B", "C", "", 2])
def test_malformed_batch_entries_are_schema_errors(entry, plans):
    def damage(record):
        both = node_of(record, "n0")  # both = concat(x, x, axis=0) -> 2*B
        three = node_of(record, "n1")
        both["output_shapes"]["out"][0] = entry
        three["input_shapes"]["x0"][0] = entry

    error = refused(tampered(plans["batch_multiples"], damage), "E_SCHEMA")
    assert error.location.field in ("output_shapes", "input_shapes")


def test_a_huge_batch_multiple_is_a_resource_error(plans):
    def damage(record):
        node_of(record, "n0")["output_shapes"]["out"][0] = "1025*B"
        node_of(record, "n1")["input_shapes"]["x0"][0] = "1025*B"

    refused(tampered(plans["batch_multiples"], damage), "E_RESOURCE")


def test_a_batch_multiple_in_an_external_contract_is_a_schema_error(plans):
    def external(record):
        record["input_shape"][0] = "2*B"
        node_of(record, "n0")["input_shapes"]["x0"][0] = "2*B"

    refused(tampered(plans["batch_multiples"], external), "E_SCHEMA")

    def public(record):
        record["output_shape"][0] = "2*B"

    refused(tampered(plans["batch_multiples"], public), "E_SCHEMA")


def test_a_consistent_wrong_batch_multiple_is_an_integrity_error(plans):
    def wrong(record):  # concat of two B inputs claims 3*B, and its consumer agrees
        node_of(record, "n0")["output_shapes"]["out"][0] = "3*B"
        node_of(record, "n1")["input_shapes"]["x0"][0] = "3*B"

    refused(tampered(plans["batch_multiples"], wrong), "E_INTEGRITY")


@pytest.mark.parametrize("extent", [0, -1, 1.0, "64", True, None])
def test_non_positive_or_non_integer_extents_are_schema_errors(extent, plans):
    def damage(record):
        node_of(record, "n0")["output_shapes"]["out"][1] = extent
        node_of(record, "n1")["input_shapes"]["x"][1] = extent

    refused(tampered(plans["mlp"], damage), "E_SCHEMA")


def test_plan_text_over_sixteen_mebibytes_is_a_resource_error(plans):
    text = plans["mlp"].to_json()
    padded = text + " " * (16 * 2**20 - len(text.encode("utf-8")) + 1)
    refused(padded, "E_RESOURCE")
    refused(padded.encode("utf-8"), "E_RESOURCE")
    # multi-byte characters count as bytes, not characters
    record = json.loads(text)
    record["frontend"]["note"] = "π" * (8 * 2**20 + 1)
    refused(canonical(record).decode("utf-8"), "E_RESOURCE")
    # exactly at the bound is not a resource error (it is still valid, whitespace-padded JSON)
    at_bound = text + " " * (16 * 2**20 - len(text.encode("utf-8")))
    assert ResolvedPlan.from_json(at_bound).to_json() == text


@pytest.mark.parametrize("depth", [80, 600, 990, 5_000, 200_000])
def test_deeply_nested_json_is_refused_cleanly(depth, plans):
    raw = "[" * depth + "]" * depth
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(raw)
    assert caught.value.code in ("E_RESOURCE", "E_SCHEMA")
    text = plans["mlp"].to_json()
    hidden = text[:-1] + ',"deep":' + raw + "}"
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(hidden)
    assert caught.value.code in ("E_RESOURCE", "E_SCHEMA")


@pytest.mark.parametrize("depth", [80, 600, 900])
def test_deep_nesting_inside_free_form_fields_is_refused_cleanly(depth, plans):
    """Depth hidden where the format allows free-form data, with both digests valid."""
    record = json.loads(plans["mlp"].to_json())
    deep = 0
    for _ in range(depth):
        deep = [deep]
    record["frontend"]["deep"] = deep
    text = resign(record)  # depths stay below what json can encode
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(text)
    assert caught.value.code in ("E_RESOURCE", "E_SCHEMA")


@pytest.mark.parametrize("where", [
    "frontend", "args", "derivations", "initialization", "scheme", "trainability", "input_ref", "port_shape",
    "batch_entry", "provenance", "contract", "output_port",
])
def test_deep_nesting_anywhere_is_refused_cleanly(where, plans):
    deep = 0
    for _ in range(900):
        deep = [deep]

    def bury(record):
        first = node_of(record, "n0")
        target = {
            "frontend": (record["frontend"], "deep"),
            "args": (first["args"], "bias"),
            "derivations": (first["source"]["derivations"], "bias"),
            "initialization": (first["initialization"]["overrides"], "weight"),
            "scheme": (node_of(record, "n2")["initialization"]["overrides"]["weight"], "gain"),
            "trainability": (first["trainability"]["overrides"], "weight"),
            "input_ref": (first["inputs"], "x"),
            "port_shape": (first["input_shapes"], "x"),
            "batch_entry": (first["input_shapes"]["x"], 0),
            "provenance": (first["provenance"], "bias"),
            "contract": (record["input_shape"], 0),
            "output_port": (record["output_shape"], 1),
        }[where]
        target[0][target[1]] = deep

    text = tampered(plans["init"], bury)  # 900 levels stay below what json can encode
    with pytest.raises(HNDLError):
        ResolvedPlan.from_json(text)


def test_a_variadic_port_list_inconsistent_with_its_argument_is_a_binding_error(plans):
    def extra_port(record):
        split = node_of(record, "n2")  # chunk(three, 3, dim=0)
        split["outputs"].append("out3")
        split["output_shapes"]["out3"] = ["B", 3, 8, 8]

    error = refused(tampered(plans["batch_multiples"], extra_port), "E_BINDING")
    assert error.location.node == "n2"

    def more_chunks(record):
        node_of(record, "n0")["args"]["chunks"] = 3  # ports still out0, out1

    refused(tampered(plans["chunk"], more_chunks), "E_BINDING")

    def fewer_ports(record):
        split = node_of(record, "n0")
        split["outputs"] = ["out0"]
        del split["output_shapes"]["out1"]
        consumer = node_of(record, "n1")
        consumer["inputs"]["x1"] = "node:n0/out0"

    refused(tampered(plans["chunk"], fewer_ports), "E_BINDING")


def test_port_bindings_must_match_the_declaration(plans):
    def rename(record):
        head = node_of(record, "n2")
        head["inputs"] = {"y": head["inputs"]["x"]}
        head["input_shapes"] = {"y": head["input_shapes"]["x"]}

    refused(tampered(plans["mlp"], rename), "E_BINDING")

    def dangling(record):
        node_of(record, "n2")["inputs"]["x"] = "node:n9/out"

    refused(tampered(plans["mlp"], dangling), "E_BINDING")

    def shapes_without_port(record):
        node_of(record, "n2")["input_shapes"]["w"] = ["B", 64]

    refused(tampered(plans["mlp"], shapes_without_port), "E_BINDING")


def test_a_node_order_that_is_not_topological_is_an_integrity_error(plans):
    def reorder(record):
        record["nodes"][0], record["nodes"][1] = record["nodes"][1], record["nodes"][0]

    refused(tampered(plans["mlp"], reorder), "E_INTEGRITY")

    def reverse(record):
        record["nodes"].reverse()

    refused(tampered(plans["branched"], reverse), "E_INTEGRITY")


def test_a_duplicated_node_id_is_refused(plans):
    def duplicate(record):
        node_of(record, "n1")["id"] = "n0"
        node_of(record, "n0")  # still there
        node_of(record, "n2")["inputs"]["x"] = "node:n0/out"

    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(tampered(plans["mlp"], duplicate))
    assert caught.value.code in ("E_INTEGRITY", "E_SCHEMA")


def test_construction_records_are_checked(plans):
    def scheme_under_v1(record):
        node_of(record, "n2")["initialization"]["kind"] = "torch_default@1"

    error = refused(tampered(plans["init"], scheme_under_v1), "E_INITIALIZATION")
    assert error.location.node == "n2"

    def v2_without_scheme(record):
        node_of(record, "n0")["initialization"] = {"kind": "torch_default@2", "overrides": {"bias": 0.0}}

    refused(tampered(plans["mlp"], v2_without_scheme), "E_INITIALIZATION")

    def unrounded(record):
        node_of(record, "n0")["initialization"]["overrides"] = {"bias": 0.1}  # not a float32 value

    refused(tampered(plans["mlp"], unrounded), "E_INITIALIZATION")

    def incomplete_scheme(record):
        del node_of(record, "n2")["initialization"]["overrides"]["weight"]["gain"]

    refused(tampered(plans["init"], incomplete_scheme), "E_INITIALIZATION")

    def unknown_kind(record):
        node_of(record, "n0")["initialization"]["kind"] = "torch_default@3"

    refused(tampered(plans["mlp"], unknown_kind), "E_INITIALIZATION")

    def not_a_flag(record):
        node_of(record, "n0")["trainability"]["default"] = "yes"

    refused(tampered(plans["mlp"], not_a_flag), "E_TRAINABILITY")

    def combined(record):
        node_of(record, "n0")["trainability"] = {"default": False, "overrides": {"bias": True}}

    refused(tampered(plans["mlp"], combined), "E_TRAINABILITY")


def test_unknown_origins_and_malformed_source_are_schema_errors(plans):
    def origin(record):
        node_of(record, "n0")["provenance"]["out_features"] = "guessed"

    refused(tampered(plans["mlp"], origin), "E_SCHEMA")

    def missing_origin(record):
        del node_of(record, "n0")["provenance"]["bias"]

    refused(tampered(plans["mlp"], missing_origin), "E_SCHEMA")

    def line(record):
        node_of(record, "n0")["source"]["line"] = "three"

    refused(tampered(plans["mlp"], line), "E_SCHEMA")


def test_an_argument_the_declaration_lacks_is_an_integrity_error(plans):
    def extra(record):
        head = node_of(record, "n2")
        head["args"]["dropout"] = 0.5
        head["provenance"]["dropout"] = "explicit"

    refused(tampered(plans["mlp"], extra), "E_INTEGRITY")


@pytest.mark.parametrize("text", [None, 3, {"schema_version": 1}, ["{}"], 1.5])
def test_non_text_input_is_a_schema_error(text):
    refused(text, "E_SCHEMA")


@pytest.mark.parametrize("text", ["", "{", "[]", '"plan"', "null", "{}"])
def test_malformed_json_is_a_schema_error(text):
    refused(text, "E_SCHEMA")


def test_invalid_utf8_bytes_are_a_schema_error(plans):
    refused(plans["mlp"].to_json().encode("utf-8").replace("π".encode("utf-8"), b"\xff\xfe"), "E_SCHEMA")


def test_limits_are_validated_and_applied(plans):
    text = plans["generator"].to_json()
    refused(text, "E_SCHEMA", limits={"max_nodes": 0})
    refused(text, "E_SCHEMA", limits={"no_such_limit": 3})
    refused(text, "E_RESOURCE", limits={"max_nodes": 5})


# == restoration never re-runs anything ======================================================================
def test_restoring_never_runs_the_callable(tmp_path, registry):
    module_file = tmp_path / "hndl_throwaway_model.py"
    module_file.write_text(textwrap.dedent("""
        from hndl import ops

        CALLS = []


        def throwaway(x):
            CALLS.append(1)
            if len(CALLS) > 1:
                raise AssertionError("the author callable ran again")
            ops.linear(32)
            ops.relu()
            ops.linear()
    """), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("hndl_throwaway_model", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hndl_throwaway_model"] = module
    try:
        spec.loader.exec_module(module)
        calls = module.CALLS
        line = module.throwaway.__code__.co_firstlineno
        plan = hndl.resolve_callable(module.throwaway, **MLP_CONTRACTS, registry=registry)
        assert len(calls) == 1
        text = plan.to_json()
        assert len(calls) == 1
    finally:
        del sys.modules["hndl_throwaway_model"]
    del module.throwaway, module, spec, plan
    module_file.unlink()

    restored = ResolvedPlan.from_json(text, registry=registry)
    assert len(calls) == 1
    assert restored.to_json() == text
    assert restored.frontend["qualname"] == "throwaway"
    assert restored.frontend["module"] == "hndl_throwaway_model"
    assert restored.frontend["file"] == str(module_file)
    assert restored.frontend["line"] == line
    str(restored), restored.describe()
    from hndl.torch import build

    build(restored, device="cpu")
    assert len(calls) == 1


def test_restoring_never_parses_source_resolves_or_selects_a_policy(plans, registry, monkeypatch):
    import ast

    from hndl.declaration import OperatorSpec
    from hndl.frontends import pipeline
    from hndl.resolve import resolver

    texts = {name: plans[name].to_json() for name in ("generator", "named_ports")}

    def refuse(what):
        def refused_call(*args, **kwargs):
            raise AssertionError(f"restoration called {what}")

        return refused_call

    monkeypatch.setattr(ast, "parse", refuse("ast.parse"))
    monkeypatch.setattr(pipeline, "parse_isolated", refuse("the configuration parser"))
    monkeypatch.setattr(pipeline, "_resolve_source", refuse("configuration resolution"))
    monkeypatch.setattr(resolver, "resolve_graph", refuse("the resolver"))
    monkeypatch.setattr(OperatorSpec, "policy", refuse("a policy lookup"))
    for name, text in texts.items():
        restored = ResolvedPlan.from_json(text, registry=registry)
        assert restored.to_json() == text
    generator = ResolvedPlan.from_json(texts["generator"], registry=registry)
    for node_id in ("n3", "n5", "n7"):
        original, restored = plans["generator"].node(node_id), generator.node(node_id)
        assert dict(restored.args) == dict(original.args)
        assert dict(restored.provenance) == dict(original.provenance)
        assert restored.source["policy"] == "spatial.up2_transpose@1"
        assert "policy" in restored.provenance.values()


def test_a_policy_plan_restores_its_saved_arguments_even_if_the_policy_changed(plans):
    """Restoration takes the expanded arguments as saved, never the registry's current policy."""
    text = plans["generator"].to_json()
    deconv = node_of(json.loads(text), "n3")
    assert deconv["source"]["policy"] == "spatial.up2_transpose@1"
    policy_args = {name for name, origin in deconv["provenance"].items() if origin == "policy"}
    assert policy_args  # e.g. stride, kernel_size, padding
    restored = ResolvedPlan.from_json(text)
    for name in policy_args:
        assert restored.node("n3").args[name] == plans["generator"].node("n3").args[name]


# == serialization allocates nothing ==============================================================================
class _RefuseTensorOps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"serialization ran the tensor operation {func}")


def test_serialization_allocates_nothing(plans, registry, softsign_registry, monkeypatch):
    import torch._dynamo  # noqa: F401  -- finish torch's lazy imports before refusing modules

    texts = {name: plan.to_json() for name, plan in plans.items()}
    for name, text in texts.items():  # warm every lazy import on the restoration path
        ResolvedPlan.from_json(text, registry=_registry_for(name, registry, softsign_registry))

    def refuse(*args, **kwargs):
        raise AssertionError("serialization constructed a module")

    monkeypatch.setattr(nn.Module, "__init__", refuse)
    with _RefuseTensorOps(), pytest.raises(AssertionError):
        torch.zeros(1)
    with pytest.raises(AssertionError):
        nn.ReLU()
    torch_rng, python_rng = torch.get_rng_state(), random.getstate()
    with _RefuseTensorOps():
        for name, plan in plans.items():
            text = plan.to_json()
            assert text == texts[name]
            restored = ResolvedPlan.from_json(text, registry=_registry_for(name, registry, softsign_registry))
            assert restored.to_json() == text
            restored.semantic_digest, restored.describe(), str(restored)
            ResolvedPlan.from_json(text.encode("utf-8"), registry=_registry_for(name, registry, softsign_registry))
    assert torch.equal(torch.get_rng_state(), torch_rng)
    assert random.getstate() == python_rng


# == a restored plan builds and carries the original state =========================================================
@pytest.mark.parametrize("name", ["mlp", "generator", "named_ports", "batch_multiples", "init", "chunk"])
def test_restored_plan_builds_and_loads_the_original_state(name, plans, registry):
    from hndl.torch import build

    torch.manual_seed(0)
    original = build(plans[name], device="cpu")
    restored_plan = ResolvedPlan.from_json(plans[name].to_json(), registry=registry)
    torch.manual_seed(1)
    rebuilt = build(restored_plan, device="cpu")
    assert list(rebuilt.state_dict()) == list(original.state_dict())
    rebuilt.load_state_dict(original.state_dict(), strict=True)
    generator = torch.Generator().manual_seed(2)
    inputs = {
        port["name"]: torch.randn(2, *port["shape"][1:], generator=generator) for port in plans[name].inputs
    }
    expected, actual = original(**inputs), rebuilt(**inputs)
    assert list(actual) == list(expected)
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key
    # trainability masks are construction declarations of the plan, not of the state dict
    assert [p.requires_grad for p in rebuilt.parameters()] == [p.requires_grad for p in original.parameters()]


def test_network_state_loads_into_a_build_of_the_restored_plan(plans):
    from hndl.torch import build, network

    model = network(MLP, **MLP_CONTRACTS, device="cpu")
    rebuilt = build(ResolvedPlan.from_json(model.plan.to_json()), device="cpu")
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(4, 128)
    assert torch.equal(rebuilt(x=x)["output"], model(x))


_CHILD = """
import sys
import torch
from hndl import ResolvedPlan
from hndl.torch import build

folder = sys.argv[1]
with open(folder + "/plan.json", encoding="utf-8") as handle:
    plan = ResolvedPlan.from_json(handle.read())
module = build(plan, device="cpu")
module.load_state_dict(torch.load(folder + "/state.pt", weights_only=True), strict=True)
inputs = torch.load(folder + "/inputs.pt", weights_only=True)
with torch.no_grad():
    outputs = module(**inputs)
torch.save({key: value for key, value in outputs.items()}, folder + "/outputs.pt")
with open(folder + "/plan_again.json", "w", encoding="utf-8") as handle:
    handle.write(plan.to_json())
"""


def test_a_fresh_process_restores_builds_and_reproduces_the_outputs(tmp_path, plans):
    from hndl.torch import build

    plan = plans["named_ports"]
    text = plan.to_json()
    (tmp_path / "plan.json").write_text(text, encoding="utf-8")
    torch.manual_seed(3)
    module = build(plan, device="cpu")
    torch.save(module.state_dict(), tmp_path / "state.pt")
    generator = torch.Generator().manual_seed(4)
    inputs = {"x": torch.randn(3, 1, 28, 28, generator=generator), "y": torch.randn(3, 10, generator=generator)}
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected = module(**inputs)
    (tmp_path / "child.py").write_text(_CHILD, encoding="utf-8")
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(hndl.__file__).parents[1]),
                                                              environment.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=environment,
    )
    assert completed.returncode == 0, completed.stderr
    actual = torch.load(tmp_path / "outputs.pt", weights_only=True)
    assert list(actual) == ["logits", "features"]
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key
    assert (tmp_path / "plan_again.json").read_text(encoding="utf-8") == text


# == the published JSON Schema ======================================================================================
@pytest.fixture(scope="module")
def schema():
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def test_schema_names_exactly_the_fields_persist_reads(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["properties"]) == persist.PLAN_FIELDS | persist.OPTIONAL_PLAN_FIELDS
    assert set(schema["required"]) == persist.PLAN_FIELDS
    assert schema["additionalProperties"] is False
    node = schema["$defs"]["node"]
    assert set(node["properties"]) == persist.NODE_FIELDS
    assert set(node["required"]) == persist.NODE_FIELDS
    assert node["additionalProperties"] is False
    assert set(schema["$defs"]["source"]["properties"]) == persist.SOURCE_FIELDS
    assert set(schema["$defs"]["source"]["required"]) == persist.SOURCE_FIELDS
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert schema["properties"]["resolution_version"]["const"] == RESOLUTION_VERSION
    assert set(schema["$defs"]["origin"]["enum"]) == set(persist.ORIGINS)


def test_every_saved_plan_validates_against_the_schema(schema, plans):
    for name, plan in plans.items():
        errors = _validate(json.loads(plan.to_json()), schema, schema)
        assert not errors, (name, errors[:5])


def test_the_published_vectors_validate_against_the_schema(schema):
    vectors = sorted((Path(__file__).parent / "vectors").glob("*.json"))
    vectors = [path for path in vectors if path.name != "digests.json"]
    assert vectors, "tests/vectors holds the published plan vectors"
    for path in vectors:
        errors = _validate(json.loads(path.read_text(encoding="utf-8")), schema, schema)
        assert not errors, (path.name, errors[:5])


@pytest.mark.parametrize("damage", [
    "batch_zero", "batch_suffix", "batch_symbol_in_extent", "zero_extent", "digest_case", "extra_node_field",
    "missing_node_field", "extra_top_field", "origin", "rank_five", "init_kind",
])
def test_the_schema_rejects_what_persist_rejects(damage, schema, plans):
    record = json.loads(plans["batch_multiples"].to_json())
    node = node_of(record, "n0")
    if damage == "batch_zero":
        node["output_shapes"]["out"][0] = "0*B"
    elif damage == "batch_suffix":
        node["output_shapes"]["out"][0] = "B*2"
    elif damage == "batch_symbol_in_extent":
        node["output_shapes"]["out"][1] = "B"
    elif damage == "zero_extent":
        node["output_shapes"]["out"][1] = 0
    elif damage == "digest_case":
        record["digests"]["semantic"] = record["digests"]["semantic"].upper()
    elif damage == "extra_node_field":
        node["state_bytes"] = 0
    elif damage == "missing_node_field":
        del node["trainability"]
    elif damage == "extra_top_field":
        record["comment"] = ""
    elif damage == "origin":
        node["provenance"]["axis"] = "guessed"
    elif damage == "rank_five":
        node["output_shapes"]["out"].append(1)
    elif damage == "init_kind":
        node["initialization"]["kind"] = "torch_default@3"
    assert _validate(record, schema, schema)
    text = resign(record)
    if damage == "digest_case":
        text = text.replace(record["digests"]["semantic"], record["digests"]["semantic"].upper())
    with pytest.raises(HNDLError):
        ResolvedPlan.from_json(text)


# A small validator for the subset of JSON Schema 2020-12 that docs/plan.schema.json uses, so
# the published schema is checked against real plans without a third-party dependency.
_SUPPORTED = {
    "$schema", "$id", "$defs", "$ref", "$comment", "title", "description", "type", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "enum", "const", "pattern",
    "minimum", "exclusiveMinimum", "oneOf", "anyOf", "propertyNames", "minProperties", "maxProperties",
    "minLength", "maxLength", "examples", "default",
}


def _validate(value, node, root, path="$"):
    unknown = set(node) - _SUPPORTED
    assert not unknown, f"schema keyword(s) {unknown} at {path} are not understood by this test"
    errors = []
    if "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        errors += _validate(value, target, root, path)
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        checks = {
            "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
            "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
            "null": lambda v: v is None,
            "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer()),
            "number": lambda v: type(v) in (int, float),
        }
        if not any(checks[kind](value) for kind in types):
            return errors + [f"{path}: {value!r} is not {types}"]
    if "const" in node and not (value == node["const"] and type(value) is type(node["const"])):
        errors.append(f"{path}: {value!r} is not {node['const']!r}")
    if "enum" in node and not any(value == item and type(value) is type(item) for item in node["enum"]):
        errors.append(f"{path}: {value!r} not in {node['enum']}")
    if isinstance(value, str):
        if "pattern" in node and not re.search(node["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {node['pattern']}")
        if len(value) < node.get("minLength", 0) or len(value) > node.get("maxLength", math.inf):
            errors.append(f"{path}: length of {value!r}")
    if type(value) in (int, float) and not isinstance(value, bool):
        if "minimum" in node and value < node["minimum"]:
            errors.append(f"{path}: {value} < {node['minimum']}")
        if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
            errors.append(f"{path}: {value} <= {node['exclusiveMinimum']}")
    if isinstance(value, dict):
        for key in node.get("required", ()):
            if key not in value:
                errors.append(f"{path}: missing {key}")
        properties = node.get("properties", {})
        for key, item in value.items():
            if "propertyNames" in node:
                errors += _validate(key, node["propertyNames"], root, f"{path}.<{key}>")
            if key in properties:
                errors += _validate(item, properties[key], root, f"{path}.{key}")
            elif node.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected {key}")
            elif isinstance(node.get("additionalProperties"), dict):
                errors += _validate(item, node["additionalProperties"], root, f"{path}.{key}")
        if len(value) < node.get("minProperties", 0) or len(value) > node.get("maxProperties", math.inf):
            errors.append(f"{path}: number of properties")
    if isinstance(value, list):
        prefix = node.get("prefixItems", [])
        for index, item in enumerate(value):
            if index < len(prefix):
                errors += _validate(item, prefix[index], root, f"{path}[{index}]")
            elif "items" in node:
                if node["items"] is False:
                    errors.append(f"{path}: unexpected item {index}")
                else:
                    errors += _validate(item, node["items"], root, f"{path}[{index}]")
        if len(value) < node.get("minItems", 0) or len(value) > node.get("maxItems", math.inf):
            errors.append(f"{path}: {len(value)} items")
    if "oneOf" in node:
        passing = sum(not _validate(value, option, root, path) for option in node["oneOf"])
        if passing != 1:
            errors.append(f"{path}: {value!r} matches {passing} of oneOf")
    if "anyOf" in node and not any(not _validate(value, option, root, path) for option in node["anyOf"]):
        errors.append(f"{path}: {value!r} matches none of anyOf")
    return errors


def test_restored_nodes_receive_their_inputs_in_declared_order():
    """JSON sorts object keys; restoration must bind ports in declaration order again."""
    import torch

    from hndl.torch import build

    style = hndl.resolve(
        "z1, z2 = split(64)\nlinear(z1)\nfeatures = reshape(32, 4, 4)\nadaptive_norm(features, z2)",
        input_shape=("B", 128), output_shape=("B", 32, 4, 4),
    )
    restored = ResolvedPlan.from_json(style.to_json())
    assert list(restored.node("n3").inputs) == ["x", "params"]
    wide = hndl.resolve(
        "parts = chunk(x, 12)\n"
        "a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 = parts\n"
        "concat(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)",
        input_shape=("B", 12), output_shape=("B", 12),
    )
    back = ResolvedPlan.from_json(wide.to_json())
    assert list(back.node("n1").inputs) == [f"x{i}" for i in range(12)]
    x = torch.arange(12.0).reshape(1, 12)
    assert torch.equal(build(back, device="cpu")(x=x)["output"], x)
    torch.manual_seed(0)
    original = build(style, device="cpu")
    rebuilt = build(restored, device="cpu")
    rebuilt.load_state_dict(original.state_dict())
    z = torch.randn(2, 128)
    torch.testing.assert_close(rebuilt(x=z)["output"], original(x=z)["output"])
