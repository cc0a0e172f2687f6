"""attention@2: declaration, inference, numerics against the written-out reference and against
torch.nn.MultiheadAttention (forward and backward), causal masking, float64 gradcheck and
gradgradcheck, determinism, and every error code it raises; then version 2's options: grouped
key/value heads and rotary positions against transformers' LlamaAttention, the rope port (a
rotary_embedding table) against the internal table, the additive attn_bias port, scale, head_dim,
the separate projection layout and per-projection biases, the inv_freq buffer, cross-attention to a
context port against torch.nn.MultiheadAttention, inference of the ports' extents both ways, and
their error codes."""

import copy

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
    assert spec.alias == "attention" and spec.qualified == "attention@2"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required and spec.args["heads"].min == 1
    assert {name: arg.default for name, arg in spec.args.items() if name != "heads"} == {
        "kv_heads": None, "head_dim": None, "causal": False, "scale": None, "bias": True, "query_bias": None,
        "key_bias": None, "value_bias": None, "out_bias": None, "qkv": "fused", "rope_theta": None,
        "rope_dims": None}
    assert spec.args["qkv"].choices == ("fused", "separate")
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D], attn_bias?[B, H, T, S], rope?[B, 2, T, R], context?[B, S, E] -> out[B, T, D]"


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
    assert {name: node.args[name] for name in ("heads", "causal", "bias")} == {"heads": 2, "causal": True,
                                                                                "bias": True}
    assert all(node.args[name] is None for name in ("kv_heads", "head_dim", "scale", "rope_theta", "rope_dims"))
    assert node.provenance["causal"] == "explicit" and node.provenance["bias"] == "default"
    assert node.provenance["kv_heads"] == "default" and node.args["qkv"] == "fused"
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


# == version 2: grouped heads, rotary positions, the bias port, scale, layouts ===============================
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding  # noqa: E402

from hndl_ops_transformer.rotary import rotary_frequencies, rotary_tables  # noqa: E402

LLAMA_SOURCE = "attention(4, kv_heads=2, causal=True, bias=False, qkv='separate', rope_theta=10000.0)"


def _perturb(module, scale=0.1):
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn_like(parameter))


def _llama_attention(layer, width=32, heads=4, kv_heads=2, theta=10000.0):
    config = LlamaConfig(hidden_size=width, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=4 * width, rope_theta=theta, attention_bias=False, vocab_size=16,
                         num_hidden_layers=1)
    config._attn_implementation = "eager"
    theirs = LlamaAttention(config, layer_idx=0)
    theirs.load_state_dict({name.replace("out_proj", "o_proj"): value for name, value in layer.state_dict().items()})
    return theirs, LlamaRotaryEmbedding(config)


def test_grouped_rotary_attention_matches_transformers_llama_attention_forward_and_backward():
    torch.manual_seed(10)
    model, layer = _module(LLAMA_SOURCE, ("B", 7, 32))
    theirs, rotary = _llama_attention(layer)
    assert set(theirs.state_dict()) == {name.replace("out_proj", "o_proj") for name in layer.state_dict()}
    x = torch.randn(2, 7, 32, requires_grad=True)
    positions = torch.arange(7)[None].expand(2, 7)
    causal = torch.full((7, 7), float("-inf")).triu(1)[None, None].expand(2, 1, 7, 7)
    upstream = torch.randn(2, 7, 32)
    ours = model(x)
    reference = spec_of(Attention).reference(layer)(x)
    expected = theirs(x, position_embeddings=rotary(x, positions), attention_mask=causal)[0]
    torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(reference, expected)
    our_grads = torch.autograd.grad(ours, [x, *layer.parameters()], upstream)
    their_grads = torch.autograd.grad(expected, [x, *theirs.parameters()], upstream)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b)


def test_the_rope_port_computes_what_the_internal_table_computes():
    torch.manual_seed(11)
    _, internal = _module(LLAMA_SOURCE, ("B", 6, 32))
    model = network("rope = rotary_embedding(x)\n"
                    "attention(x, 4, kv_heads=2, causal=True, bias=False, qkv='separate', rope=rope)",
                    input_shape=("B", 6, 32), output_shape=("B", 6, 32), device="cpu")
    plan = model.plan
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, 6, 8)  # R inferred from the consumer's head width
    assert plan.nodes[1].input_shapes == {"x": ("B", 6, 32), "rope": ("B", 2, 6, 8)}
    external = model.nodes.n_n1
    assert external.inv_freq is None and "inv_freq" not in dict(external.named_buffers())
    external.load_state_dict(internal.state_dict())
    x = torch.randn(3, 6, 32)
    torch.testing.assert_close(model(x), internal(x), rtol=0, atol=0)
    cos, sin = rotary_tables(rotary_frequencies(8, 10000.0), 6)
    rope = torch.stack((cos, sin))[None].expand(3, 2, 6, 8)
    torch.testing.assert_close(spec_of(Attention).reference(external)(x, None, rope), internal(x))


def test_partial_rotary_turns_only_rope_dims_of_each_head():
    torch.manual_seed(12)
    model, layer = _module("attention(2, rope_theta=100.0, rope_dims=4)", ("B", 5, 16))
    assert layer.rope_dims == 4 and tuple(layer.inv_freq.shape) == (2,)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(model(x), spec_of(Attention).reference(layer)(x))
    _, whole = _module("attention(2, rope_theta=100.0)", ("B", 5, 16))
    whole.load_state_dict(layer.state_dict())
    assert not torch.allclose(whole(x), layer(x))


def test_inv_freq_is_a_non_persistent_float32_buffer_that_survives_a_dtype_change():
    _, layer = _module(LLAMA_SOURCE, ("B", 6, 32))
    assert "inv_freq" in dict(layer.named_buffers()) and "inv_freq" not in layer.state_dict()
    assert all("inv_freq" not in name for name, _ in layer.named_parameters())
    torch.testing.assert_close(layer.inv_freq, 1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8), rtol=0, atol=0)
    x = torch.randn(2, 6, 32)
    expected = layer(x)
    exact = rotary_tables(rotary_frequencies(8, 10000.0), 6)
    wide = copy.deepcopy(layer).double()
    torch.testing.assert_close(wide(x.double()).float(), expected, rtol=1e-5, atol=1e-5)
    half = copy.deepcopy(layer).to(torch.bfloat16)
    assert half.inv_freq.dtype == torch.float32  # .to() keeps the frequencies float32, as transformers does
    for ours, theirs in zip(rotary_tables(half.inv_freq, 6, torch.bfloat16), exact):
        assert torch.equal(ours, theirs.bfloat16())
    torch.testing.assert_close(half(x.bfloat16()).float(), expected, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_the_attn_bias_port_is_added_to_the_scores(causal):
    torch.manual_seed(13)
    model = network(f"b = relative_position_bias(x, 2)\nattention(x, 2, causal={causal}, attn_bias=b)",
                    input_shape=("B", 5, 8), output_shape=("B", 5, 8), device="cpu")
    assert model.plan.nodes[1].input_shapes == {"x": ("B", 5, 8), "attn_bias": ("B", 2, 5, 5)}
    layer = model.nodes.n_n1
    _perturb(layer)
    x = torch.randn(3, 5, 8, requires_grad=True)
    bias = torch.randn(3, 2, 5, 5, requires_grad=True)
    upstream = torch.randn(3, 5, 8)
    ours = layer(x, bias)
    theirs = spec_of(Attention).reference(layer)(x, bias)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(torch.autograd.grad(ours, [x, bias], upstream), torch.autograd.grad(theirs, [x, bias], upstream)):
        torch.testing.assert_close(a, b)
    masked = bias.detach().clone()
    masked[:, :, :, -1] = float("-inf")  # an additive mask: nobody attends to the last position
    changed = x.detach().clone()
    changed[:, -1] += 5.0
    torch.testing.assert_close(layer(changed, masked)[:, :-1], layer(x.detach(), masked)[:, :-1])


def test_scale_replaces_one_over_the_square_root_of_the_head_width():
    torch.manual_seed(14)
    model, layer = _module("attention(2, scale=1.0)", ("B", 5, 8))
    assert layer.scale == 1.0
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(model(x), spec_of(Attention).reference(layer)(x))
    _, default = _module("attention(2)", ("B", 5, 8))
    default.load_state_dict(layer.state_dict())
    assert default.scale == 0.5 and not torch.allclose(default(x), layer(x))


def test_head_dim_sets_the_inner_width_independently_of_d():
    torch.manual_seed(15)
    model, layer = _module("attention(3, head_dim=4, qkv='separate')", ("B", 5, 10))
    shapes = {name: tuple(p.shape) for name, p in layer.named_parameters()}
    assert shapes == {"q_proj.weight": (12, 10), "q_proj.bias": (12,), "k_proj.weight": (12, 10),
                      "k_proj.bias": (12,), "v_proj.weight": (12, 10), "v_proj.bias": (12,),
                      "out_proj.weight": (10, 12), "out_proj.bias": (10,)}
    _perturb(layer)
    x = torch.randn(2, 5, 10)
    torch.testing.assert_close(model(x), spec_of(Attention).reference(layer)(x))


@pytest.mark.parametrize("source, shapes", [
    ("attention(4, kv_heads=2)", {"in_proj_weight": (32, 16), "in_proj_bias": (32,), "out_proj.weight": (16, 16),
                                  "out_proj.bias": (16,)}),
    ("attention(4, kv_heads=1, bias=False)", {"in_proj_weight": (24, 16), "out_proj.weight": (16, 16)}),
    ("attention(4, key_bias=False, qkv='separate')",
     {"q_proj.weight": (16, 16), "q_proj.bias": (16,), "k_proj.weight": (16, 16), "v_proj.weight": (16, 16),
      "v_proj.bias": (16,), "out_proj.weight": (16, 16), "out_proj.bias": (16,)}),
    ("attention(4, bias=False, out_bias=True)", {"in_proj_weight": (48, 16), "out_proj.weight": (16, 16),
                                                 "out_proj.bias": (16,)}),
])
def test_parameter_layouts(source, shapes):
    torch.manual_seed(16)
    model, layer = _module(source, ("B", 5, 16))
    assert {name: tuple(p.shape) for name, p in layer.named_parameters()} == shapes
    assert all(torch.count_nonzero(p) == 0 for name, p in layer.named_parameters() if name.endswith("bias"))
    _perturb(layer)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(model(x), spec_of(Attention).reference(layer)(x))


def test_grouped_heads_share_keys_and_values_as_repeat_kv_arranges_them():
    torch.manual_seed(17)
    _, grouped = _module("attention(4, kv_heads=2, qkv='separate')", ("B", 5, 16))
    _, full = _module("attention(4, qkv='separate')", ("B", 5, 16))
    state = grouped.state_dict()
    for name in ("k_proj", "v_proj"):  # key/value head g serves query heads 2g and 2g + 1
        for suffix in ("weight", "bias"):
            value = state[f"{name}.{suffix}"]
            state[f"{name}.{suffix}"] = value.reshape(2, 4, *value.shape[1:]).repeat_interleave(2, 0).reshape(
                16, *value.shape[1:])
    full.load_state_dict(state)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(grouped(x), full(x))


def test_version_two_defaults_compute_what_version_one_computed():
    from hndl_ops_transformer.attention_v1 import AttentionV1
    torch.manual_seed(18)
    old = AttentionV1(heads=2, causal=True, D=8)
    new = Attention(heads=2, causal=True, D=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(new(x), old(x), rtol=0, atol=0)


def test_the_output_contract_fixes_the_width_of_a_grouped_rotary_layer():
    plan = hndl.resolve("linear()\n" + LLAMA_SOURCE, input_shape=("B", 5, 3), output_shape=("B", 5, 16))
    assert plan.nodes[0].args["out_features"] == 16 and plan.nodes[1].input_shapes["x"] == ("B", 5, 16)


def test_float64_gradcheck_and_gradgradcheck_with_every_option():
    torch.manual_seed(19)
    layer = Attention(heads=4, kv_heads=2, head_dim=3, causal=True, scale=0.7, key_bias=False, qkv="separate",
                      rope_theta=50.0, rope_dims=2, D=5).double()
    _perturb(layer)
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def attend(x, bias, *values):
        return functional_call(layer, dict(zip(names, values)), (x, bias))

    inputs = (torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 4, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(attend, inputs)
    assert torch.autograd.gradgradcheck(attend, inputs, fast_mode=True)
    rope = torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    external = Attention(heads=2, kv_heads=1, qkv="separate", rope_dims=2, D=4).double()
    assert torch.autograd.gradcheck(lambda x, r: external(x, None, r),
                                    (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), rope))


# -- cross-attention: the context port ---------------------------------------------------------------------------
CROSS = "memory = reshape(x, 4, 64)\nattention(x, 4, {options}context=memory)"


def test_cross_attention_reads_keys_and_values_from_a_context_of_another_length_and_width():
    torch.manual_seed(40)
    model = network(CROSS.format(options="qkv='separate', "), input_shape=("B", 8, 32), output_shape=("B", 8, 32),
                    device="cpu")
    node = model.plan.nodes[1]
    assert node.input_shapes == {"x": ("B", 8, 32), "context": ("B", 4, 64)}
    layer = model.nodes.n_n1
    assert tuple(layer.k_proj.weight.shape) == (32, 64) and tuple(layer.v_proj.weight.shape) == (32, 64)
    _perturb(layer)
    mha = nn.MultiheadAttention(32, 4, batch_first=True, kdim=64, vdim=64)
    with torch.no_grad():
        mha.q_proj_weight.copy_(layer.q_proj.weight)
        mha.k_proj_weight.copy_(layer.k_proj.weight)
        mha.v_proj_weight.copy_(layer.v_proj.weight)
        mha.in_proj_bias.copy_(torch.cat((layer.q_proj.bias, layer.k_proj.bias, layer.v_proj.bias)))
        mha.out_proj.load_state_dict(layer.out_proj.state_dict())
    x = torch.randn(3, 8, 32, requires_grad=True)
    memory = x.reshape(3, 4, 64)
    ours = model(x)
    theirs = mha(x, memory, memory, need_weights=False)[0]
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours, spec_of(Attention).reference(layer)(x, context=memory))
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(torch.autograd.grad(ours, x, upstream)[0], torch.autograd.grad(theirs, x, upstream)[0])


def test_fused_cross_attention_loads_multihead_attention_weights():
    torch.manual_seed(41)
    layer = Attention(heads=2, D=8)
    _perturb(layer)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    mha.load_state_dict(layer.state_dict())
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    bias = torch.randn(2, 2, 5, 3)
    torch.testing.assert_close(layer(x, context=memory), mha(x, memory, memory, need_weights=False)[0])
    torch.testing.assert_close(layer(x, bias, context=memory),
                               spec_of(Attention).reference(layer)(x, bias, context=memory))
    grouped = Attention(heads=4, kv_heads=2, D=8)
    torch.testing.assert_close(grouped(x, context=memory), spec_of(Attention).reference(grouped)(x, context=memory))


def test_matches_whisper_cross_attention_without_a_key_bias():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperAttention

    torch.manual_seed(43)
    layer = Attention(heads=4, key_bias=False, qkv="separate", D=32)
    _perturb(layer)
    config = WhisperConfig(d_model=32, decoder_attention_heads=4)
    config._attn_implementation = "eager"
    theirs = WhisperAttention(32, 4, is_decoder=True, layer_idx=0, config=config).eval()
    theirs.load_state_dict(layer.state_dict())  # q_proj, k_proj (no bias), v_proj, out_proj one to one
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    torch.testing.assert_close(layer(x, context=memory), theirs(x, key_value_states=memory)[0])


def test_cross_attention_float64_gradcheck():
    torch.manual_seed(42)
    layer = Attention(heads=2, kv_heads=1, qkv="separate", key_bias=False, D=4, E=3).double()
    _perturb(layer)
    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda x, b, c: layer(x, b, context=c), inputs)
    assert torch.autograd.gradgradcheck(lambda x, b, c: layer(x, b, context=c), inputs)


@pytest.mark.parametrize("options, code", [("qkv='separate', causal=True, ", "E_ARGUMENT"),
                                           ("qkv='separate', rope_theta=10000.0, ", "E_ARGUMENT"),
                                           ("", "E_CONSTRAINT")])
def test_cross_attention_errors(options, code):
    assert _fails(CROSS.format(options=options), ("B", 8, 32), ("B", 8, 32)).code == code


def test_without_a_context_the_bias_is_square():
    source = "m = reshape(x, 4, 64)\nb = relative_position_bias(m, 2)\nattention(x, 2, attn_bias=b)"
    assert _fails(source, ("B", 8, 32), ("B", 8, 32)).code == "E_CONSTRAINT"


def test_direct_construction_refuses_a_fused_projection_of_another_context_width():
    with pytest.raises(HNDLError) as error:
        Attention(heads=2, D=8, E=6)
    assert error.value.code == "E_CONSTRAINT" and error.value.location.field == "qkv"


# -- version 2's errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, field", [
    ("attention(4, kv_heads=3)", "kv_heads"),
    ("attention(4, key_bias=False)", "qkv"),
    ("attention(4, bias=False, query_bias=True, qkv='fused')", "qkv"),
    ("attention(4, rope_theta=10000.0, rope_dims=3)", "rope_dims"),
    ("attention(4, head_dim=4, rope_theta=10000.0, rope_dims=6)", "rope_dims"),
])
def test_inconsistent_arguments_are_argument_errors_naming_the_field(source, field):
    error = _fails(source, ("B", 4, 16), ("B", 4, 16))
    assert error.code == "E_ARGUMENT" and error.location.field == field and error.remedies


@pytest.mark.parametrize("source", ["attention(2, kv_heads=0)", "attention(2, head_dim=0)", "attention(2, scale=0)",
                                    "attention(2, scale=-1.0)", "attention(2, qkv='split')",
                                    "attention(2, rope_theta=0)", "attention(2, rope_dims=1)",
                                    "attention(2, key_bias=1)", "attention(2, rope_dims=4)"])
def test_invalid_version_two_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_rope_dims_wider_than_the_inferred_head_is_a_constraint_error():
    assert _fails("attention(4, rope_theta=10000.0, rope_dims=6)", ("B", 4, 16), ("B", 4, 16)).code == "E_CONSTRAINT"


def test_a_rope_port_and_rope_theta_together_are_an_argument_error():
    error = _fails("r = rotary_embedding(x)\nattention(x, 2, rope_theta=10000.0, rope=r)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_ARGUMENT" and "rope_theta" in error.message


def test_a_rope_table_of_the_wrong_width_is_a_constraint_error():
    error = _fails("r = rotary_embedding(x, 2)\nattention(x, 2, rope=r)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT"


def test_a_bias_with_another_head_count_is_a_constraint_error():
    error = _fails("b = relative_position_bias(x, 3)\nattention(x, 2, attn_bias=b)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT"


def test_head_dim_lifts_the_divisibility_rule():
    plan = hndl.resolve("attention(3, head_dim=4)", input_shape=("B", 4, 8), output_shape=("B", 4, 8))
    assert plan.nodes[0].args["head_dim"] == 4


@pytest.mark.parametrize("options, field", [({"kv_heads": 3}, "kv_heads"), ({"key_bias": False}, "qkv"),
                                            ({"qkv": "split"}, "qkv"),
                                            ({"rope_theta": 1e4, "rope_dims": 6}, "rope_dims")])
def test_direct_construction_checks_the_arguments(options, field):
    with pytest.raises(HNDLError) as error:
        Attention(heads=4, D=16, **options)
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == field
