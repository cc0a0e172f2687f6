"""transformer_block@1 (alias transformer_block_v1): the version-1 declaration kept for saved plans,
and the whole saved version-1 plan.

tests/saved_plans/transformer_v1.json was written by HNDL before positional_embedding,
feed_forward and transformer_block gained arguments (its nodes record positional_embedding@1,
transformer_block@1 as "block", feed_forward@1, attention@1 and moe@1), and
transformer_v1_state.json holds the state dict built from it with an input and the output it
gave. The plan must keep restoring byte for byte, load that state, reproduce that output, and
re-resolve to the same semantic digest through the _v1 aliases; today's specification of the
same source (today's operators with their defaults) loads the same state and computes the
same output. Also: the version-1 schema itself, numerics, gradcheck and its error codes."""

import json
from pathlib import Path

import pytest
import torch
from torch.func import functional_call

import hndl
from hndl import HNDLError, Registry, ResolvedPlan
from hndl.declaration import spec_of
from hndl.torch import build, network, restore
from hndl_ops_transformer import OPERATORS
from hndl_ops_transformer.transformer_block import TransformerBlock
from hndl_ops_transformer.transformer_block_v1 import TransformerBlockV1

SAVED = Path(__file__).parent / "saved_plans"
SHAPE = ("B", 5, 8)


def _tensor(entry):
    return torch.tensor(entry["values"]).reshape(entry["shape"])


def _saved():
    """The saved plan text, the state dict saved with it, an input and the output it gave (eval mode)."""
    text = (SAVED / "transformer_v1.json").read_text(encoding="utf-8")
    record = json.loads((SAVED / "transformer_v1_state.json").read_text(encoding="utf-8"))
    state = {name: _tensor(entry) for name, entry in record["state_dict"].items()}
    return text, state, _tensor(record["input"]), _tensor(record["output"])


def _fails(source, shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=shape, **kwargs)
    return error.value


# -- the whole saved plan ----------------------------------------------------------------------------------
def test_the_saved_plan_restores_byte_for_byte_with_the_builtin_registry():
    text, *_ = _saved()
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    assert plan.semantic_digest == json.loads(text)["digests"]["semantic"]
    assert [node.op for node in plan.nodes] == ["positional_embedding@1", "transformer_block@1", "feed_forward@1",
                                                "attention@1", "moe@1"]


def test_the_saved_state_loads_and_reproduces_the_saved_output():
    text, state, x, expected = _saved()
    model = restore(text, state, device="cpu").eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected)


def test_the_version_one_aliases_re_resolve_to_the_saved_semantic_digest():
    text, *_ = _saved()
    source = json.loads(text)["frontend"]["source"]
    for alias in ("positional_embedding", "transformer_block", "feed_forward", "attention"):
        source = source.replace(f"{alias}(", f"{alias}_v1(")
    plan = hndl.resolve(source, input_shape=SHAPE, output_shape=SHAPE)
    assert plan.semantic_digest == json.loads(text)["digests"]["semantic"]


def test_todays_spec_of_the_same_source_loads_the_saved_state_and_computes_the_same():
    text, state, x, expected = _saved()
    plan = hndl.resolve(json.loads(text)["frontend"]["source"], input_shape=SHAPE, output_shape=SHAPE)
    assert [node.op for node in plan.nodes] == ["positional_embedding@2", "transformer_block@3", "feed_forward@3",
                                                "attention@2", "moe@1"]
    block = next(node for node in plan.nodes if node.id == "block")
    assert {name: block.args[name] for name in ("activation", "norm", "attention_bias", "mlp_bias")} == {
        "activation": "gelu", "norm": "pre", "attention_bias": None, "mlp_bias": None}
    model = build(plan, device="cpu").eval()
    model.load_state_dict(state)  # the same parameter names, shapes and layout
    with torch.no_grad():
        torch.testing.assert_close(model(x=x)["output"], expected)


def test_without_the_version_one_declaration_restoring_is_a_state_version_error():
    registry = Registry()
    for cls in OPERATORS:
        if cls is not TransformerBlockV1:
            registry.add(cls)
    text, *_ = _saved()
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(text, registry=registry)
    assert error.value.code == "E_STATE_VERSION" and "transformer_block@1" in error.value.message


# -- the version-1 operator ---------------------------------------------------------------------------------
def test_declaration_is_version_one_unchanged():
    spec = spec_of(TransformerBlockV1)
    assert spec.alias == "transformer_block_v1" and spec.qualified == "transformer_block@1"
    assert spec.category == "block" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert spec.positional_args == ("heads",) and spec.args["heads"].required
    assert {name: arg.default for name, arg in spec.args.items() if name != "heads"} == {
        "causal": False, "expansion": 4, "eps": 1e-5, "bias": True}


def test_the_saved_block_is_a_version_one_module_that_computes_like_version_two():
    torch.manual_seed(0)
    text, state, *_ = _saved()
    old = restore(text, state, device="cpu").nodes.n_block
    assert type(old) is TransformerBlockV1
    assert old.norm == "pre" and old.feed_forward.activation == "gelu" and old.attention.causal
    assert old.norm1.eps == 1e-6 and tuple(old.feed_forward.fc1.weight.shape) == (16, 8)
    new = TransformerBlock(heads=2, causal=True, expansion=2, eps=1e-6, D=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(old(x), new(x), rtol=0, atol=0)
    torch.testing.assert_close(old(x), spec_of(TransformerBlockV1).reference(old)(x))


def test_float64_gradcheck():
    torch.manual_seed(1)
    model = network("transformer_block_v1(2, causal=True, expansion=1)", input_shape=("B", 3, 4),
                    output_shape=("B", 3, 4), device="cpu")
    block = model.nodes.n_n0.double()
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in block.parameters())

    def run(x, *values):
        return functional_call(block, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs, fast_mode=True)


@pytest.mark.parametrize("source", ["transformer_block_v1()", "transformer_block_v1(2, norm='post')",
                                    "transformer_block_v1(2, activation='relu')",
                                    "transformer_block_v1(2, mlp_bias=False)", "transformer_block_v1(2, eps=0)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8)).code == "E_ARGUMENT"


def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    error = _fails("transformer_block_v1(3)", ("B", 4, 16))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"


def test_integer_input_is_a_dtype_error():
    assert _fails("transformer_block_v1(2)", ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
