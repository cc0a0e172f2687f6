"""residual_block@1 (alias residual_block_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/residual_block_v1.json was written by HNDL before residual_block gained
norm_eps, norm_momentum and stochastic_depth_prob (its nodes "down" and "same" record
residual_block@1). It must keep restoring byte for byte, rebuild this module with version 1's
parameters and compute what residual_block@2 computes with its defaults. Also: the version-1
schema, float64 gradcheck and gradgradcheck, the errors, and the public harness."""

from pathlib import Path

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network, restore
from hndl_ops_vision.residual_block import ResidualBlock
from hndl_ops_vision.residual_block_v1 import ResidualBlockV1

SAVED = Path(__file__).parent / "saved_plans" / "residual_block_v1.json"
CONTRACT = {"input_shape": ("B", 8, 8, 8), "output_shape": ("B", 16, 4, 4)}


def _randomize(module):
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                sub.weight.uniform_(0.5, 1.5)
                sub.bias.normal_(0, 0.2)
                sub.running_mean.normal_(0, 0.1)
                sub.running_var.uniform_(0.5, 2.0)


def test_declaration_is_version_one_unchanged():
    spec = spec_of(ResidualBlockV1)
    assert spec.alias == "residual_block_v1" and spec.qualified == "residual_block@1"
    assert tuple(spec.args) == ("out_channels", "stride", "in_channels")
    assert spec.positional_args == ("out_channels",) and spec.category == "block"
    assert spec.reference is spec_of(ResidualBlock).reference and all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]"


def test_the_public_harness_passes():
    check_operator(ResidualBlockV1)


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    assert [(node.op, node.alias) for node in plan.nodes] == [("residual_block@1", "residual_block_v1")] * 2
    model = restore(text, device="cpu")
    assert all(type(model.nodes[f"n_{name}"]) is ResidualBlockV1 for name in ("down", "same"))
    _randomize(model)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    current = network(plan.frontend["source"], device="cpu", **CONTRACT)  # the same text, now version 2
    assert list(current.state_dict()) == list(state)
    current.load_state_dict(state)  # strict: version 1's state loads into version 2 unchanged
    model.eval()
    current.eval()
    x = torch.randn(2, 8, 8, 8)
    torch.testing.assert_close(model(x), current(x))
    block = model.nodes.n_down
    torch.testing.assert_close(block(x), spec_of(ResidualBlockV1).reference(block)(x))


def test_the_version_one_alias_resolves_to_the_saved_nodes():
    saved = ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"))
    source = saved.frontend["source"].replace("residual_block(", "residual_block_v1(")
    for node, old in zip(hndl.resolve(source, **CONTRACT).nodes, saved.nodes):
        assert (node.op, node.args, node.provenance) == (old.op, old.args, old.provenance)


def test_gradcheck_and_gradgradcheck_in_float64():
    torch.manual_seed(0)
    block = network("residual_block_v1(3, stride=2)", input_shape=("B", 2, 4, 3), output_shape=("B", 3, 2, 2),
                    device="cpu").nodes.n_n0.double()
    _randomize(block)
    x = torch.randn(2, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    assert torch.autograd.gradgradcheck(block, (x,), fast_mode=True)


@pytest.mark.parametrize("args, code", [("stride=3", "E_ARGUMENT"), ("norm_eps=0.001", "E_ARGUMENT"),
                                        ("stochastic_depth_prob=0.1", "E_ARGUMENT"), ("5", "E_CONSTRAINT")])
def test_errors(args, code):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f"residual_block_v1({args})", input_shape=("B", 4, 8, 8), output_shape=("B", 4, 8, 8))
    assert error.value.code == code


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model = network("residual_block_v1(4, stride=2)", input_shape=("B", 4, 2, 2), output_shape=("B", 4, 1, 1),
                    device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 2, 2))
    assert error.value.code == "E_RUNTIME"
