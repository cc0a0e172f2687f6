"""relative_position_bias@1: declaration, shapes, T5's bucket function bucket for bucket, the bias
against transformers' T5Attention.compute_bias (tiny T5Config, encoder and decoder) with copied
weights, a whole T5 self-attention written from primitives, the learned table and the
non-persistent bucket buffer, float64 gradcheck and gradgradcheck, the harness, and every error
code it raises."""

import pytest
import torch
from torch.func import functional_call
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5Attention

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.relative_position_bias import RelativePositionBias, t5_bucket, t5_buckets


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _bias(heads, length, width=8, **args):
    text = "".join(f", {name}={value!r}" for name, value in args.items())
    model = network(f"relative_position_bias({heads}{text})", input_shape=("B", length, width),
                    output_shape=("B", heads, length, length), device="cpu")
    return model, model.nodes.n_n0


def _t5(heads=4, buckets=32, max_distance=128, decoder=False, width=16):
    config = T5Config(d_model=width, d_kv=width // heads, num_heads=heads, d_ff=8, num_layers=1,
                      relative_attention_num_buckets=buckets, relative_attention_max_distance=max_distance,
                      is_decoder=decoder, vocab_size=10, attn_implementation="eager")
    return T5Attention(config, has_relative_attention_bias=True).eval()


def test_declaration():
    spec = spec_of(RelativePositionBias)
    assert spec.alias == "relative_position_bias" and spec.qualified == "relative_position_bias@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required and spec.args["heads"].dim == "H"
    assert (spec.args["buckets"].default, spec.args["max_distance"].default, spec.args["bidirectional"].default) == \
        (32, 128, True)
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, H, T, T]"


def test_check_operator():
    check_operator(RelativePositionBias)


def test_shapes_come_from_the_input_and_the_head_count():
    node = hndl.resolve("relative_position_bias(3)", input_shape=("B", 7, 5), output_shape=("B", 3, 7, 7)).nodes[0]
    assert node.args == {"heads": 3, "buckets": 32, "max_distance": 128, "bidirectional": True}
    assert node.output_shapes["out"] == ("B", 3, 7, 7)


def test_parameter_and_buffer_layout():
    model, layer = _bias(4, 6, width=16, buckets=8)
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == \
        [("relative_attention_bias.weight", (8, 4))]
    assert [(name, tuple(b.shape), b.dtype) for name, b in layer.named_buffers()] == \
        [("relative_position_bucket", (6, 6), torch.int64)]
    assert set(layer.state_dict()) == {"relative_attention_bias.weight"}  # the bucket index is not persisted
    assert set(layer.state_dict()) == set(_t5().state_dict()) - {"q.weight", "k.weight", "v.weight", "o.weight"}


def test_initialized_as_transformers_initializes_t5():
    torch.manual_seed(0)
    _, layer = _bias(8, 4, width=64, buckets=256)
    assert abs(layer.relative_attention_bias.weight.std().item() - 64 ** -0.5) < 0.01


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets, max_distance", [(32, 128), (8, 20), (4, 3), (6, 10)])
def test_bucket_function_matches_t5(bidirectional, buckets, max_distance):
    offsets = torch.arange(-300, 301)
    expected = T5Attention._relative_position_bucket(offsets, bidirectional=bidirectional, num_buckets=buckets,
                                                     max_distance=max_distance)
    assert torch.equal(t5_bucket(offsets, buckets, max_distance, bidirectional), expected)
    table = t5_buckets(5, 9, buckets, max_distance, bidirectional)
    assert table.shape == (5, 9) and table[2, 4] == t5_bucket(torch.tensor(2), buckets, max_distance, bidirectional)


@pytest.mark.parametrize("decoder", [False, True])
@pytest.mark.parametrize("length", [5, 40])
def test_matches_t5_compute_bias_with_copied_weights(decoder, length):
    torch.manual_seed(1)
    theirs = _t5(heads=4, buckets=16, max_distance=24, decoder=decoder)
    model, layer = _bias(4, length, width=16, buckets=16, max_distance=24, bidirectional=not decoder)
    layer.load_state_dict({"relative_attention_bias.weight": theirs.relative_attention_bias.weight})
    x = torch.randn(3, length, 16)
    expected = theirs.compute_bias(length, length)
    ours = model(x)
    assert ours.shape == (3, 4, length, length)
    torch.testing.assert_close(ours, expected.expand(3, -1, -1, -1), rtol=0, atol=0)
    torch.testing.assert_close(ours, spec_of(RelativePositionBias).reference(layer)(x), rtol=0, atol=0)
    upstream = torch.randn(3, 4, length, length)
    (ours_grad,) = torch.autograd.grad(ours, layer.relative_attention_bias.weight, upstream)
    (their_grad,) = torch.autograd.grad(expected, theirs.relative_attention_bias.weight, upstream.sum(0, keepdim=True))
    torch.testing.assert_close(ours_grad, their_grad)


def test_t5_self_attention_written_from_primitives():
    torch.manual_seed(2)
    theirs = _t5(heads=2, buckets=8, max_distance=16, width=8)
    source = ("bias = relative_position_bias(x, 2, buckets=8, max_distance=16)\n"
              "q = split_heads(linear(x, 8, bias=False, name='q'), 2)\n"
              "k = split_heads(linear(x, 8, bias=False, name='k'), 2)\n"
              "v = split_heads(linear(x, 8, bias=False, name='v'), 2)\n"
              "mixed = merge_heads(scaled_dot_product_attention(q, k, v, bias, scale=1.0))\n"
              "out = linear(mixed, 8, bias=False, name='o')")
    model = network(source, input_shape=("B", 6, 8), output_shape=("B", 6, 8), device="cpu").eval()
    with torch.no_grad():
        model.nodes.n_n0.relative_attention_bias.weight.copy_(theirs.relative_attention_bias.weight)
        for name in "qkvo":
            getattr(model.nodes, f"n_{name}").weight.copy_(getattr(theirs, name).weight)
    x = torch.randn(2, 6, 8)
    expected, _, _ = theirs(x)
    torch.testing.assert_close(model(x), expected)


def test_the_bias_is_shared_by_every_example():
    model, _ = _bias(2, 5)
    out = model(torch.randn(3, 5, 8))
    assert out.stride(0) == 0 and torch.equal(out[0], out[2])


def test_forward_is_deterministic():
    model, _ = _bias(2, 5)
    x = torch.randn(2, 5, 8)
    model.train()
    first = model(x)
    model.eval()
    assert torch.equal(first, model(x))


def test_float64_gradcheck_and_gradgradcheck_in_the_table():
    _, layer = _bias(2, 4, buckets=6, max_distance=8)
    layer = layer.double()
    weight = layer.relative_attention_bias.weight.detach().clone().requires_grad_()
    x = torch.randn(2, 4, 8, dtype=torch.float64)

    def bias(table):
        return functional_call(layer, {"relative_attention_bias.weight": table}, (x,))

    assert torch.autograd.gradcheck(bias, (weight,))
    assert torch.autograd.gradgradcheck(bias, (weight,))


def test_the_bucket_buffer_survives_dtype_moves():
    _, layer = _bias(2, 4)
    buckets = layer.relative_position_bucket.clone()
    layer.to(torch.bfloat16)
    assert layer.relative_position_bucket.dtype == torch.int64 and torch.equal(layer.relative_position_bucket, buckets)
    assert layer.relative_attention_bias.weight.dtype == torch.bfloat16


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["relative_position_bias()", "relative_position_bias(0)",
                                    "relative_position_bias(2.0)", "relative_position_bias(2, buckets=3)",
                                    "relative_position_bias(2, buckets=1, bidirectional=False)",
                                    "relative_position_bias(2, max_distance=8)",
                                    "relative_position_bias(2, buckets=8, max_distance=2)",
                                    "relative_position_bias(2, bidirectional=1)",
                                    "relative_position_bias(2, num_buckets=32)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_max_distance_just_beyond_the_exact_range_is_accepted():
    _bias(2, 4, buckets=8, max_distance=3)
    _bias(2, 4, buckets=2, max_distance=2, bidirectional=False)


def test_direct_construction_checks_the_arguments():
    with pytest.raises(HNDLError) as error:
        RelativePositionBias(2, buckets=2, T=4, D=8)
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == "buckets"


def test_contradicting_contracts_are_constraint_errors():
    assert _fails("relative_position_bias(2)", ("B", 4, 8), ("B", 3, 4, 4)).code == "E_CONSTRAINT"
    assert _fails("relative_position_bias(2)", ("B", 4, 8), ("B", 2, 4, 5)).code == "E_CONSTRAINT"
    assert _fails("relative_position_bias(2)", ("B", 4, 8), ("B", 2, 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("relative_position_bias(2)", ("B", 4, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"
