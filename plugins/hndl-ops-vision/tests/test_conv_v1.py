"""conv2d@1 (alias conv_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/conv_v1.json was written by HNDL before conv's padding took torch's strings (its
conv nodes n0 and n2 record conv2d@1). It must keep restoring byte for byte, rebuild this module
with version 1's parameters and compute what conv@2 computes with the same numbers. Also: the
version-1 schema (no padding strings), float64 gradcheck and gradgradcheck, the errors, and the
public harness."""

from pathlib import Path

import pytest
import torch

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network, restore
from hndl_ops_vision.conv import Conv
from hndl_ops_vision.conv_v1 import ConvV1

SAVED = Path(__file__).parent / "saved_plans" / "conv_v1.json"
CONTRACT = {"input_shape": ("B", 3, 16, 16), "output_shape": ("B", 12, 8, 7)}


def test_declaration_is_version_one_unchanged():
    spec = spec_of(ConvV1)
    assert spec.alias == "conv_v1" and spec.qualified == "conv2d@1"
    assert tuple(spec.args) == ("out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
                                "in_channels")
    assert spec.positional_args == ("out_channels",) and spec.category == "convolution"
    assert spec.reference is spec_of(Conv).reference and all(arg.help for arg in spec.args.values())
    assert set(spec.policies) == {"down2"} and str(spec.shape) == str(spec_of(Conv).shape)
    assert spec.args["padding"].normalize(2, name="padding") == (2, 2)


def test_the_public_harness_passes():
    check_operator(ConvV1)


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    assert [node.op for node in plan.nodes] == ["conv2d@1", "relu@1", "conv2d@1"]
    model = restore(text, device="cpu")
    assert all(type(model.nodes[name]) is torch.nn.Conv2d for name in ("n_n0", "n_n2"))  # the torch layer
    state = {key: torch.randn_like(value) for key, value in model.state_dict().items()}
    model.load_state_dict(state)
    current = network(plan.frontend["source"], device="cpu", **CONTRACT)  # the same text, now conv@2
    assert [node.op for node in current.plan.nodes] == ["conv2d@2", "relu@1", "conv2d@2"]
    assert list(current.state_dict()) == list(state)
    current.load_state_dict(state)  # strict: version 1's state loads into version 2 unchanged
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(model(x), current(x))  # restore() gives a model called like network()'s
    layer, hidden = model.nodes.n_n2, torch.randn(2, 8, 16, 16)
    torch.testing.assert_close(layer(hidden), spec_of(ConvV1).reference(layer)(hidden))


def test_the_version_one_alias_resolves_to_the_saved_nodes():
    saved = ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"))
    source = saved.frontend["source"].replace("conv(", "conv_v1(")
    for node, old in zip(hndl.resolve(source, **CONTRACT).nodes, saved.nodes):
        assert (node.op, node.args, node.provenance) == (old.op, old.args, old.provenance)


def test_gradcheck_and_gradgradcheck_in_float64():
    torch.manual_seed(0)
    layer = network("conv_v1(3, kernel_size=3, stride=2, padding=1)", input_shape=("B", 2, 5, 4),
                    output_shape=("B", 3, 3, 2), device="cpu").nodes.n_n0.double()
    x = torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,), fast_mode=True)


@pytest.mark.parametrize("args, code", [('kernel_size=3, padding="same"', "E_ARGUMENT"),
                                        ("kernel_size=0", "E_ARGUMENT"), ("", "E_ARGUMENT"),
                                        ("kernel_size=3", "E_CONSTRAINT")])
def test_errors(args, code):
    """Version 1 never took padding strings; an arithmetic miss names the padding as conv@2's does."""
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f"conv_v1(4, {args})", input_shape=("B", 2, 8, 8), output_shape=("B", 4, 8, 8))
    assert error.value.code == code
    if code == "E_CONSTRAINT":
        assert error.value.remedies[0].startswith("Give padding=1: H_out = ")


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("conv_v1(4, kernel_size=1)", input_shape=("B", 2, 4, 4), output_shape=("B", 4, 4, 4),
                     input_dtype="int64")
    assert error.value.code == "E_DTYPE"
