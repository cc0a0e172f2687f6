"""The active registry and the `restore=` hook: how an operator reaches registry-held state
(pretrained providers) and re-checks facts from outside the plan when it is restored."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl import Arg, HNDLError, Registry, ResolvedPlan
from hndl.registry import active_registry, using_registry
from hndl.torch import build

seen: dict[str, object] = {}


def registry_with_probe(*, restore=None) -> Registry:
    registry = Registry.builtins()

    def relation(s):
        seen["relation"] = active_registry()

    @registry.operator("probe", summary="Identity that records the active registry.", category="test",
                       shape="x[B, ...] -> out[B, ...]", relation=relation, restore=restore,
                       args={"tag": Arg(str, "a", help="A value the restore hook re-checks.")})
    class Probe(nn.Identity):
        """Passes its input through."""

        def __init__(self, *, tag: str) -> None:
            super().__init__()
            seen["constructor"] = active_registry()

    return registry


def test_resolution_and_construction_see_the_registry_they_were_given():
    registry = registry_with_probe()
    assert active_registry() is None
    for plan in (hndl.resolve("probe()", input_shape=("B", 2), output_shape=("B", 2), registry=registry),
                 hndl.resolve_callable(lambda x: registry.ops.probe(x), input_shape=("B", 2), output_shape=("B", 2),
                                       registry=registry)):
        seen.clear()
        build(plan, device="cpu", registry=registry)
        assert seen["constructor"] is registry
    seen.clear()
    hndl.resolve("probe()", input_shape=("B", 2), output_shape=("B", 2), registry=registry)
    assert seen["relation"] is registry
    assert active_registry() is None  # nothing leaks out of the call


def test_using_registry_nests_and_restores_on_error():
    outer, inner = Registry.builtins(), Registry.builtins()
    with using_registry(outer):
        with pytest.raises(RuntimeError):
            with using_registry(inner):
                assert active_registry() is inner
                raise RuntimeError
        assert active_registry() is outer
    assert active_registry() is None


def test_a_restore_hook_failure_keeps_its_code_and_names_the_node():
    def restore(args):
        if args["tag"] != "a":
            raise HNDLError("E_CONSTRAINT", f"tag {args['tag']!r} no longer matches its source")

    registry = registry_with_probe(restore=restore)
    plan = hndl.resolve('probe(tag="a")', input_shape=("B", 2), output_shape=("B", 2), registry=registry)
    assert ResolvedPlan.from_json(plan.to_json(), registry=registry) == plan
    changed = hndl.resolve('probe(tag="b")', input_shape=("B", 2), output_shape=("B", 2), registry=registry)
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(changed.to_json(), registry=registry)
    assert error.value.code == "E_CONSTRAINT"  # not turned into E_INTEGRITY: the text is intact
    assert error.value.location.node == "n0"


def test_a_restore_hook_must_be_callable():
    with pytest.raises(HNDLError) as error:
        registry_with_probe(restore="not callable")
    assert error.value.code == "E_REGISTRY"
