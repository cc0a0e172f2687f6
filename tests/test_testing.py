"""hndl.testing: the harness passes sound operators and catches each kind of unsound one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hndl import Arg, Example, Registry, operator
from hndl.testing import check_declaration, check_example, check_operator, devices, example_callable, example_cases

UNARY = "x[B, ...] -> out[B, ...]"
SCALE_EXAMPLE = Example("scale(3.0)", ("B", 4), ("B", 4))


def declare(alias="scale", *, summary="Multiply by a constant factor.", category="test", examples=(SCALE_EXAMPLE,),
            reference=lambda module: (lambda x: x * module.factor), relation=None, finalize=None, doc=True,
            forward=None, help="The factor."):
    """A fresh operator class; each keyword breaks one thing when changed."""

    class Scale(nn.Module):
        def __init__(self, *, factor: float) -> None:
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return forward(self, x) if forward else x * self.factor

    if doc:
        Scale.__doc__ = "Multiplies its input by `factor`; no parameters."
    return operator(alias, summary=summary, shape=UNARY, category=category, relation=relation, finalize=finalize,
                    args={"factor": Arg(float, help=help)}, examples=examples, reference=reference)(Scale)


def test_a_sound_custom_operator_passes_on_every_device():
    check_operator(declare())
    assert devices()[0] == "cpu"


def test_an_example_may_name_its_batch_symbol_anything():
    example = Example("scale(2.0)", ("N", 4), ("N", 4))
    plan = check_example(declare(examples=(example,)), example)
    assert plan.batch == "N"


def test_every_first_party_example_is_a_case():
    registry = Registry.builtins()
    cases = example_cases([spec.cls for spec in registry])
    assert {str(case).rsplit("-", 1)[0] for case in cases} == set(registry.aliases())
    assert str(cases[0]) == "linear-0"


@pytest.mark.parametrize("change, message", [
    (dict(doc=False), "no class docstring"),
    (dict(category=None), "no category"),
    (dict(examples=()), "no example"),
])
def test_an_incomplete_declaration_is_reported(change, message):
    with pytest.raises(AssertionError, match=message):
        check_declaration(declare(**change))


def test_an_operator_without_examples_still_gets_a_failing_case():
    (case,) = example_cases([declare(examples=())])
    with pytest.raises(AssertionError, match="no example"):
        case.check()


def test_a_wrong_reference_is_caught():
    broken = declare(reference=lambda module: (lambda x: x * (module.factor + 1)))
    with pytest.raises(AssertionError, match="differs from its reference"):
        check_operator(broken)


def test_a_forward_that_disagrees_with_the_plan_shape_is_caught():
    broken = declare(forward=lambda module, x: torch.cat([x, x], dim=1), reference=None)
    with pytest.raises(AssertionError, match=r"output .out.: expected shape \[B=2, 4\], got \[2, 8\]"):
        check_operator(broken)


def test_a_relation_that_allocates_during_resolution_is_caught():
    def allocating(s):
        torch.zeros(1)

    with pytest.raises(AssertionError, match="tensor operation"):
        check_operator(declare(relation=allocating))


def test_a_relation_that_draws_random_numbers_is_caught():
    def drawing(s):
        torch.manual_seed(1)  # resets the generator: the state changes without any tensor op

    with pytest.raises(AssertionError, match="drew random numbers"):
        check_operator(declare(relation=drawing))


def test_a_finalize_hook_that_is_not_idempotent_is_caught():
    def finalize(args, input_shapes, output_shapes):
        args["factor"] = args["factor"] * 2 if args.get("_seen") else args["factor"]
        args["_seen"] = True

    with pytest.raises(AssertionError, match="not idempotent"):
        check_operator(declare(finalize=finalize))


def test_an_example_the_operator_does_not_appear_in_is_caught():
    with pytest.raises(AssertionError, match="does not use"):
        check_operator(declare(examples=(Example("relu()", ("B", 4), ("B", 4)),)))


def test_the_callable_form_of_a_configuration_selects_the_same_outputs():
    registry = Registry.builtins()
    branched = Example("a, b = split(2)\nout = add(a, b)", ("B", 4), ("B", 2))
    named = Example("features = linear(x, 3)", {"x": ("B", 4)}, {"features": ("B", 3)})
    assert example_callable(branched, registry).__code__.co_varnames[:1] == ("x",)
    plan = check_example(registry.get("add").cls, branched, registry=registry)
    assert [node.alias for node in plan.nodes] == ["split", "add"]
    plan = check_example(registry.get("linear").cls, named, registry=registry)
    assert plan.outputs[0]["name"] == "features"


def test_an_example_that_needs_the_network_is_skipped_offline_with_its_reason(monkeypatch):
    remote = Example("scale(3.0)", ("B", 4), ("B", 4), network=True)
    (case,) = example_cases([declare(examples=(remote,))])
    monkeypatch.setenv("HNDL_PRETRAINED_DOWNLOAD", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(pytest.skip.Exception, match="needs the network, and downloads are off"):
        case.check()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert case.check() is not None  # online, it is checked like any other
    monkeypatch.delenv("HNDL_PRETRAINED_DOWNLOAD")
    with pytest.raises(pytest.skip.Exception, match="needs the network"):  # HNDL fetches nothing by default
        case.check()
