"""transformer_block@1: declaration, one node with one module, inference, numerics against the
written-out reference and against a handwritten block built from torch.nn.LayerNorm,
torch.nn.MultiheadAttention and an MLP (forward, input and parameter gradients), causal masking,
float64 gradcheck and gradgradcheck, and every error code it raises."""

from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.attention import Attention
from hndl_ops_transformer.feed_forward import FeedForward
from hndl_ops_transformer.transformer_block import TransformerBlock


class HandwrittenBlock(nn.Module):
    """The same pre-norm layer from stock torch.nn modules; its state_dict keys match ours."""

    def __init__(self, width, heads, *, causal=False, expansion=4, eps=1e-5, bias=True):
        super().__init__()
        self.causal = causal
        self.norm1 = nn.LayerNorm(width, eps=eps)
        self.attention = nn.MultiheadAttention(width, heads, bias=bias, batch_first=True)
        self.norm2 = nn.LayerNorm(width, eps=eps)
        self.feed_forward = nn.Sequential(OrderedDict(
            fc1=nn.Linear(width, expansion * width, bias=bias), gelu=nn.GELU(),
            fc2=nn.Linear(expansion * width, width, bias=bias)))

    def forward(self, x):
        length = x.shape[1]
        mask = torch.ones(length, length, dtype=torch.bool).triu(1) if self.causal else None
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.feed_forward(self.norm2(x))


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _perturb(module, scale=0.1):
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn_like(parameter))


# -- declaration and structure ---------------------------------------------------------------------------
def test_declaration():
    spec = spec_of(TransformerBlock)
    assert spec.alias == "transformer_block" and spec.qualified == "transformer_block@1"
    assert spec.category == "block"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required
    assert {name: arg.default for name, arg in spec.args.items() if name != "heads"} == {
        "causal": False, "expansion": 4, "eps": 1e-5, "bias": True}
    assert all(arg.help for arg in spec.args.values())


def test_one_node_with_one_module_holding_plain_submodules():
    plan = hndl.resolve("transformer_block(2, causal=True, expansion=3, eps=1e-6)",
                        input_shape=("B", 4, 8), output_shape=("B", 4, 8))
    assert [node.alias for node in plan.nodes] == ["transformer_block"]
    assert plan.nodes[0].args == {"heads": 2, "causal": True, "expansion": 3, "eps": 1e-6, "bias": True}
    model, block = _module("transformer_block(2, causal=True, expansion=3, eps=1e-6)", ("B", 4, 8))
    assert list(dict(model.nodes.named_children())) == ["n_n0"]
    assert isinstance(block.norm1, nn.LayerNorm) and block.norm1.eps == 1e-6
    assert isinstance(block.attention, Attention) and block.attention.causal and block.attention.heads == 2
    assert isinstance(block.feed_forward, FeedForward)
    assert tuple(block.feed_forward.fc1.weight.shape) == (24, 8)
    assert set(block.state_dict()) == set(HandwrittenBlock(8, 2).state_dict())


def test_width_is_inferred_backward_through_the_block():
    plan = hndl.resolve("linear()\ntransformer_block(2)", input_shape=("B", 5, 3), output_shape=("B", 5, 8))
    assert plan.nodes[0].args["out_features"] == 8


# -- numerics ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_backward_match_the_reference_and_a_handwritten_block(causal, bias):
    torch.manual_seed(0)
    source = f"transformer_block(4, causal={causal}, expansion=2, eps=1e-6, bias={bias})"
    model, block = _module(source, ("B", 6, 16))
    _perturb(block)
    handwritten = HandwrittenBlock(16, 4, causal=causal, expansion=2, eps=1e-6, bias=bias)
    handwritten.load_state_dict(block.state_dict())
    reference = spec_of(TransformerBlock).reference(block)
    x = torch.randn(3, 6, 16, requires_grad=True)
    upstream = torch.randn(3, 6, 16)
    ours = model(x)
    torch.testing.assert_close(ours, reference(x))
    torch.testing.assert_close(ours, handwritten(x))
    our_grads = torch.autograd.grad(ours, [x, *block.parameters()], upstream)
    reference_grads = torch.autograd.grad(reference(x), [x, *block.parameters()], upstream)
    hand_grads = torch.autograd.grad(handwritten(x), [x, *handwritten.parameters()], upstream)
    assert len(our_grads) == len(hand_grads)
    for a, b, c in zip(our_grads, reference_grads, hand_grads):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)


def test_both_residual_paths_are_present():
    model, block = _module("transformer_block(2)", ("B", 3, 4))
    x = torch.randn(2, 3, 4)
    with torch.no_grad():
        for parameter in block.attention.parameters():
            parameter.zero_()
        for parameter in block.feed_forward.parameters():
            parameter.zero_()
    torch.testing.assert_close(model(x), x, rtol=0, atol=0)  # identity when both branches are zero


def test_causal_block_never_lets_a_later_token_change_an_earlier_output():
    torch.manual_seed(1)
    model, block = _module("transformer_block(2, causal=True)", ("B", 6, 8))
    _perturb(block)
    x = torch.randn(2, 6, 8)
    for position in range(1, 6):
        changed = x.clone()
        changed[:, position] += 3 * torch.randn(2, 8)
        before, after = model(x), model(changed)
        torch.testing.assert_close(after[:, :position], before[:, :position], rtol=0, atol=1e-6)
        assert not torch.allclose(after[:, position], before[:, position])
    uncausal, other = _module("transformer_block(2)", ("B", 6, 8))
    other.load_state_dict(block.state_dict())
    changed = x.clone()
    changed[:, -1] += 3 * torch.randn(2, 8)  # not a constant shift, which layer_norm would remove
    assert not torch.allclose(uncausal(changed)[:, 0], uncausal(x)[:, 0])


def test_forward_is_deterministic_and_draws_no_randomness():
    model, _ = _module("transformer_block(2, causal=True)", ("B", 5, 8))
    x = torch.randn(2, 5, 8)
    state = torch.get_rng_state()
    model.train()
    first, second = model(x), model(x)
    model.eval()
    assert torch.equal(first, second) and torch.equal(first, model(x))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("causal", [False, True])
def test_float64_gradcheck_and_gradgradcheck(causal):
    torch.manual_seed(2)
    _, block = _module(f"transformer_block(2, causal={causal}, expansion=1)", ("B", 3, 4))
    block = block.double()
    _perturb(block)
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in block.parameters())

    def run(x, *values):
        return functional_call(block, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs, fast_mode=True)  # every second derivative, projected
    assert torch.autograd.gradgradcheck(block, (inputs[0],))  # element by element for the input


# -- errors -----------------------------------------------------------------------------------------------------
def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    error = _fails("transformer_block(3)", ("B", 4, 16), ("B", 4, 16))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    error = _fails("linear()\ntransformer_block(5)", ("B", 4, 3), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


def test_direct_construction_checks_divisibility():
    with pytest.raises(HNDLError) as error:
        TransformerBlock(heads=3, D=8)
    assert error.value.code == "E_CONSTRAINT"


@pytest.mark.parametrize("source", ["transformer_block()", "transformer_block(0)", "transformer_block(2.0)",
                                    "transformer_block(2, eps=0)", "transformer_block(2, eps=-1e-5)",
                                    "transformer_block(2, expansion=0)", "transformer_block(2, causal='yes')",
                                    "transformer_block(2, 4)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("transformer_block(2)", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_output_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("transformer_block(2)", ("B", 4, 8), ("B", 5, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("transformer_block(2)", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
