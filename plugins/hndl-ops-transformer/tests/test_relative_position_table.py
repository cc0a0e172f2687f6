"""relative_position_table@1: declaration, shape inference from the window in both directions, the
index against torchvision's define_relative_position_index, the bias against torchvision's
ShiftedWindowAttention (_get_relative_position_bias) with its weights and buffer loaded, the 1-D form
against a handwritten gather, window attention written from primitives against torchvision's on one
unshifted window, float64 gradcheck and gradgradcheck, the harness, and every error code it raises."""

import pytest
import torch
from torch.func import functional_call
from torchvision.models.swin_transformer import ShiftedWindowAttention, _get_relative_position_bias

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.relative_position_table import RelativePositionTable, relative_position_index


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _table(heads, window, width=8):
    wh, ww = window
    length = wh * ww
    model = network(f"relative_position_table({heads}, {tuple(window)!r})", input_shape=("B", length, width),
                    output_shape=("B", heads, length, length), device="cpu")
    return model, model.nodes.n_n0


def _torchvision(window, heads=2, dim=8):
    return ShiftedWindowAttention(dim, list(window), [0, 0], heads).eval()


def test_declaration():
    spec = spec_of(RelativePositionTable)
    assert spec.alias == "relative_position_table" and spec.qualified == "relative_position_table@1"
    assert spec.category == "attention"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads", "window")
    assert spec.args["heads"].required and spec.args["heads"].dim == "H" and spec.args["window"].required
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, H, T, T]"


def test_check_operator():
    check_operator(RelativePositionTable)


def test_shapes_come_from_the_input_and_the_window():
    node = hndl.resolve("relative_position_table(3, 7)", input_shape=("B", 49, 5),
                        output_shape=("B", 3, 49, 49)).nodes[0]
    assert node.args == {"heads": 3, "window": (7, 7)}
    assert node.output_shapes["out"] == ("B", 3, 49, 49)


def test_the_window_fixes_the_token_count_backward_through_a_producer():
    # 24 features per example factor into [T, D] only once the window says T = 6.
    source = ("y = reshape(x)\nbias = relative_position_table(y, 2, (2, 3))\nq = split_heads(y, 2)\n"
              "out = flatten(merge_heads(scaled_dot_product_attention(q, q, q, bias)))")
    plan = hndl.resolve(source, input_shape=("B", 24), output_shape=("B", 24))
    assert plan.nodes[0].output_shapes["out"] == ("B", 6, 4)
    assert plan.nodes[1].output_shapes["out"] == ("B", 2, 6, 6)


@pytest.mark.parametrize("window", [(1, 1), (2, 3), (3, 2), (4, 4), (1, 5), (7, 7)])
def test_index_matches_torchvision(window):
    theirs = _torchvision(window).relative_position_index
    ours = relative_position_index(window)
    assert ours.dtype == torch.int64 and torch.equal(ours, theirs)


def test_parameter_and_buffer_layout():
    model, layer = _table(4, (2, 3))
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == \
        [("relative_position_bias_table", (15, 4))]
    assert [(name, tuple(b.shape), b.dtype) for name, b in layer.named_buffers()] == \
        [("relative_position_index", (36,), torch.int64)]
    assert set(layer.state_dict()) == {"relative_position_bias_table", "relative_position_index"}  # persistent
    assert set(layer.state_dict()) <= set(_torchvision((2, 3), heads=4).state_dict())


def test_initialized_as_torchvision_initializes_it():
    torch.manual_seed(0)
    _, layer = _table(64, (7, 7))
    table = layer.relative_position_bias_table.detach()
    # trunc_normal_(std=0.02) with torch's default cut at +-2 (100 std): a normal of std 0.02
    assert abs(table.std().item() - 0.02) < 0.001 and abs(table.mean().item()) < 0.001
    assert table.abs().max().item() <= 2.0


@pytest.mark.parametrize("window", [(2, 3), (3, 3), (4, 2)])
def test_matches_torchvision_with_its_state_dict(window):
    torch.manual_seed(1)
    theirs = _torchvision(window, heads=3)
    model, layer = _table(3, window)
    layer.load_state_dict({name: theirs.state_dict()[name]
                           for name in ("relative_position_bias_table", "relative_position_index")})
    length = window[0] * window[1]
    x = torch.randn(2, length, 8)
    expected = _get_relative_position_bias(theirs.relative_position_bias_table, theirs.relative_position_index,
                                           list(window))
    torch.testing.assert_close(theirs.get_relative_position_bias(), expected)
    ours = model(x)
    assert ours.shape == (2, 3, length, length)
    torch.testing.assert_close(ours, expected.expand(2, -1, -1, -1), rtol=0, atol=0)
    torch.testing.assert_close(ours, spec_of(RelativePositionTable).reference(layer)(x), rtol=0, atol=0)
    upstream = torch.randn(2, 3, length, length)
    (ours_grad,) = torch.autograd.grad(ours, layer.relative_position_bias_table, upstream)
    (their_grad,) = torch.autograd.grad(expected, theirs.relative_position_bias_table, upstream.sum(0, keepdim=True))
    torch.testing.assert_close(ours_grad, their_grad)


def test_the_1d_form_is_a_gather_of_the_offsets():
    torch.manual_seed(2)
    model, layer = _table(2, (1, 5))
    table = layer.relative_position_bias_table
    assert table.shape == (9, 2)
    positions = torch.arange(5)
    offsets = positions[:, None] - positions[None, :] + 4              # t - s + T - 1
    expected = table[offsets].permute(2, 0, 1)                          # [H, T, T]
    for t in range(5):
        for s in range(5):
            assert torch.equal(expected[:, t, s], table[t - s + 4])
    ours = model(torch.randn(3, 5, 8))
    torch.testing.assert_close(ours, expected.expand(3, -1, -1, -1), rtol=0, atol=0)
    upstream = torch.randn(3, 2, 5, 5)
    (ours_grad,) = torch.autograd.grad(ours, table, upstream)
    manual = torch.zeros_like(table)
    summed = upstream.sum(0)
    for t in range(5):
        for s in range(5):
            manual[t - s + 4] += summed[:, t, s]
    torch.testing.assert_close(ours_grad, manual)


@pytest.mark.parametrize("window", [(2, 3), (3, 3)])
def test_window_attention_written_from_primitives_matches_torchvision(window):
    torch.manual_seed(3)
    wh, ww = window
    length, dim, heads = wh * ww, 8, 2
    theirs = _torchvision(window, heads=heads, dim=dim)
    source = (f"bias = relative_position_table(x, {heads}, {window!r})\n"
              f"q = split_heads(linear(x, {dim}, name='q'), {heads})\n"
              f"k = split_heads(linear(x, {dim}, name='k'), {heads})\n"
              f"v = split_heads(linear(x, {dim}, name='v'), {heads})\n"
              "mixed = merge_heads(scaled_dot_product_attention(q, k, v, attn_bias=bias))\n"
              f"out = linear(mixed, {dim}, name='o')")
    model = network(source, input_shape=("B", length, dim), output_shape=("B", length, dim), device="cpu").eval()
    with torch.no_grad():
        model.nodes.n_n0.load_state_dict({name: theirs.state_dict()[name]
                                          for name in ("relative_position_bias_table", "relative_position_index")})
        for index, name in enumerate("qkv"):
            getattr(model.nodes, f"n_{name}").weight.copy_(theirs.qkv.weight[index * dim:(index + 1) * dim])
            getattr(model.nodes, f"n_{name}").bias.copy_(theirs.qkv.bias[index * dim:(index + 1) * dim])
        model.nodes.n_o.weight.copy_(theirs.proj.weight)
        model.nodes.n_o.bias.copy_(theirs.proj.bias)
    windows = torch.randn(4, wh, ww, dim)  # a batch of single, unshifted windows (torchvision is channels-last)
    expected = theirs(windows).reshape(4, length, dim)
    torch.testing.assert_close(model(windows.reshape(4, length, dim)), expected)



def test_fused_attention_with_the_table_on_its_bias_port_matches_torchvision():
    torch.manual_seed(4)
    window, dim, heads = (2, 2), 8, 2
    theirs = _torchvision(window, heads=heads, dim=dim)
    source = f"bias = relative_position_table(x, {heads}, {window!r})\nout = attention(x, bias, heads={heads})"
    model = network(source, input_shape=("B", 4, dim), output_shape=("B", 4, dim), device="cpu").eval()
    model.nodes.n_n0.load_state_dict({name: theirs.state_dict()[name]
                                      for name in ("relative_position_bias_table", "relative_position_index")})
    model.nodes.n_n1.load_state_dict({"in_proj_weight": theirs.qkv.weight, "in_proj_bias": theirs.qkv.bias,
                                      "out_proj.weight": theirs.proj.weight, "out_proj.bias": theirs.proj.bias})
    windows = torch.randn(3, 2, 2, dim)
    torch.testing.assert_close(model(windows.reshape(3, 4, dim)), theirs(windows).reshape(3, 4, dim))

def test_the_bias_is_shared_by_every_example():
    model, _ = _table(2, (2, 2))
    out = model(torch.randn(3, 4, 8))
    assert out.stride(0) == 0 and torch.equal(out[0], out[2])


def test_forward_is_deterministic():
    model, _ = _table(2, (2, 2))
    x = torch.randn(2, 4, 8)
    model.train()
    first = model(x)
    model.eval()
    assert torch.equal(first, model(x))


def test_float64_gradcheck_and_gradgradcheck_in_the_table():
    _, layer = _table(2, (2, 3))
    layer = layer.double()
    table = layer.relative_position_bias_table.detach().clone().requires_grad_()
    x = torch.randn(2, 6, 8, dtype=torch.float64)

    def bias(weights):
        return functional_call(layer, {"relative_position_bias_table": weights}, (x,))

    assert torch.autograd.gradcheck(bias, (table,))
    assert torch.autograd.gradgradcheck(bias, (table,))


def test_the_index_buffer_survives_dtype_moves():
    _, layer = _table(2, (2, 3))
    index = layer.relative_position_index.clone()
    layer.to(torch.bfloat16)
    assert layer.relative_position_index.dtype == torch.int64 and torch.equal(layer.relative_position_index, index)
    assert layer.relative_position_bias_table.dtype == torch.bfloat16


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["relative_position_table()", "relative_position_table(2)",
                                    "relative_position_table(0, 2)", "relative_position_table(2.0, 2)",
                                    "relative_position_table(2, 0)", "relative_position_table(2, (2, 0))",
                                    "relative_position_table(2, (1, 2, 2))", "relative_position_table(2, 2.0)",
                                    "relative_position_table(2, 2, buckets=4)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_a_token_count_other_than_the_window_is_a_constraint_error():
    error = _fails("relative_position_table(2, 7)", ("B", 48, 8), ("B", 2, 48, 48))
    assert error.code == "E_CONSTRAINT" and "49" in error.message and error.remedies
    error = _fails("relative_position_table(2, (1, 5))", ("B", 4, 8), ("B", 2, 4, 4))
    assert error.code == "E_CONSTRAINT" and "window=(1, 4)" in " ".join(error.remedies)


def test_a_sequence_of_another_rank_is_a_rank_constraint_error():
    error = _fails("relative_position_table(2, (2, 3))", ("B", 24), ("B", 2, 6, 6))
    assert error.code == "E_CONSTRAINT" and "rank 3" in error.message


def test_contradicting_output_contracts_are_constraint_errors():
    assert _fails("relative_position_table(2, 2)", ("B", 4, 8), ("B", 3, 4, 4)).code == "E_CONSTRAINT"
    assert _fails("relative_position_table(2, 2)", ("B", 4, 8), ("B", 2, 4, 5)).code == "E_CONSTRAINT"
    assert _fails("relative_position_table(2, 2)", ("B", 4, 8), ("B", 2, 5, 5)).code == "E_CONSTRAINT"
    assert _fails("relative_position_table(2, 2)", ("B", 4, 8), ("B", 2, 4)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("relative_position_table(2, 2)", ("B", 4, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"
