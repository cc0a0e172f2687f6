"""The public surface (§7 "Signatures and shared behavior", §11 initializer schemes).

hndl exports resolve, resolve_file, resolve_callable, ops, Registry, ResolvedPlan, HNDLError
and the declaration types; hndl.torch exports the construction functions. Nothing else is
public.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

import hndl
import hndl.torch

SECTION_7 = [
    "resolve", "resolve_file", "resolve_callable", "ops", "Registry", "ResolvedPlan", "HNDLError",
    "operator", "Arg", "Example", "Policy",
]
#: The documented addition to the declaration types (issue 30): how torch writes an operator.
DECLARATION_ADDITIONS = ["TorchSpelling"]
INITIALIZERS = [
    "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal",
    "truncated_normal", "normal", "uniform", "orthogonal",
]
SUBMODULES = {
    "arg", "construction", "contracts", "declaration", "errors", "frontends", "graph", "limits", "packs",
    "collector", "inspection", "persist", "plan", "registry", "resolve", "shape_dsl", "torch",
    "bounded_read", "testing", "docs", "sphinx", "cli", "suggestions",  # the documented additions of the catalog issue: the harness and the page generator
    "plan_values", "plan_tables", "plan_encoding", "plan_restoration",  # issue 19: the layers below the plan types
    "drawing", "shape_text",  # issue 18: plan diagrams (DOT and its renderer) and shape text, below the plan
}
TORCH_API = [
    "build", "parameter_counts", "network", "network_file", "network_from_callable", "restore", "dry_run", "preflight",
    "initialize", "unsealed",
]
TORCH_SUBMODULES = {"build", "graph_module", "initialize", "instantiate", "module_hooks", "network", "plain", "plain_layers", "ports", "programs", "registrations", "state_record", "state_watch", "torch_edits"}


def test_all_is_exactly_section_7_plus_the_initializers():
    assert sorted(hndl.__all__) == sorted(SECTION_7 + INITIALIZERS + DECLARATION_ADDITIONS)
    assert len(hndl.__all__) == len(set(hndl.__all__)) == 20


@pytest.mark.parametrize("name", SECTION_7 + INITIALIZERS)
def test_every_public_name_imports_from_hndl(name):
    namespace = {}
    exec(f"from hndl import {name}", namespace)  # the statement a user writes (test code, not config)
    assert namespace[name] is getattr(hndl, name)


def test_star_import_binds_exactly_all():
    namespace = {}
    exec("from hndl import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(hndl.__all__)


def test_public_names_are_the_objects_they_claim_to_be():
    from hndl.construction import InitScheme
    from hndl.declaration import Arg, Example, Policy, operator
    from hndl.errors import HNDLError
    from hndl.frontends.pipeline import resolve, resolve_callable, resolve_file
    from hndl.plan import ResolvedPlan
    from hndl.registry import Registry

    assert hndl.resolve is resolve  # the function, not the hndl.resolve subpackage
    assert hndl.resolve_file is resolve_file
    assert hndl.resolve_callable is resolve_callable
    assert hndl.Registry is Registry
    assert hndl.ResolvedPlan is ResolvedPlan
    assert hndl.HNDLError is HNDLError
    assert (hndl.operator, hndl.Arg, hndl.Example, hndl.Policy) == (operator, Arg, Example, Policy)
    for name in INITIALIZERS:
        scheme = getattr(hndl, name)()
        assert isinstance(scheme, InitScheme) and scheme.kind == name


def test_resolve_is_the_function_even_after_importing_the_resolve_subpackage():
    importlib.import_module("hndl.resolve.resolver")
    importlib.import_module("hndl.resolve.facts")
    assert inspect.isfunction(hndl.resolve)
    plan = hndl.resolve("relu()", input_shape=("B", 4), output_shape=("B", 4))
    assert [node.op for node in plan.nodes] == ["relu@1"]


@pytest.mark.parametrize("name", ["resolve", "resolve_file", "resolve_callable"])
def test_resolution_entry_points_have_the_section_7_keywords(name):
    parameters = inspect.signature(getattr(hndl, name)).parameters
    assert list(parameters)[1:] == ["input_shape", "output_shape", "dtype", "input_dtype", "registry", "limits"]
    assert parameters["dtype"].default == "float32"
    assert parameters["input_dtype"].default is None
    assert parameters["registry"].default is None
    assert parameters["limits"].default is None
    assert all(p.kind is p.KEYWORD_ONLY for p in list(parameters.values())[1:])


# -- ops ---------------------------------------------------------------------------------------------------
def test_from_hndl_import_ops():
    from hndl import ops

    assert callable(ops.linear)
    assert callable(ops.relu) and callable(ops.tanh)
    assert ops is hndl.ops


def test_ops_binds_the_builtin_aliases():
    assert set(dir(hndl.ops)) == set(hndl.Registry.builtins().aliases())


def test_ops_captures_the_section_7_classifier():
    from hndl import ops

    def classifier(x):
        ops.linear(64)
        ops.relu()
        ops.linear()

    plan = hndl.resolve_callable(classifier, input_shape=("B", 128), output_shape=("B", 10))
    assert [node.op for node in plan.nodes] == ["linear@1", "relu@1", "linear@1"]


def test_an_unknown_attribute_of_hndl_is_an_attribute_error():
    with pytest.raises(AttributeError):
        hndl.network  # construction lives in hndl.torch
    assert not hasattr(hndl, "build")


# -- hndl.torch --------------------------------------------------------------------------------------------
def test_torch_all_is_exactly_the_construction_functions():
    assert sorted(hndl.torch.__all__) == sorted(TORCH_API)
    assert len(hndl.torch.__all__) == len(set(hndl.torch.__all__))


@pytest.mark.parametrize("name", TORCH_API)
def test_every_construction_function_imports_from_hndl_torch(name):
    namespace = {}
    exec(f"from hndl.torch import {name}", namespace)
    assert inspect.isfunction(namespace[name])  # not the same-named submodule
    assert namespace[name] is getattr(hndl.torch, name)


@pytest.mark.parametrize("name", [name for name in TORCH_API if name != "unsealed"])  # unsealed builds nothing
def test_every_construction_function_accepts_limits_and_registry(name):
    parameters = inspect.signature(getattr(hndl.torch, name)).parameters
    assert parameters["limits"].default is None
    assert parameters["registry"].default is None


def test_network_constructors_have_the_section_7_keywords():
    for name in ("network", "network_file", "network_from_callable"):
        parameters = inspect.signature(getattr(hndl.torch, name)).parameters
        assert list(parameters)[1:] == [
            "input_shape", "output_shape", "device", "dtype", "input_dtype", "registry",
            "initialization_seed", "limits",
        ]
        assert parameters["device"].default is inspect.Parameter.empty  # device is required


def test_hndl_torch_exposes_nothing_else():
    public = {name for name in dir(hndl.torch) if not name.startswith("_")}
    assert public - set(hndl.torch.__all__) <= TORCH_SUBMODULES
    for name in public - set(hndl.torch.__all__):
        assert isinstance(getattr(hndl.torch, name), types.ModuleType)


# -- nothing else is public ----------------------------------------------------------------------------------
def test_hndl_exposes_nothing_beyond_all_and_its_submodules():
    public = {name for name in dir(hndl) if not name.startswith("_")}
    extra = public - set(hndl.__all__)
    assert extra <= SUBMODULES, f"unexpected public names: {sorted(extra - SUBMODULES)}"
    for name in extra:
        assert isinstance(getattr(hndl, name), types.ModuleType), name


def test_hndl_has_a_version_string():
    assert isinstance(hndl.__version__, str) and hndl.__version__


def test_restore_and_the_inspection_modes_have_their_keywords():
    restore = inspect.signature(hndl.torch.restore).parameters
    assert list(restore) == ["saved", "state_dict", "device", "registry", "initialization_seed", "limits", "like"]
    assert restore["like"].default == "network"
    assert restore["state_dict"].default is None
    assert restore["device"].default is inspect.Parameter.empty  # device is required
    assert all(restore[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(restore)[2:])
    dry_run = inspect.signature(hndl.torch.dry_run).parameters
    assert list(dry_run) == ["plan", "registry", "batch", "limits"]
    preflight = inspect.signature(hndl.torch.preflight).parameters
    assert list(preflight) == ["plan", "device", "registry", "batch", "seed", "backward", "limits"]
    assert preflight["device"].default == "cpu" and preflight["seed"].default == 0


def test_function_names_survive_importing_their_same_named_submodules():
    importlib.import_module("hndl.torch.restore")
    importlib.import_module("hndl.torch.preflight")
    assert inspect.isfunction(hndl.torch.restore) and inspect.isfunction(hndl.torch.preflight)
    from hndl.torch.restore import check_state, load_state  # helpers stay reachable in their module

    assert callable(check_state) and callable(load_state)


def test_the_harness_api_is_the_documented_one():
    import hndl.testing

    assert hndl.testing.__all__ == [
        "check_operator", "check_declaration", "check_example", "example_cases", "ExampleCase", "devices", "offline",
    ]
