"""Opaque asserted contracts (§15, settled in SPEC.md): an operator whose outputs nothing relates
to its inputs. Its declared output pattern is trusted at resolution, backward inference through
it is reported unavailable, and the runtime checks its outputs on every call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl import Arg, Example, HNDLError, Registry
from hndl.torch import network


def registry_with_summary(*, honest: bool = True) -> Registry:
    """`summary` wraps arbitrary code: it asserts [B, C, ...] -> [B, 8] and says nothing more."""
    registry = Registry.builtins()

    @registry.operator("summary", summary="Summarise any feature map into 8 numbers.",
                       shape="x[B, C, ...] -> out[B, 8]", category="test",
                       examples=(Example("summary()", ("B", 3, 4, 4), ("B", 8)),))
    class Summary(nn.Module):
        """Mean over every non-batch axis, tiled to 8 (or, when dishonest, to a data-dependent width)."""

        def forward(self, x):
            mean = x.flatten(1).mean(1, keepdim=True)
            width = 8 if honest or x.sum() > 0 else 5
            return mean.expand(-1, width)

    return registry


def test_a_declaration_without_any_link_from_inputs_to_outputs_is_opaque():
    registry = registry_with_summary()
    assert registry.get("summary").opaque
    builtins = Registry.from_packs("basic", "vision")
    assert not any(spec.opaque for spec in builtins)  # every first-party operator relates its ports


def test_the_asserted_output_is_trusted_forward():
    plan = hndl.resolve("summary()\nlinear()", input_shape=("B", 3, 4, 4), output_shape=("B", 2),
                        registry=registry_with_summary())
    assert plan.nodes[0].output_shapes["out"] == ("B", 8)
    assert plan.nodes[1].args["in_features"] == 8


def test_backward_inference_through_an_opaque_node_is_reported_unavailable():
    # conv's output channels could only come back through `summary`, which relates nothing.
    with pytest.raises(HNDLError) as error:
        hndl.resolve("conv(kernel_size=1)\nsummary()", input_shape=("B", 3, 4, 4), output_shape=("B", 8),
                      registry=registry_with_summary())
    assert error.value.code == "E_AMBIGUOUS"
    assert any("n1 (summary) is opaque" in line and "backward inference through it is unavailable" in line
               for line in error.value.chain)


def test_an_output_contract_that_contradicts_the_assertion_fails_at_resolution():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("summary()", input_shape=("B", 3, 4, 4), output_shape=("B", 9), registry=registry_with_summary())
    assert error.value.code == "E_CONSTRAINT"


def test_the_runtime_checks_an_opaque_output_on_every_call_not_once_per_signature():
    model = network("summary()", input_shape=("B", 3, 4, 4), output_shape=("B", 8), device="cpu",
                    registry=registry_with_summary(honest=False))
    positive = torch.ones(2, 3, 4, 4)
    assert model(positive).shape == (2, 8)
    assert model(positive).shape == (2, 8)  # the signature is remembered now
    with pytest.raises(HNDLError) as error:
        model(-positive)  # same signature; the module now breaks its assertion
    assert error.value.code == "E_RUNTIME"
    assert error.value.location.node == "n0"
    assert "expected shape [B=2, 8], got [2, 5]" in str(error.value)
    assert model(positive).shape == (2, 8)  # and the model stays usable


def test_a_related_operator_is_checked_once_per_signature_as_before():
    registry = Registry.builtins()
    assert not registry.get("relu").opaque
    model = network("relu()", input_shape=("B", 2), output_shape=("B", 2), device="cpu", registry=registry)
    assert not model._steps[0].opaque


def test_an_opaque_example_passes_the_harness():
    from hndl.testing import check_operator

    registry = registry_with_summary()
    check_operator(registry.get("summary").cls, registry=registry)


def test_an_opaque_operator_may_name_its_asserted_width_as_an_argument():
    registry = Registry.builtins()

    @registry.operator("project_any", summary="Project any input to a chosen width.", category="test",
                       shape="x[B, ...] -> out[B, D]",
                       args={"width": Arg(int, min=1, dim="D", help="The asserted output width.")})
    class ProjectAny(nn.Module):
        """Flattens, then a fixed random-free projection: the sum tiled to `width`."""

        def __init__(self, *, width: int) -> None:
            super().__init__()
            self.width = width

        def forward(self, x):
            return x.flatten(1).sum(1, keepdim=True).expand(-1, self.width)

    assert registry.get("project_any").opaque
    model = network("project_any(5)", input_shape=("B", 2, 3), output_shape=("B", 5), device="cpu", registry=registry)
    assert model(torch.ones(4, 2, 3)).shape == (4, 5)
