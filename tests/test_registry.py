"""Tests for hndl.registry: independent registries of operators and pretrained providers (§8, §9)."""

from __future__ import annotations

import hndl_ops_basic
import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry, operator
from hndl.declaration import OperatorSpec, spec_of
from hndl.torch import build, network

UNARY = "x[B, ...] -> out[B, ...]"
MLP_WITH_SILU = """
linear(64)
silu()
linear()
"""


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


def register_silu(registry):
    """The §8 example, verbatim."""

    @registry.operator(
        "silu",
        identity="example.silu",
        version=1,
        summary="Sigmoid linear unit, x * sigmoid(x).",
        shape="x[B, ...] -> out[B, ...]",
    )
    class SiLU(nn.SiLU):
        """Out-of-place SiLU. No parameters, no buffers, identical in train and
        eval mode."""

    return SiLU


def declared(alias, *, identity=None, version=1):
    """A fresh class decorated with hndl.operator (not registered anywhere)."""

    @operator(alias, identity=identity, version=version, summary="A test operator.", shape=UNARY)
    class Op(nn.Identity):
        """Returns its input."""

    return Op


def build_provider():
    return nn.Linear(4, 2)


def readout(model, x):
    return model(x)


# -- built-ins ---------------------------------------------------------------------------------------
def test_builtins_hold_the_basic_operators():
    registry = Registry.builtins()
    for alias in ("linear", "relu", "tanh"):
        assert alias in registry
        spec = registry.get(alias)
        assert isinstance(spec, OperatorSpec)
        assert spec.alias == alias
        assert registry.by_identity(f"{alias}@1") is spec


def test_builtins_is_a_fresh_registry_each_call():
    first, second = Registry.builtins(), Registry.builtins()
    assert first is not second
    assert first.aliases() == second.aliases()


def test_a_bare_registry_is_empty():
    registry = Registry()
    assert len(registry) == 0
    assert registry.aliases() == ()
    assert list(registry) == []
    assert registry.packs == ()
    assert "linear" not in registry


# -- independence ------------------------------------------------------------------------------------
def test_two_registries_never_share_operators():
    extended, plain = Registry.builtins(), Registry.builtins()
    register_silu(extended)
    assert "silu" in extended
    assert "silu" not in plain
    assert len(extended) == len(plain) + 1
    with raises("E_OPERATOR"):
        plain.get("silu")
    with raises("E_STATE_VERSION"):
        plain.by_identity("example.silu@1")
    with raises("E_OPERATOR"):
        hndl.resolve(MLP_WITH_SILU, input_shape=("B", 128), output_shape=("B", 10), registry=plain)


def test_one_class_may_be_added_to_several_registries():
    first, second = Registry(), Registry()
    cls = declared("shared_op", identity="tests.shared")
    first.add(cls)
    second.add(cls)
    assert first.get("shared_op") is second.get("shared_op") is spec_of(cls)


def test_two_registries_never_share_providers_or_readouts():
    first, second = Registry.builtins(), Registry.builtins()
    first.pretrained_provider("tiny", build_provider, readouts={"logits": readout})
    assert first.provider("tiny") is build_provider
    with raises("E_PRETRAINED"):
        second.provider("tiny")
    with raises("E_PRETRAINED"):
        second.readouts("tiny")
    second.pretrained_provider("tiny", nn.Identity)  # the same name is free there
    assert second.provider("tiny") is nn.Identity
    assert dict(second.readouts("tiny")) == {}
    assert dict(first.readouts("tiny")) == {"logits": readout}


# -- the §8 example ------------------------------------------------------------------------------------
def test_registry_operator_declares_and_registers_in_one_step():
    registry = Registry.builtins()
    SiLU = register_silu(registry)
    assert isinstance(SiLU, type) and issubclass(SiLU, nn.SiLU)  # the decorator returns the class
    spec = registry.get("silu")
    assert spec is spec_of(SiLU)
    assert (spec.identity, spec.version, spec.qualified) == ("example.silu", 1, "example.silu@1")
    assert registry.by_identity("example.silu@1") is spec
    assert spec.summary == "Sigmoid linear unit, x * sigmoid(x)."


def test_section_8_network_resolves_and_builds_with_the_custom_operator():
    registry = Registry.builtins()
    register_silu(registry)
    model = network(
        MLP_WITH_SILU,
        input_shape=("B", 128),
        output_shape=("B", 10),
        registry=registry,
        device="cpu",
    )
    assert [node.op for node in model.plan.nodes] == ["linear@1", "example.silu@1", "linear@1"]
    assert [node.alias for node in model.plan.nodes] == ["linear", "silu", "linear"]
    silu = model.nodes["n_n1"]
    assert isinstance(silu, nn.SiLU)
    x = torch.randn(3, 128)
    assert model(x).shape == (3, 10)
    hidden = model.nodes["n_n0"](x)
    assert torch.allclose(silu(hidden), torch.nn.functional.silu(hidden))


def test_a_plan_needs_its_identities_in_the_build_registry():
    registry = Registry.builtins()
    register_silu(registry)
    plan = hndl.resolve(MLP_WITH_SILU, input_shape=("B", 128), output_shape=("B", 10), registry=registry)
    build(plan, device="cpu", registry=registry)
    with raises("E_STATE_VERSION"):
        build(plan, device="cpu", registry=Registry.builtins())
    with raises("E_STATE_VERSION"):
        build(plan, device="cpu")  # no registry: an independent built-in registry


def test_registry_ops_include_custom_operators():
    registry = Registry.builtins()
    register_silu(registry)

    def fn(x):
        registry.ops.linear(64)
        registry.ops.silu()
        registry.ops.linear()

    plan = hndl.resolve_callable(fn, input_shape=("B", 128), output_shape=("B", 10), registry=registry)
    assert [node.op for node in plan.nodes] == ["linear@1", "example.silu@1", "linear@1"]


# -- add() ---------------------------------------------------------------------------------------------
def test_add_registers_a_class_decorated_with_hndl_operator():
    registry = Registry.builtins()
    cls = declared("softsign", identity="example.softsign", version=2)
    assert registry.add(cls) is cls
    assert registry.get("softsign") is spec_of(cls)
    assert registry.by_identity("example.softsign@2") is spec_of(cls)
    with raises("E_STATE_VERSION"):
        registry.by_identity("example.softsign@1")


def test_identity_defaults_to_the_alias_at_version_1():
    registry = Registry()
    registry.add(declared("gelu"))
    assert registry.by_identity("gelu@1").alias == "gelu"


def test_a_duplicate_alias_is_a_registry_error():
    registry = Registry.builtins()
    with raises("E_REGISTRY") as caught:
        registry.add(declared("linear", identity="example.other_linear"))
    assert "linear" in caught.value.message
    assert caught.value.location.field == "alias"
    assert registry.get("linear").identity == "linear"
    with raises("E_STATE_VERSION"):
        registry.by_identity("example.other_linear@1")


def test_adding_the_same_class_twice_is_a_registry_error():
    registry = Registry()
    cls = declared("softsign")
    registry.add(cls)
    with raises("E_REGISTRY"):
        registry.add(cls)
    assert len(registry) == 1


def test_a_duplicate_identity_is_a_registry_error():
    registry = Registry.builtins()
    register_silu(registry)
    with raises("E_REGISTRY") as caught:
        registry.add(declared("silu2", identity="example.silu", version=1))
    assert "example.silu@1" in caught.value.message
    assert caught.value.location.field == "identity"
    assert "silu2" not in registry  # a failed add leaves nothing behind


def test_a_new_version_of_an_identity_is_a_distinct_operator():
    registry = Registry.builtins()
    register_silu(registry)
    registry.add(declared("silu2", identity="example.silu", version=2))
    assert registry.by_identity("example.silu@1").alias == "silu"
    assert registry.by_identity("example.silu@2").alias == "silu2"


def test_registry_operator_with_a_duplicate_alias_fails():
    registry = Registry.builtins()
    first = register_silu(registry)
    with raises("E_REGISTRY"):
        register_silu(registry)
    assert registry.get("silu") is spec_of(first)


def test_registry_operator_with_an_invalid_declaration_registers_nothing():
    registry = Registry.builtins()
    before = registry.aliases()
    with raises("E_REGISTRY"):

        @registry.operator("nosummary", shape=UNARY)
        class NoSummary(nn.Identity):
            pass

    assert registry.aliases() == before


@pytest.mark.parametrize(
    "thing",
    [nn.SiLU, type("Plain", (nn.Module,), {}), "linear", None, 3],
    ids=["torch-module", "plain-class", "string", "none", "int"],
)
def test_adding_an_undeclared_thing_is_a_registry_error(thing):
    registry = Registry()
    with raises("E_REGISTRY"):
        registry.add(thing)
    assert len(registry) == 0


def test_a_subclass_of_a_declared_class_is_not_declared():
    parent = declared("parent_op")

    class Child(parent):
        pass

    with raises("E_REGISTRY"):
        Registry().add(Child)


# -- lookups -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alias", ["silu", "Linear", "linear@1", "", "x", None, 3])
def test_get_of_an_unknown_alias_is_an_operator_error(alias):
    with raises("E_OPERATOR"):
        Registry.builtins().get(alias)


@pytest.mark.parametrize("identity", ["example.silu@1", "linear", "linear@2", "linear@", "", None])
def test_by_identity_of_an_unknown_identity_is_a_state_version_error(identity):
    with raises("E_STATE_VERSION"):
        Registry.builtins().by_identity(identity)


def test_configuration_naming_an_alias_the_registry_lacks_is_an_operator_error():
    with raises("E_OPERATOR") as caught:
        hndl.resolve("silu()", input_shape=("B", 128), output_shape=("B", 128), registry=Registry.builtins())
    assert "silu" in caught.value.message
    assert caught.value.location.line == 1


def test_an_empty_registry_resolves_no_operator_at_all():
    with raises("E_OPERATOR"):
        hndl.resolve("linear(64)", input_shape=("B", 128), output_shape=("B", 64), registry=Registry())


def test_a_non_registry_is_a_schema_error():
    with raises("E_SCHEMA"):
        hndl.resolve("relu()", input_shape=("B", 4), output_shape=("B", 4), registry={"relu": object()})


# -- registry.ops --------------------------------------------------------------------------------------
def test_registry_ops_exposes_every_alias():
    registry = Registry.builtins()
    for alias in registry.aliases():
        assert callable(getattr(registry.ops, alias))
    assert set(dir(registry.ops)) == set(registry.aliases())
    assert registry.ops is registry.ops


def test_registry_ops_of_an_unknown_alias_is_an_operator_error():
    with raises("E_OPERATOR"):
        Registry.builtins().ops.silu


def test_registry_ops_see_operators_registered_later():
    registry = Registry.builtins()
    namespace = registry.ops
    with raises("E_OPERATOR"):
        namespace.silu
    register_silu(registry)
    assert callable(namespace.silu)


def test_ops_of_one_registry_fail_in_a_capture_resolving_with_another():
    extended = Registry.builtins()
    register_silu(extended)

    def fn(x):
        extended.ops.silu()

    with raises("E_OPERATOR"):
        hndl.resolve_callable(fn, input_shape=("B", 8), output_shape=("B", 8), registry=Registry.builtins())


def test_registry_ops_capture_nothing_outside_a_capture():
    with raises("E_CAPTURE"):
        Registry.builtins().ops.relu()


# -- pretrained providers and readouts (§9) ----------------------------------------------------------------
def test_a_provider_is_stored_by_name():
    registry = Registry()
    assert registry.pretrained_provider("tiny", build_provider) is None
    assert registry.provider("tiny") is build_provider
    assert dict(registry.readouts("tiny")) == {}


def test_readouts_given_with_the_provider():
    registry = Registry()
    registry.pretrained_provider("tiny", build_provider, readouts={"logits": readout, "same": readout})
    assert dict(registry.readouts("tiny")) == {"logits": readout, "same": readout}


def test_readouts_added_later():
    registry = Registry()
    registry.pretrained_provider("tiny", build_provider)
    registry.pretrained_readout("tiny", "logits", readout)
    assert registry.readouts("tiny")["logits"] is readout


def test_readouts_are_per_provider_and_read_only():
    registry = Registry()
    registry.pretrained_provider("a", build_provider, readouts={"logits": readout})
    registry.pretrained_provider("b", build_provider)
    assert "logits" not in registry.readouts("b")
    view = registry.readouts("a")
    with pytest.raises(TypeError):
        view["other"] = readout
    assert set(registry.readouts("a")) == {"logits"}


def test_a_duplicate_provider_is_a_registry_error():
    registry = Registry()
    registry.pretrained_provider("tiny", build_provider)
    with raises("E_REGISTRY"):
        registry.pretrained_provider("tiny", nn.Identity)
    assert registry.provider("tiny") is build_provider


def test_a_duplicate_readout_is_a_registry_error():
    registry = Registry()
    registry.pretrained_provider("tiny", build_provider, readouts={"logits": readout})
    with raises("E_REGISTRY"):
        registry.pretrained_readout("tiny", "logits", lambda model, x: x)
    assert registry.readouts("tiny")["logits"] is readout


def test_a_readout_for_an_unknown_provider_is_a_registry_error():
    with raises("E_REGISTRY"):
        Registry().pretrained_readout("missing", "logits", readout)


@pytest.mark.parametrize("name", ["not an identifier", "", "1st", None, 3])
def test_a_provider_name_must_be_an_identifier(name):
    registry = Registry()
    with raises("E_REGISTRY"):
        registry.pretrained_provider(name, build_provider)


def test_a_provider_needs_a_callable_builder():
    registry = Registry()
    with raises("E_REGISTRY"):
        registry.pretrained_provider("tiny", "torchvision.models.resnet18")
    with raises("E_PRETRAINED"):
        registry.provider("tiny")


@pytest.mark.parametrize(
    ("name", "fn"), [("not valid", readout), ("", readout), ("logits", "module.readout"), ("logits", None)]
)
def test_a_readout_needs_an_identifier_name_and_a_callable(name, fn):
    registry = Registry()
    registry.pretrained_provider("tiny", build_provider)
    with raises("E_REGISTRY"):
        registry.pretrained_readout("tiny", name, fn)
    assert dict(registry.readouts("tiny")) == {}


def test_a_failed_provider_registration_leaves_nothing_behind():
    registry = Registry()
    with raises("E_REGISTRY"):
        registry.pretrained_provider("tiny", build_provider, readouts={"not valid": readout})
    with raises("E_PRETRAINED"):
        registry.provider("tiny")
    registry.pretrained_provider("tiny", build_provider, readouts={"logits": readout})
    assert set(registry.readouts("tiny")) == {"logits"}


def test_an_unknown_provider_is_a_pretrained_error_listing_the_registered_ones():
    registry = Registry()
    with raises("E_PRETRAINED") as caught:
        registry.provider("tiny")
    assert "none" in caught.value.message
    registry.pretrained_provider("resnet_tiny", build_provider)
    registry.pretrained_provider("vit_tiny", build_provider)
    with raises("E_PRETRAINED") as caught:
        registry.provider("tiny")
    assert "resnet_tiny" in caught.value.message and "vit_tiny" in caught.value.message
    with raises("E_PRETRAINED"):
        registry.readouts("tiny")


def test_providers_are_not_operators():
    registry = Registry.builtins()
    before = registry.aliases()
    registry.pretrained_provider("tiny", build_provider)
    assert registry.aliases() == before
    assert "tiny" not in registry


# -- container protocol ----------------------------------------------------------------------------------
def test_aliases_membership_length_and_iteration():
    registry = Registry.from_packs("basic")
    basic = tuple(spec_of(cls).alias for cls in hndl_ops_basic.OPERATORS)
    assert registry.aliases() == basic
    SiLU = register_silu(registry)
    assert registry.aliases() == (*basic, "silu")  # registration order
    assert len(registry) == len(basic) + 1
    assert "silu" in registry and "linear" in registry
    assert "example.silu@1" not in registry  # membership is by alias, not identity
    assert "softsign" not in registry
    specs = list(registry)
    assert all(isinstance(spec, OperatorSpec) for spec in specs)
    assert [spec.alias for spec in specs] == list(registry.aliases())
    assert specs[-1] is spec_of(SiLU)


def test_iteration_is_a_snapshot():
    registry = Registry.builtins()
    before = list(registry.aliases())
    iterator = iter(registry)
    register_silu(registry)
    assert [spec.alias for spec in iterator] == before


def test_repr_names_packs_and_operator_count():
    registry = Registry.from_packs("basic")
    assert repr(registry) == f"Registry(packs=['basic'], operators={len(hndl_ops_basic.OPERATORS)})"
