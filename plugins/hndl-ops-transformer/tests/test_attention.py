"""attention@1: declaration, inference, numerics against the written-out reference and against
torch.nn.MultiheadAttention (forward and backward), causal masking, float64 gradcheck and
gradgradcheck, determinism, and every error code it raises."""

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.attention import Attention


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _gradients(fn, x, module, upstream):
    out = fn(x)
    params = [p for p in module.parameters()]
    return out, torch.autograd.grad(out, [x, *params], upstream)


# -- declaration ------------------------------------------------------------------------------------
def test_declaration():
    spec = spec_of(Attention)
    assert spec.alias == "attention" and spec.qualified == "attention@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required and spec.args["heads"].min == 1
    assert spec.args["causal"].default is False and spec.args["bias"].default is True
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, T, D]"


def test_parameters_follow_the_multihead_attention_layout():
    _, layer = _module("attention(4)", ("B", 5, 16))
    shapes = {name: tuple(p.shape) for name, p in layer.named_parameters()}
    assert shapes == {"in_proj_weight": (48, 16), "in_proj_bias": (48,), "out_proj.weight": (16, 16),
                      "out_proj.bias": (16,)}
    assert set(layer.state_dict()) == set(nn.MultiheadAttention(16, 4, batch_first=True).state_dict())
    assert torch.count_nonzero(layer.in_proj_bias) == 0 and torch.count_nonzero(layer.out_proj.bias) == 0
    _, unbiased = _module("attention(4, bias=False)", ("B", 5, 16))
    assert [name for name, _ in unbiased.named_parameters()] == ["in_proj_weight", "out_proj.weight"]


# -- inference ----------------------------------------------------------------------------------------
def test_shapes_come_from_the_input():
    plan = hndl.resolve("attention(2, causal=True)", input_shape=("B", 7, 12), output_shape=("B", 7, 12))
    node = plan.nodes[0]
    assert node.args == {"heads": 2, "causal": True, "bias": True}
    assert node.provenance == {"heads": "explicit", "causal": "explicit", "bias": "default"}
    assert node.input_shapes["x"] == ("B", 7, 12) and node.output_shapes["out"] == ("B", 7, 12)


def test_width_propagates_backward_through_attention():
    plan = hndl.resolve("linear()\nattention(2)", input_shape=("B", 5, 3), output_shape=("B", 5, 8))
    assert plan.nodes[0].args["out_features"] == 8
    assert plan.nodes[1].input_shapes["x"] == ("B", 5, 8)


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_backward_match_the_declared_reference(causal, bias):
    torch.manual_seed(0)
    model, layer = _module(f"attention(4, causal={causal}, bias={bias})", ("B", 6, 16))
    with torch.no_grad():  # non-zero biases so they are exercised
        for parameter in layer.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    reference = spec_of(Attention).reference(layer)
    x = torch.randn(3, 6, 16, requires_grad=True)
    upstream = torch.randn(3, 6, 16)
    ours, our_grads = _gradients(model, x, layer, upstream)
    theirs, their_grads = _gradients(reference, x, layer, upstream)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch_multihead_attention_with_copied_weights(causal, bias):
    torch.manual_seed(1)
    model, layer = _module(f"attention(2, causal={causal}, bias={bias})", ("B", 5, 8))
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    mha = nn.MultiheadAttention(8, 2, batch_first=True, bias=bias)
    mha.load_state_dict(layer.state_dict())
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1) if causal else None

    def torch_attention(x):
        return mha(x, x, x, attn_mask=mask, need_weights=False)[0]

    x = torch.randn(4, 5, 8, requires_grad=True)
    upstream = torch.randn(4, 5, 8)
    ours = model(x)
    theirs = torch_attention(x)
    torch.testing.assert_close(ours, theirs)
    our_grads = torch.autograd.grad(ours, [x, *layer.parameters()], upstream)
    their_grads = torch.autograd.grad(theirs, [x, *mha.parameters()], upstream)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b)


def test_causal_attention_never_lets_a_later_token_change_an_earlier_output():
    torch.manual_seed(2)
    model, _ = _module("attention(2, causal=True)", ("B", 6, 8))
    x = torch.randn(2, 6, 8)
    for position in range(1, 6):
        changed = x.clone()
        changed[:, position] += 3 * torch.randn(2, 8)
        before, after = model(x), model(changed)
        torch.testing.assert_close(after[:, :position], before[:, :position], rtol=0, atol=1e-6)
        assert not torch.allclose(after[:, position], before[:, position])
    first = torch.autograd.functional.jacobian(lambda t: model(t)[0, 2], x)  # d out[0, 2] / d x
    assert torch.count_nonzero(first[:, :, 3:]) == 0 and torch.count_nonzero(first[:, 0, :3]) > 0


def test_without_causal_every_token_sees_the_whole_sequence():
    torch.manual_seed(3)
    model, _ = _module("attention(2)", ("B", 6, 8))
    x = torch.randn(2, 6, 8)
    changed = x.clone()
    changed[:, -1] += 3.0
    assert not torch.allclose(model(changed)[:, 0], model(x)[:, 0])


def test_forward_is_deterministic_and_draws_no_randomness():
    model, _ = _module("attention(4, causal=True)", ("B", 5, 16))
    x = torch.randn(2, 5, 16)
    state = torch.get_rng_state()
    model.train()
    first, second = model(x), model(x)
    model.eval()
    third = model(x)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, second) and torch.equal(first, third)


@pytest.mark.parametrize("causal", [False, True])
def test_float64_gradcheck_and_gradgradcheck(causal):
    torch.manual_seed(4)
    _, layer = _module(f"attention(2, causal={causal})", ("B", 3, 4))
    layer = layer.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def attend(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(attend, inputs)
    assert torch.autograd.gradgradcheck(attend, inputs, fast_mode=True)  # every second derivative, projected
    assert torch.autograd.gradgradcheck(layer, (inputs[0],))  # element by element for the input


def test_float32_second_derivatives_under_the_hosts_math_kernel_choice():
    torch.manual_seed(5)
    _, layer = _module("attention(2, causal=True)", ("B", 4, 8))
    reference = spec_of(Attention).reference(layer)
    x = torch.randn(2, 4, 8, requires_grad=True)

    def penalty(fn):
        (grad,) = torch.autograd.grad(fn(x).pow(2).sum(), x, create_graph=True)
        return torch.autograd.grad(grad.pow(2).sum(), [x, layer.in_proj_weight])

    with sdpa_kernel(SDPBackend.MATH):
        ours = penalty(layer)
    for a, b in zip(ours, penalty(reference)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_compute_dtypes(dtype):
    torch.manual_seed(6)
    model, layer = _module_with_dtype("attention(2, causal=True)", ("B", 5, 8), dtype)
    assert all(p.dtype == getattr(torch, dtype) for p in layer.parameters())
    x = torch.randn(2, 5, 8)
    out = model(x.to(getattr(torch, dtype)))
    assert out.dtype == getattr(torch, dtype)
    expected = spec_of(Attention).reference(layer.float())(x)
    torch.testing.assert_close(out.float(), expected, rtol=5e-2, atol=5e-2)


def _module_with_dtype(source, shape, dtype):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu", dtype=dtype)
    return model, model.nodes.n_n0


# -- errors ---------------------------------------------------------------------------------------------
def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    error = _fails("attention(3)", ("B", 4, 16), ("B", 4, 16))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "16" in error.message and "3" in error.message


def test_divisibility_is_checked_on_an_inferred_width_too():
    error = _fails("linear()\nattention(3, name='attend')", ("B", 4, 5), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "attend"


def test_direct_construction_checks_divisibility():
    with pytest.raises(HNDLError) as error:
        Attention(heads=3, D=8)
    assert error.value.code == "E_CONSTRAINT"
    assert Attention(heads=2, D=8).head_dim == 4


@pytest.mark.parametrize("source", ["attention()", "attention(0)", "attention(True)", "attention(2.0)",
                                    "attention(2, causal=1)", "attention(2, bias='no')", "attention(2, dropout=0.1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("attention(2)", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_output_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("attention(2)", ("B", 4, 8), ("B", 4, 6)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("attention(2)", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"
