"""Tests for hndl.limits: the bounded resource mapping of §5, accepted by every entry point (§7)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry, ops
from hndl.limits import DEFAULT_LIMITS, validate_limits
from hndl.torch import build, network, network_file, network_from_callable, parameter_counts

#: The §7 MLP: input [B, 128], output [B, 10], three nodes, three edges.
MLP = """
linear(64)
relu()
linear()
"""
CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
#: float32 bytes of linear(128 -> 64) and linear(64 -> 10), weights and biases.
N0_BYTES = (128 * 64 + 64) * 4
N2_BYTES = (64 * 10 + 10) * 4
MLP_BYTES = N0_BYTES + N2_BYTES


def classifier(x):
    ops.linear(64)
    ops.relu()
    ops.linear()


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


@pytest.fixture(scope="module")
def plan():
    return hndl.resolve(MLP, **CONTRACT)


@pytest.fixture
def mlp_file(tmp_path):
    path = tmp_path / "mlp.hndl"
    path.write_text(MLP, encoding="utf-8")
    return path


# -- the mapping -------------------------------------------------------------------------------
def test_default_limits_have_the_six_keys_of_section_5_the_per_node_module_bound_and_the_rank_trials():
    assert set(DEFAULT_LIMITS) == {
        "max_nodes", "max_edges", "max_dimension", "max_elements", "max_state_bytes", "max_iterations",
        "max_node_modules", "max_rank_trials",
    }
    assert DEFAULT_LIMITS["max_rank_trials"] == 256
    assert all(type(value) is int and value > 0 for value in DEFAULT_LIMITS.values())


def test_default_limits_are_read_only():
    with pytest.raises(TypeError):
        DEFAULT_LIMITS["max_nodes"] = 1


def test_no_limits_means_the_defaults():
    assert dict(validate_limits(None)) == dict(DEFAULT_LIMITS)
    assert dict(validate_limits({})) == dict(DEFAULT_LIMITS)


def test_caller_limits_merge_over_the_defaults():
    merged = validate_limits({"max_nodes": 5, "max_state_bytes": 1024})
    assert merged["max_nodes"] == 5
    assert merged["max_state_bytes"] == 1024
    for key in ("max_edges", "max_dimension", "max_elements", "max_iterations"):
        assert merged[key] == DEFAULT_LIMITS[key]
    assert set(merged) == set(DEFAULT_LIMITS)


def test_merged_limits_are_frozen_and_detached_from_the_callers_dict():
    mine = {"max_nodes": 5}
    merged = validate_limits(mine)
    mine["max_nodes"] = 6
    assert merged["max_nodes"] == 5
    with pytest.raises(TypeError):
        merged["max_nodes"] = 7
    assert DEFAULT_LIMITS["max_nodes"] != 5


def test_any_mapping_type_is_accepted():
    assert validate_limits(MappingProxyType({"max_edges": 9}))["max_edges"] == 9


def test_one_is_the_smallest_limit():
    assert validate_limits({key: 1 for key in DEFAULT_LIMITS}) == {key: 1 for key in DEFAULT_LIMITS}


BAD_LIMITS = [
    pytest.param({"max_nodez": 10}, id="unknown-key"),
    pytest.param({"max_bytes": 10}, id="unknown-key-2"),
    pytest.param({"max_nodes": "10"}, id="string"),
    pytest.param({"max_nodes": 10.0}, id="float"),
    pytest.param({"max_nodes": None}, id="none"),
    pytest.param({"max_nodes": True}, id="bool"),
    pytest.param({"max_iterations": False}, id="bool-false"),
    pytest.param({"max_nodes": 0}, id="zero"),
    pytest.param({"max_state_bytes": -1}, id="negative"),
    pytest.param([("max_nodes", 10)], id="list-of-pairs"),
    pytest.param(10, id="int"),
    pytest.param("max_nodes=10", id="string-mapping"),
]


@pytest.mark.parametrize("limits", BAD_LIMITS)
def test_malformed_limits_are_schema_errors(limits):
    with raises("E_SCHEMA") as caught:
        validate_limits(limits)
    assert caught.value.location.field.startswith("limits")


def test_an_unknown_limit_names_the_key_and_the_valid_ones():
    with raises("E_SCHEMA") as caught:
        validate_limits({"max_depth": 3})
    assert "max_depth" in caught.value.message
    assert any("max_nodes" in remedy for remedy in caught.value.remedies)


# -- every entry point accepts limits= ---------------------------------------------------------
def _entry_points(plan, path):
    return {
        "resolve": lambda limits: hndl.resolve(MLP, **CONTRACT, limits=limits),
        "resolve_file": lambda limits: hndl.resolve_file(path, **CONTRACT, limits=limits),
        "resolve_callable": lambda limits: hndl.resolve_callable(classifier, **CONTRACT, limits=limits),
        "network": lambda limits: network(MLP, **CONTRACT, device="cpu", limits=limits),
        "network_file": lambda limits: network_file(path, **CONTRACT, device="cpu", limits=limits),
        "network_from_callable": lambda limits: network_from_callable(
            classifier, **CONTRACT, device="cpu", limits=limits
        ),
        "build": lambda limits: build(plan, device="cpu", limits=limits),
        "parameter_counts": lambda limits: parameter_counts(plan, limits=limits),
    }


ENTRY_POINTS = [
    "resolve", "resolve_file", "resolve_callable", "network", "network_file",
    "network_from_callable", "build", "parameter_counts",
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_accepts_no_limits_and_explicit_limits(entry, plan, mlp_file):
    call = _entry_points(plan, mlp_file)[entry]
    assert call(None) is not None
    assert call({"max_nodes": 3, "max_edges": 3, "max_state_bytes": MLP_BYTES}) is not None


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    "limits",
    [{"max_nodez": 10}, {"max_nodes": True}, {"max_nodes": 0}, {"max_edges": -3}, {"max_nodes": 2.5}, [("max_nodes", 2)]],
    ids=["unknown", "bool", "zero", "negative", "float", "not-a-mapping"],
)
def test_every_entry_point_rejects_bad_limits(entry, limits, plan, mlp_file):
    with raises("E_SCHEMA"):
        _entry_points(plan, mlp_file)[entry](limits)


def test_bad_limits_fail_before_the_callable_runs():
    calls = []

    def fn(x):
        calls.append(x)

    with raises("E_SCHEMA"):
        hndl.resolve_callable(fn, input_shape=("B", 8), output_shape=("B", 8), limits={"max_nodes": -1})
    assert calls == []


# -- tight limits bite ---------------------------------------------------------------------------
def test_max_nodes_below_the_graph_is_a_resource_error():
    with raises("E_RESOURCE") as caught:
        hndl.resolve(MLP, **CONTRACT, limits={"max_nodes": 2})
    assert "max_nodes" in str(caught.value)
    assert hndl.resolve(MLP, **CONTRACT, limits={"max_nodes": 3}).nodes[2].id == "n2"


def test_max_nodes_bites_in_every_frontend(mlp_file):
    tight = {"max_nodes": 2}
    with raises("E_RESOURCE"):
        hndl.resolve_file(mlp_file, **CONTRACT, limits=tight)
    with raises("E_RESOURCE"):
        hndl.resolve_callable(classifier, **CONTRACT, limits=tight)
    with raises("E_RESOURCE"):
        network(MLP, **CONTRACT, device="cpu", limits=tight)
    with raises("E_RESOURCE"):
        network_from_callable(classifier, **CONTRACT, device="cpu", limits=tight)


def test_max_edges_below_the_graph_is_a_resource_error():
    with raises("E_RESOURCE") as caught:
        hndl.resolve(MLP, **CONTRACT, limits={"max_edges": 2})
    assert "max_edges" in str(caught.value)


def test_max_dimension_bounds_contract_extents():
    with raises("E_RESOURCE") as caught:
        hndl.resolve(MLP, **CONTRACT, limits={"max_dimension": 127})
    assert "max_dimension" in str(caught.value)
    hndl.resolve(MLP, **CONTRACT, limits={"max_dimension": 128})


def test_max_dimension_bounds_inferred_extents():
    # The contract stays small; only the inferred projection width 8 * 8 * 8 = 512 is large.
    with raises("E_RESOURCE"):
        hndl.resolve(
            "linear(512)\nrelu()\nlinear()", input_shape=("B", 8), output_shape=("B", 8),
            limits={"max_dimension": 256},
        )


def test_max_elements_bounds_a_ports_element_count():
    # Every port of the MLP holds 128, 64 or 10 elements per example; 100 must not admit 128.
    with raises("E_RESOURCE") as caught:
        hndl.resolve(MLP, **CONTRACT, limits={"max_elements": 100})
    assert "max_elements" in str(caught.value)
    hndl.resolve(MLP, **CONTRACT, limits={"max_elements": 128})


def test_max_state_bytes_fails_before_allocation(plan):
    with raises("E_RESOURCE") as caught:
        build(plan, device="cpu", limits={"max_state_bytes": 100})
    assert "max_state_bytes" in str(caught.value)
    assert caught.value.location.node == "n0"
    with raises("E_RESOURCE"):
        network(MLP, **CONTRACT, device="cpu", limits={"max_state_bytes": 100})


def test_max_state_bytes_is_an_inclusive_bound_on_the_running_total(plan):
    model = build(plan, device="cpu", limits={"max_state_bytes": MLP_BYTES})
    assert model.build_receipt["state_bytes"] == MLP_BYTES
    with raises("E_RESOURCE") as caught:
        build(plan, device="cpu", limits={"max_state_bytes": MLP_BYTES - 1})
    assert caught.value.location.node == "n2"


def test_state_budget_is_checked_on_the_meta_device_only():
    registry = Registry.builtins()
    devices = []

    @registry.operator("probe", identity="tests.probe", summary="Records where it is built.",
                       shape="x[B, ...] -> out[B, ...]")
    class Probe(nn.Module):
        """Owns 1000 float32 parameters and records the device it is constructed on."""

        def __init__(self):
            super().__init__()
            devices.append(torch.empty(0).device.type)
            self.weight = nn.Parameter(torch.zeros(1000))

        def forward(self, x):
            return x

    plan = hndl.resolve("probe()", input_shape=("B", 8), output_shape=("B", 8), registry=registry)
    with raises("E_RESOURCE"):
        build(plan, device="cpu", registry=registry, limits={"max_state_bytes": 3999})
    assert devices == ["meta"]  # measured, never really allocated

    devices.clear()
    build(plan, device="cpu", registry=registry, limits={"max_state_bytes": 4000})
    assert devices == ["meta", "cpu"]


# -- max_node_modules (issue 15, item 15) ----------------------------------------------------------------
#: 8 modules: the block, conv1, bn1, conv2, bn2, and the projection (a Sequential of a conv and a bn).
RESIDUAL = "residual_block(8, stride=2)"
IMAGE = {"input_shape": ("B", 4, 8, 8), "output_shape": ("B", 8, 4, 4)}


def test_max_node_modules_defaults_to_4096_and_is_a_positive_int():
    assert DEFAULT_LIMITS["max_node_modules"] == 4096
    assert validate_limits({"max_node_modules": 7})["max_node_modules"] == 7
    for bad in (0, -1, 1.5, True):
        with raises("E_SCHEMA"):
            validate_limits({"max_node_modules": bad})


def test_every_construction_entry_point_enforces_max_node_modules():
    plan = hndl.resolve(RESIDUAL, **IMAGE)
    tight = {"max_node_modules": 7}
    calls = {
        "build": lambda limits: build(plan, device="cpu", limits=limits),
        "parameter_counts": lambda limits: parameter_counts(plan, limits=limits),
        "network": lambda limits: network(RESIDUAL, **IMAGE, device="cpu", limits=limits),
    }
    for name, call in calls.items():
        with raises("E_RESOURCE") as caught:
            call(tight)
        assert caught.value.location.node == "n0", name
        assert "limits['max_node_modules']=7" in caught.value.message
        call({"max_node_modules": 8})
