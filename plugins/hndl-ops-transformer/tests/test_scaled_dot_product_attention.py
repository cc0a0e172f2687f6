"""scaled_dot_product_attention@1: declaration, extents shared in both directions, the optional
bias port bound and unbound, numerics forward and backward against transformers' eager attention
(repeat_kv, additive mask) and torch's scaled_dot_product_attention, grouped and multi-query
heads, causal masking top-left aligned, scale, float64 gradcheck and gradgradcheck, low
precision, the harness, and every error code it raises."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.models.llama.modeling_llama import eager_attention_forward, repeat_kv

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.scaled_dot_product_attention import ScaledDotProductAttention


def _contracts(heads, groups, length, keys, width, value_width, bias=False):
    inputs = {"q": ("B", heads, length, width), "k": ("B", groups, keys, width),
              "v": ("B", groups, keys, value_width)}
    if bias:
        inputs["bias"] = ("B", heads, length, keys)
    return inputs, ("B", heads, length, value_width)


def _model(heads, groups, length, keys, width, value_width, bias=False, dtype=None, **args):
    inputs, output = _contracts(heads, groups, length, keys, width, value_width, bias)
    text = ", ".join(f"{name}={value!r}" for name, value in args.items())
    ports = "q, k, v, bias" if bias else "q, k, v"
    source = f"scaled_dot_product_attention({ports}{', ' + text if text else ''})"
    model = network(source, input_shape=inputs, output_shape=output, device="cpu",
                    **({"dtype": dtype} if dtype else {}))
    return model, model.nodes.n_n0


def _tensors(heads, groups, length, keys, width, value_width, bias=False, dtype=torch.float32, batch=2):
    shapes = [(batch, heads, length, width), (batch, groups, keys, width), (batch, groups, keys, value_width)]
    if bias:
        shapes.append((batch, heads, length, keys))
    return [torch.randn(shape, dtype=dtype, requires_grad=True) for shape in shapes]


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


class _Groups(nn.Module):
    """What transformers' eager_attention_forward reads of its attention module."""

    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups = groups
        self.train(False)


def _eager(q, k, v, mask, scale):
    out, _ = eager_attention_forward(_Groups(q.shape[1] // k.shape[1]), q, k, v, mask, scale)
    return out.transpose(1, 2)  # transformers returns [B, T, H, F]


# -- declaration ------------------------------------------------------------------------------------
def test_declaration():
    spec = spec_of(ScaledDotProductAttention)
    assert spec.alias == "scaled_dot_product_attention" and spec.qualified == "scaled_dot_product_attention@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ()
    assert spec.args["scale"].default is None and spec.args["causal"].default is False
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "q[B, H, T, E], k[B, G, S, E], v[B, G, S, F], attn_bias?[B, H, T, S] -> out[B, H, T, F]"
    assert spec.optional_inputs == {"attn_bias"}
    assert "[B, H, T, E]" in spec.docstring and "top left" in spec.docstring


def test_check_operator():
    check_operator(ScaledDotProductAttention)


# -- inference ----------------------------------------------------------------------------------------
def test_extents_are_shared_forward():
    inputs, _ = _contracts(4, 2, 5, 7, 8, 3)
    node = hndl.resolve("scaled_dot_product_attention(q, k, v)\nmerge_heads()\nlinear(6)", input_shape=inputs,
                        output_shape=("B", 5, 6)).nodes[0]
    assert node.output_shapes["out"] == ("B", 4, 5, 3)
    assert set(node.input_shapes) == {"q", "k", "v"}  # the unbound bias is absent
    assert node.args == {"scale": None, "causal": False}
    assert node.provenance == {"scale": "default", "causal": "default"}


def test_key_and_value_widths_are_inferred_backward():
    source = ("q = split_heads(linear(x, 32), 4)\nk = split_heads(linear(x), 2)\nv = split_heads(linear(x), 2)\n"
              "out = merge_heads(scaled_dot_product_attention(q, k, v))")
    plan = hndl.resolve(source, input_shape=("B", 5, 3), output_shape=("B", 5, 24))
    widths = [node.args["out_features"] for node in plan.nodes if node.op == "linear@1"]
    assert widths == [32, 16, 12]  # E = 32 / 4 = 8 reaches k; F = 24 / 4 = 6 reaches v


def test_a_bound_bias_is_recorded_and_its_shape_inferred():
    source = ("q = split_heads(x, 2)\nbias = relative_position_bias(x, 2)\n"
              "out = merge_heads(scaled_dot_product_attention(q, q, q, attn_bias=bias))")
    plan = hndl.resolve(source, input_shape=("B", 6, 8), output_shape=("B", 6, 8))
    node = plan.nodes[2]
    assert node.input_shapes["attn_bias"] == ("B", 2, 6, 6)
    assert plan.to_json() and hndl.ResolvedPlan.from_json(plan.to_json()) == plan


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads, groups", [(4, 4), (4, 2), (6, 1)])
def test_matches_transformers_eager_attention_with_a_mask(heads, groups):
    torch.manual_seed(0)
    model, layer = _model(heads, groups, 5, 5, 8, 8, bias=True)
    q, k, v, mask = _tensors(heads, groups, 5, 5, 8, 8, bias=True)
    with torch.no_grad():
        mask[..., 1] = float("-inf")  # an additive mask: key 1 hidden from every query
    upstream = torch.randn(2, heads, 5, 8)
    ours = model(q=q, k=k, v=v, bias=mask)
    theirs = _eager(q, k, v, mask, 1 / math.sqrt(8))
    torch.testing.assert_close(ours, theirs)
    finite = mask.detach().isfinite()
    for a, b in zip(torch.autograd.grad(ours, [q, k, v, mask], upstream),
                    torch.autograd.grad(theirs, [q, k, v, mask], upstream)):
        torch.testing.assert_close(a.masked_fill(~finite, 0) if a.shape == mask.shape else a,
                                   b.masked_fill(~finite, 0) if b.shape == mask.shape else b)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
def test_forward_and_backward_match_the_declared_reference(causal, bias, scale):
    torch.manual_seed(1)
    model, layer = _model(4, 2, 6, 6, 4, 3, bias=bias, causal=causal, scale=scale)
    tensors = _tensors(4, 2, 6, 6, 4, 3, bias=bias)
    names = ["q", "k", "v", "bias"][: len(tensors)]
    reference = spec_of(ScaledDotProductAttention).reference(layer)
    upstream = torch.randn(2, 4, 6, 3)
    ours = model(**dict(zip(names, tensors)))
    theirs = reference(*tensors)
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(torch.autograd.grad(ours, tensors, upstream), torch.autograd.grad(theirs, tensors, upstream)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("length, keys", [(6, 6), (3, 7), (7, 3)])
def test_causal_is_torchs_top_left_alignment(length, keys):
    torch.manual_seed(2)
    model, _ = _model(2, 1, length, keys, 4, 4, causal=True)
    q, k, v = _tensors(2, 1, length, keys, 4, 4)
    expected = F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), is_causal=True)
    torch.testing.assert_close(model(q=q, k=k, v=v), expected)
    allowed = torch.ones(length, keys, dtype=torch.bool).tril()
    mask = torch.zeros(length, keys).masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(model(q=q, k=k, v=v), _eager(q, k, v, mask, 0.5))


def test_causal_attention_never_reads_a_later_key():
    torch.manual_seed(3)
    model, _ = _model(2, 2, 5, 5, 4, 4, causal=True)
    q, k, v = (t.detach() for t in _tensors(2, 2, 5, 5, 4, 4))
    before = model(q=q, k=k, v=v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 3:] += 5.0
    v2[:, :, 3:] += 5.0
    after = model(q=q, k=k2, v=v2)
    torch.testing.assert_close(after[:, :, :3], before[:, :, :3], rtol=0, atol=1e-6)
    assert not torch.allclose(after[:, :, 3:], before[:, :, 3:])


def test_causal_and_bias_combine():
    torch.manual_seed(4)
    model, _ = _model(2, 2, 4, 4, 4, 4, bias=True, causal=True)
    q, k, v, bias = _tensors(2, 2, 4, 4, 4, 4, bias=True)
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(future, float("-inf")))
    torch.testing.assert_close(model(q=q, k=k, v=v, bias=bias), expected)


def test_grouped_heads_read_their_key_value_head_as_repeat_kv():
    # Query head h reads key/value head h // (H / G): give each key/value head a constant value.
    model, _ = _model(6, 3, 2, 4, 4, 1)
    q, k = torch.randn(1, 6, 2, 4), torch.randn(1, 3, 4, 4)
    v = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 4, 1).contiguous()
    out = model(q=q, k=k, v=v)
    torch.testing.assert_close(out[0, :, :, 0], torch.tensor([0.0, 0, 1, 1, 2, 2])[:, None].expand(6, 2))


def test_cross_attention_with_another_value_width():
    torch.manual_seed(5)
    model, _ = _model(2, 2, 3, 9, 4, 5, scale=1.0)
    q, k, v = _tensors(2, 2, 3, 9, 4, 5)
    torch.testing.assert_close(model(q=q, k=k, v=v), F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_forward_is_deterministic_and_draws_no_randomness():
    model, _ = _model(2, 1, 4, 4, 4, 4, causal=True)
    q, k, v = _tensors(2, 1, 4, 4, 4, 4)
    state = torch.get_rng_state()
    model.train()
    first = model(q=q, k=k, v=v)
    model.eval()
    second = model(q=q, k=k, v=v)
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(first, second)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("groups", [2, 1])
def test_float64_gradcheck_and_gradgradcheck(causal, groups):
    torch.manual_seed(6)
    _, layer = _model(2, groups, 3, 3, 2, 2, bias=True, causal=causal)
    tensors = _tensors(2, groups, 3, 3, 2, 2, bias=True, dtype=torch.float64)
    assert torch.autograd.gradcheck(layer, tensors)
    assert torch.autograd.gradgradcheck(layer, tensors)
    assert torch.autograd.gradgradcheck(layer, tensors[:3])  # without the bias


def test_float32_second_derivatives_under_the_hosts_math_kernel_choice():
    torch.manual_seed(7)
    _, layer = _model(4, 2, 4, 4, 4, 4, causal=True)
    reference = spec_of(ScaledDotProductAttention).reference(layer)
    q, k, v = _tensors(4, 2, 4, 4, 4, 4)

    def penalty(fn):
        (grad,) = torch.autograd.grad(fn(q, k, v).pow(2).sum(), q, create_graph=True)
        return torch.autograd.grad(grad.pow(2).sum(), [q, k, v])

    with sdpa_kernel(SDPBackend.MATH):
        ours = penalty(layer)
    for a, b in zip(ours, penalty(reference)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_compute_dtypes(dtype):
    torch.manual_seed(8)
    model, layer = _model(4, 2, 5, 5, 8, 8, bias=True, causal=True, dtype=dtype)
    tensors = [t.detach() for t in _tensors(4, 2, 5, 5, 8, 8, bias=True)]
    low = [t.to(getattr(torch, dtype)) for t in tensors]
    out = model(q=low[0], k=low[1], v=low[2], bias=low[3])
    assert out.dtype == getattr(torch, dtype)
    expected = spec_of(ScaledDotProductAttention).reference(layer)(*tensors)
    torch.testing.assert_close(out.float(), expected, rtol=5e-2, atol=5e-2)


# -- errors ---------------------------------------------------------------------------------------------
def test_key_heads_that_do_not_divide_the_query_heads_is_a_constraint_error():
    inputs, output = _contracts(4, 3, 5, 5, 8, 8)
    error = _fails("scaled_dot_product_attention(q, k, v)", inputs, output)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "G=3" in error.message and "H=4" in error.message


def test_direct_construction_checks_the_grouping():
    with pytest.raises(HNDLError) as error:
        ScaledDotProductAttention(H=4, G=3)
    assert error.value.code == "E_CONSTRAINT"
    assert ScaledDotProductAttention(H=4, G=2).grouped


@pytest.mark.parametrize("change, port", [({"k": ("B", 2, 5, 7)}, "k"), ({"v": ("B", 2, 6, 8)}, "v"),
                                          ({"v": ("B", 1, 5, 8)}, "v"), ({"bias": ("B", 4, 5, 4)}, "bias"),
                                          ({"bias": ("B", 2, 5, 5)}, "bias")])
def test_disagreeing_extents_are_constraint_errors(change, port):
    inputs, output = _contracts(4, 2, 5, 5, 8, 8, bias=True)
    inputs.update(change)
    assert _fails("scaled_dot_product_attention(q, k, v, bias)", inputs, output).code == "E_CONSTRAINT"


def test_an_output_contradicting_the_values_is_a_constraint_error():
    inputs, _ = _contracts(4, 2, 5, 5, 8, 8)
    assert _fails("scaled_dot_product_attention(q, k, v)", inputs, ("B", 4, 5, 6)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("args", ["scale=0.0", "scale=-1.0", "scale='big'", "causal=1", "dropout=0.1", "2",
                                  "scale=True"])
def test_invalid_arguments_are_argument_errors(args):
    inputs, output = _contracts(2, 2, 4, 4, 4, 4)
    assert _fails(f"scaled_dot_product_attention(q, k, v, {args})", inputs, output).code == "E_ARGUMENT"


def test_a_missing_port_is_a_binding_error():
    inputs, output = _contracts(2, 2, 4, 4, 4, 4)
    del inputs["v"]
    assert _fails("scaled_dot_product_attention(q, k)", inputs, output).code == "E_BINDING"


def test_wrong_ranks_are_constraint_errors():
    inputs, output = _contracts(2, 2, 4, 4, 4, 4)
    inputs["q"] = ("B", 4, 4)
    assert _fails("scaled_dot_product_attention(q, k, v)", inputs, output).code == "E_CONSTRAINT"


def test_integer_inputs_are_dtype_errors():
    inputs, output = _contracts(2, 2, 4, 4, 4, 4, bias=True)
    for port in ("q", "bias"):
        error = _fails("scaled_dot_product_attention(q, k, v, bias)", inputs, output, input_dtype={port: "int64"})
        assert error.code == "E_DTYPE"
