"""Tests for hndl.packs: entry-point discovery and explicit opt-in of operator packs.

Hosts opt packs into a registry by name (ARCHITECTURE.md, design card); configuration never
imports anything (§7 "Loading limits and trust boundaries", §8 "Registration, trust").
"""

from __future__ import annotations

import sys
import tomllib
import types
from importlib import metadata
from pathlib import Path

import pluggy
import pytest
from torch import nn

import hndl
import hndl.packs
import hndl_ops_basic
from hndl import HNDLError, Registry, operator
from hndl.declaration import spec_of
from hndl.packs import (ENTRY_POINT_GROUP, FIRST_PARTY, OPERATOR_GROUP, declared_aliases, hookimpl, installed_packs,
                        load_packs)

UNARY = "x[B, ...] -> out[B, ...]"
PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
DISTRIBUTIONS = {"basic": "hndl-ops-basic", "vision": "hndl-ops-vision", "transformer": "hndl-ops-transformer",
                 "pretrained": "hndl-pretrained"}
BASIC_ALIASES = tuple(spec_of(cls).alias for cls in hndl_ops_basic.OPERATORS)


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


def declared(alias, identity=None):
    @operator(alias, identity=identity, summary="A test operator.", shape=UNARY)
    class Op(nn.Identity):
        """Returns its input."""

    return Op


class FakeEntryPoint:
    """Stands in for an installed ``hndl.packs`` entry point."""

    def __init__(self, name, plugin=None, error=None):
        self.name = name
        self.plugin = plugin
        self.error = error
        self.loads = 0

    def load(self):
        self.loads += 1
        if self.error is not None:
            raise self.error
        return self.plugin


def fake_pack(name, *classes):
    """A plain module implementing the one hook, like a real pack's __init__.py."""
    module = types.ModuleType(f"fake_pack_{name}")
    module.OPERATORS = classes

    @hookimpl
    def hndl_register(registry):
        for cls in module.OPERATORS:
            registry.add(cls)

    module.hndl_register = hndl_register
    return module


@pytest.fixture
def fake_installed(monkeypatch):
    """Install extra packs (besides the real ones) for the duration of a test."""
    real = installed_packs()
    extra = {}

    def installed():
        return {**real, **extra}

    monkeypatch.setattr(hndl.packs, "installed_packs", installed)
    return extra


# -- discovery -------------------------------------------------------------------------------------
def test_installed_packs_lists_the_first_party_packs():
    found = installed_packs()
    assert set(FIRST_PARTY) <= set(found)
    assert FIRST_PARTY == ("basic", "vision", "transformer", "pretrained")
    for name in FIRST_PARTY:
        entry = found[name]
        assert isinstance(entry, metadata.EntryPoint)
        assert entry.group == ENTRY_POINT_GROUP == "hndl.packs"
        assert entry.name == name
    assert found["basic"].load() is hndl_ops_basic


# -- declared aliases (read without importing) -------------------------------------------------------
@pytest.mark.parametrize("pack", FIRST_PARTY)
def test_each_first_party_pack_declares_exactly_the_aliases_it_registers(pack):
    """The static list an unknown alias's remedy reads (group hndl.operators) is what the pack
    adds: in pyproject.toml, and in the installed metadata (reinstall the pack after editing it)."""
    registered = frozenset(Registry.from_packs(pack).aliases())
    project = tomllib.loads((PLUGINS / DISTRIBUTIONS[pack] / "pyproject.toml").read_text(encoding="utf-8"))
    points = project["project"]["entry-points"]
    module = points[ENTRY_POINT_GROUP][pack]
    assert OPERATOR_GROUP == "hndl.operators"
    assert set(points[OPERATOR_GROUP].values()) == {module}, "each alias names the pack's own module"
    assert frozenset(points[OPERATOR_GROUP]) == registered
    assert declared_aliases()[pack] == registered, (
        f"the installed metadata is stale: pip install --no-deps --no-index --no-build-isolation "
        f"-e plugins/{DISTRIBUTIONS[pack]}")


def test_declared_aliases_are_read_without_importing_the_pack(monkeypatch, tmp_path):
    """A pack whose module does not even exist still has its declared aliases read."""
    info = tmp_path / "ghost_pack-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-pack\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[hndl.packs]\nghost = hndl_test_ghost_module\n\n"
        "[hndl.operators]\nghost_op = hndl_test_ghost_module\nghost_norm = hndl_test_ghost_module\n"
        "stray = some_other_module\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    declared = declared_aliases()
    assert declared["ghost"] == {"ghost_op", "ghost_norm"}  # "stray" names another module: not this pack's
    assert declared["basic"] == frozenset(Registry.from_packs("basic").aliases())
    assert "hndl_test_ghost_module" not in sys.modules


# -- from_packs --------------------------------------------------------------------------------------
def test_from_packs_basic_holds_exactly_the_basic_operators():
    registry = Registry.from_packs("basic")
    assert registry.packs == ("basic",)
    assert registry.aliases() == BASIC_ALIASES
    assert registry.aliases() == tuple(spec_of(cls).alias for cls in hndl_ops_basic.OPERATORS)
    assert [spec.cls for spec in registry] == list(hndl_ops_basic.OPERATORS)


def test_from_packs_several():
    registry = Registry.from_packs("basic", "vision")
    assert registry.packs == ("basic", "vision")
    assert set(BASIC_ALIASES) <= set(registry.aliases())
    everything = Registry.from_packs("basic", "vision", "transformer", "pretrained")
    assert everything.packs == ("basic", "vision", "transformer", "pretrained")


def test_from_packs_without_basic_lacks_the_basic_operators():
    registry = Registry.from_packs("vision", "transformer")
    assert registry.packs == ("vision", "transformer")
    for alias in BASIC_ALIASES:
        assert alias not in registry
    with raises("E_OPERATOR"):
        hndl.resolve("relu()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)


def test_from_no_packs_is_an_empty_registry():
    registry = Registry.from_packs()
    assert registry.packs == () and len(registry) == 0


def test_builtins_is_every_installed_first_party_pack():
    registry = Registry.builtins()
    assert registry.packs == FIRST_PARTY
    assert registry.aliases() == Registry.from_packs(*FIRST_PARTY).aliases()


def test_an_unknown_pack_is_a_registry_error_listing_the_installed_ones():
    with raises("E_REGISTRY") as caught:
        Registry.from_packs("nope")
    message = caught.value.message
    assert "'nope'" in message
    for name in FIRST_PARTY:
        assert name in message
    assert caught.value.location.field == "packs"


def test_an_unknown_pack_among_known_ones_loads_nothing(fake_installed):
    entry = fake_installed["extra"] = FakeEntryPoint("extra", fake_pack("extra", declared("extra_op")))
    with raises("E_REGISTRY"):
        Registry.from_packs("extra", "nope")
    assert entry.loads == 0


@pytest.mark.parametrize("name", [None, 3, ("basic",), "Basic", "hndl_ops_basic", ""])
def test_a_pack_name_must_be_an_installed_entry_point_name(name):
    with raises("E_REGISTRY"):
        Registry.from_packs(name)


def test_a_pack_named_twice_is_a_registry_error():
    with raises("E_REGISTRY") as caught:
        Registry.from_packs("basic", "basic")
    assert "twice" in caught.value.message
    with raises("E_REGISTRY"):
        Registry.from_packs("basic", "vision", "basic")


def test_each_from_packs_call_uses_its_own_plugin_manager(monkeypatch):
    managers = []
    real = pluggy.PluginManager

    class Recording(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            managers.append(self)

    monkeypatch.setattr(pluggy, "PluginManager", Recording)
    first = Registry.from_packs("basic")
    second = Registry.from_packs("basic")
    assert len(managers) == 2
    assert managers[0] is not managers[1]
    for manager in managers:
        assert manager.project_name == "hndl"
        assert {manager.get_name(plugin) for plugin in manager.get_plugins()} == {"basic"}
    # ... and the registries they filled stay independent.
    first.add(declared("only_first"))
    assert "only_first" in first and "only_first" not in second


def test_registries_from_the_same_packs_are_independent():
    first, second = Registry.from_packs("basic"), Registry.from_packs("basic")
    first.add(declared("softsign", identity="example.softsign"))
    first.pretrained_provider("tiny", lambda: nn.Linear(2, 2))
    assert "softsign" not in second
    with raises("E_PRETRAINED"):
        second.provider("tiny")
    assert second.aliases() == BASIC_ALIASES


def test_packs_register_in_the_order_they_are_named(fake_installed):
    fake_installed["first"] = FakeEntryPoint("first", fake_pack("first", declared("alpha", "tests.alpha")))
    fake_installed["second"] = FakeEntryPoint("second", fake_pack("second", declared("beta", "tests.beta")))
    registry = Registry.from_packs("first", "second")
    assert registry.packs == ("first", "second")
    assert registry.aliases() == ("alpha", "beta")
    registry = Registry.from_packs("basic", "second")
    assert registry.aliases() == (*BASIC_ALIASES, "beta")


def test_load_packs_fills_the_given_registry(fake_installed):
    fake_installed["extra"] = FakeEntryPoint("extra", fake_pack("extra", declared("extra_op")))
    registry = Registry()
    assert load_packs(registry, ["extra"]) == ("extra",)
    assert registry.aliases() == ("extra_op",)


# -- duplicates across packs -------------------------------------------------------------------------
def test_a_pack_registering_a_duplicate_alias_is_a_registry_error(fake_installed):
    fake_installed["clash"] = FakeEntryPoint("clash", fake_pack("clash", declared("linear", "tests.other_linear")))
    with raises("E_REGISTRY") as caught:
        Registry.from_packs("basic", "clash")
    assert "linear" in caught.value.message


def test_a_pack_registering_a_duplicate_identity_is_a_registry_error(fake_installed):
    fake_installed["clash"] = FakeEntryPoint("clash", fake_pack("clash", declared("my_relu", "relu")))
    with raises("E_REGISTRY") as caught:
        Registry.from_packs("basic", "clash")
    assert "relu@1" in caught.value.message


def test_adding_the_basic_operators_again_is_a_registry_error():
    registry = Registry.from_packs("basic")
    for cls in hndl_ops_basic.OPERATORS:
        with raises("E_REGISTRY"):
            registry.add(cls)
    with raises("E_REGISTRY"):
        hndl_ops_basic.hndl_register(registry)
    assert registry.aliases() == BASIC_ALIASES


def test_a_pack_that_fails_to_import_is_a_registry_error(fake_installed):
    # The catalog is closed (§13): a broken installed pack is not a bare ImportError.
    fake_installed["broken"] = FakeEntryPoint("broken", error=ImportError("No module named 'broken_pack'"))
    with raises("E_REGISTRY") as caught:
        Registry.from_packs("broken")
    assert "broken" in caught.value.message


# -- configuration never imports ----------------------------------------------------------------------
CANDIDATES = ("colorsys", "wave", "tabnanny", "sched", "mailbox", "netrc", "plistlib")


def unimported_stdlib_module():
    for name in CANDIDATES:
        if name not in sys.modules:
            return name
    raise AssertionError(f"every candidate module is already imported: {CANDIDATES}")


def test_calling_an_importable_module_name_in_configuration_imports_nothing():
    name = unimported_stdlib_module()
    with raises("E_OPERATOR") as caught:
        hndl.resolve(f"{name}()", input_shape=("B", 8), output_shape=("B", 8))
    assert name in caught.value.message
    assert name not in sys.modules


def test_configuration_files_import_nothing_either(tmp_path):
    name = unimported_stdlib_module()
    path = tmp_path / "model.hndl"
    path.write_text(f"relu()\n{name}()\n", encoding="utf-8")
    with raises("E_OPERATOR") as caught:
        hndl.resolve_file(path, input_shape=("B", 8), output_shape=("B", 8))
    assert caught.value.location.line == 2
    assert name not in sys.modules


@pytest.mark.parametrize("source", ["json()", "os()", "sys()", "importlib()", "torch()", "hndl_ops_basic()"])
def test_already_imported_module_names_are_not_operators(source):
    with raises("E_OPERATOR"):
        hndl.resolve(source, input_shape=("B", 8), output_shape=("B", 8))


@pytest.mark.parametrize("template", ["import {name}", "from {name} import x", "{name}.relu()", "__import__('{name}')"])
def test_import_forms_are_rejected_without_importing(template):
    name = unimported_stdlib_module()
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(template.format(name=name), input_shape=("B", 8), output_shape=("B", 8))
    assert caught.value.code in ("E_SYNTAX", "E_OPERATOR", "E_NAME")
    assert name not in sys.modules


def test_ops_attributes_import_nothing():
    name = unimported_stdlib_module()
    with raises("E_OPERATOR"):
        getattr(Registry.builtins().ops, name)
    assert name not in sys.modules


def test_a_module_name_is_not_a_pack_name():
    name = unimported_stdlib_module()
    with raises("E_REGISTRY"):
        Registry.from_packs(name)
    assert name not in sys.modules


def test_resolving_with_an_explicit_registry_loads_no_pack(monkeypatch):
    registry = Registry.from_packs("basic")

    def forbidden(*args, **kwargs):
        raise AssertionError("resolution consulted the installed packs")

    monkeypatch.setattr(hndl.packs, "installed_packs", forbidden)
    monkeypatch.setattr(hndl.packs, "load_packs", forbidden)
    monkeypatch.setattr(hndl.registry, "installed_first_party", forbidden)
    monkeypatch.setattr(hndl.registry, "load_packs", forbidden)
    plan = hndl.resolve("linear(64)\nrelu()\nlinear()", input_shape=("B", 128), output_shape=("B", 10),
                        registry=registry)
    assert [node.op for node in plan.nodes] == ["linear@1", "relu@1", "linear@1"]
    with raises("E_OPERATOR"):
        hndl.resolve("conv(3)", input_shape=("B", 3, 8, 8), output_shape=("B", 3, 8, 8), registry=registry)
