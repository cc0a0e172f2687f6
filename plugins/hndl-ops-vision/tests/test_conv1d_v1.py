"""conv1d@1 (alias conv1d_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/conv1d_v1.json was written by HNDL before conv1d's padding took torch's strings
(its conv1d nodes n0 and n2 record conv1d@1). It must keep restoring byte for byte, rebuild this
module with version 1's parameters and compute what conv1d@2 computes with the same numbers.
Also: the version-1 schema, float64 gradcheck and gradgradcheck, the errors, and the harness."""

from pathlib import Path

import pytest
import torch

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network, restore
from hndl_ops_vision.conv1d import Conv1d
from hndl_ops_vision.conv1d_v1 import Conv1dV1

SAVED = Path(__file__).parent / "saved_plans" / "conv1d_v1.json"
CONTRACT = {"input_shape": ("B", 4, 32), "output_shape": ("B", 8, 14)}


def test_declaration_is_version_one_unchanged():
    spec = spec_of(Conv1dV1)
    assert spec.alias == "conv1d_v1" and spec.qualified == "conv1d@1"
    assert tuple(spec.args) == ("out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
                                "in_channels")
    assert spec.positional_args == ("out_channels",) and spec.category == "convolution"
    assert spec.reference is spec_of(Conv1d).reference and str(spec.shape) == "x[B, C_in, L] -> out[B, C_out, L_out]"
    assert spec.args["padding"].normalize(2, name="padding") == 2


def test_the_public_harness_passes():
    check_operator(Conv1dV1)


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    assert [node.op for node in plan.nodes] == ["conv1d@1", "relu@1", "conv1d@1"]
    model = restore(text, device="cpu")
    assert all(type(model.nodes[name]) is torch.nn.Conv1d for name in ("n_n0", "n_n2"))  # the torch layer
    state = {key: torch.randn_like(value) for key, value in model.state_dict().items()}
    model.load_state_dict(state)
    current = network(plan.frontend["source"], device="cpu", **CONTRACT)  # the same text, now conv1d@2
    assert [node.op for node in current.plan.nodes] == ["conv1d@2", "relu@1", "conv1d@2"]
    assert list(current.state_dict()) == list(state)
    current.load_state_dict(state)  # strict: version 1's state loads into version 2 unchanged
    x = torch.randn(2, 4, 32)
    torch.testing.assert_close(model(x), current(x))
    layer, hidden = model.nodes.n_n2, torch.randn(2, 16, 32)
    torch.testing.assert_close(layer(hidden), spec_of(Conv1dV1).reference(layer)(hidden))


def test_the_version_one_alias_resolves_to_the_saved_nodes():
    saved = ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"))
    source = saved.frontend["source"].replace("conv1d(", "conv1d_v1(")
    for node, old in zip(hndl.resolve(source, **CONTRACT).nodes, saved.nodes):
        assert (node.op, node.args, node.provenance) == (old.op, old.args, old.provenance)


def test_gradcheck_and_gradgradcheck_in_float64():
    torch.manual_seed(0)
    layer = network("conv1d_v1(3, kernel_size=3, stride=2, padding=1)", input_shape=("B", 2, 7),
                    output_shape=("B", 3, 4), device="cpu").nodes.n_n0.double()
    x = torch.randn(2, 2, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,), fast_mode=True)


@pytest.mark.parametrize("args, code", [('kernel_size=3, padding="same"', "E_ARGUMENT"),
                                        ("kernel_size=(1, 2)", "E_ARGUMENT"), ("", "E_ARGUMENT"),
                                        ("kernel_size=3", "E_CONSTRAINT")])
def test_errors(args, code):
    """Version 1 never took padding strings; an arithmetic miss names the padding as conv1d@2's does."""
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f"conv1d_v1(4, {args})", input_shape=("B", 2, 10), output_shape=("B", 4, 10))
    assert error.value.code == code
    if code == "E_CONSTRAINT":
        assert error.value.remedies[0].startswith("Give padding=1: L_out = ")


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("conv1d_v1(4, kernel_size=1)", input_shape=("B", 2, 4), output_shape=("B", 4, 4),
                     input_dtype="int64")
    assert error.value.code == "E_DTYPE"
