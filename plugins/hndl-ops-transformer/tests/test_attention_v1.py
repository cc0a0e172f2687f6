"""attention@1 (alias attention_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/transformer_v1.json (node "n3") and transformer_v2.json (node "attend") were
written by HNDL before attention gained grouped heads, rotary positions, the attn_bias and rope
ports, scale, head_dim, per-projection biases and the qkv layout; both record attention@1. They
must keep restoring byte for byte, rebuild this module, load their state, and compute what
attention@2 computes with its new arguments at their defaults. Also: the version-1 schema,
numerics against torch.nn.MultiheadAttention, float64 gradcheck and gradgradcheck, and its
error codes."""

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import network, restore
from hndl_ops_transformer.attention import Attention
from hndl_ops_transformer.attention_v1 import AttentionV1

SAVED = Path(__file__).parent / "saved_plans"


def _saved(version):
    """The saved plan text and the state dict saved with it."""
    text = (SAVED / f"transformer_v{version}.json").read_text(encoding="utf-8")
    record = json.loads((SAVED / f"transformer_v{version}_state.json").read_text(encoding="utf-8"))
    state = {name: torch.tensor(entry["values"]).reshape(entry["shape"]) for name, entry in record["state_dict"].items()}
    return text, state


def _fails(source, shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=shape, **kwargs)
    return error.value


def test_declaration_is_version_one_unchanged():
    spec = spec_of(AttentionV1)
    assert spec.alias == "attention_v1" and spec.qualified == "attention@1"
    assert spec.category == "attention" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert {name: arg.default for name, arg in spec.args.items() if name != "heads"} == {"causal": False,
                                                                                         "bias": True}
    assert spec.positional_args == ("heads",) and spec.args["heads"].required
    assert str(spec.shape) == "x[B, T, D] -> out[B, T, D]"


@pytest.mark.parametrize("version, node_id, args", [(1, "n3", {"heads": 2, "causal": False, "bias": True}),
                                                    (2, "attend", {"heads": 2, "causal": True, "bias": False})])
def test_the_saved_nodes_restore_as_version_one_modules_that_compute_like_version_two(version, node_id, args):
    torch.manual_seed(0)
    text, state = _saved(version)
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == node_id)
    assert (node.op, node.alias, dict(node.args)) == ("attention@1", "attention_v1", args)
    old = getattr(restore(text, state, device="cpu").nodes, f"n_{node_id}")
    assert type(old) is AttentionV1 and old.qkv == "fused" and old.kv_heads == old.heads
    new = Attention(heads=2, causal=args["causal"], bias=args["bias"], D=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    torch.testing.assert_close(old(x), spec_of(AttentionV1).reference(old)(x))


def test_the_version_one_alias_resolves_to_the_saved_node():
    text, _ = _saved(2)
    saved = next(node for node in ResolvedPlan.from_json(text).nodes if node.id == "attend")
    node = hndl.resolve("attention_v1(2, causal=True, bias=False, name='attend')", input_shape=("B", 5, 8),
                        output_shape=("B", 5, 8)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_matches_torch_multihead_attention():
    torch.manual_seed(1)
    model = network("attention_v1(2, causal=True)", input_shape=("B", 5, 8), output_shape=("B", 5, 8), device="cpu")
    layer = model.nodes.n_n0
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    mha.load_state_dict(layer.state_dict())
    x = torch.randn(3, 5, 8)
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
    torch.testing.assert_close(model(x), mha(x, x, x, attn_mask=mask, need_weights=False)[0])


def test_float64_gradcheck_and_gradgradcheck():
    torch.manual_seed(2)
    model = network("attention_v1(2, causal=True)", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    layer = model.nodes.n_n0.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def attend(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(attend, inputs)
    assert torch.autograd.gradgradcheck(attend, inputs, fast_mode=True)


@pytest.mark.parametrize("source", ["attention_v1()", "attention_v1(2, kv_heads=1)", "attention_v1(2, scale=1.0)",
                                    "attention_v1(2, qkv='separate')", "attention_v1(2, rope_theta=10000.0)",
                                    "attention_v1(0)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8)).code == "E_ARGUMENT"


def test_a_bias_port_is_not_part_of_version_one():
    error = _fails("b = relative_position_bias(x, 2)\nattention_v1(x, 2, attn_bias=b)", ("B", 4, 8))
    assert error.code == "E_ARGUMENT" and error.location.field == "attn_bias"


def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    assert _fails("attention_v1(3)", ("B", 4, 16)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("attention_v1(2)", ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
