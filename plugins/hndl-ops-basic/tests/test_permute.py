"""permute@1: reorder the non-batch axes, written without the batch (permute(2, 3, 1) is torch's
x.permute(0, 2, 3, 1)); a torch-style full order with 0 is E_ARGUMENT. Declaration, numerics
forward and backward against torch.permute on [B, T, D] and [B, C, H, W], gradcheck and
gradgradcheck in float64, rank and every extent inferred both ways, every error code, harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.permute import Permute


def _resolve(source, input_shape, output_shape):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Permute)
    assert spec.alias == "permute" and spec.qualified == "permute@1" and spec.version == 1
    assert spec.positional_rest == "dims"
    dims = spec.args["dims"]
    assert dims.type == "ints" and dims.required and "0" in dims.help and "batch" in dims.help
    assert spec.category == "shape" and spec.batch == "shared"
    assert spec.relation is not None and spec.validate is not None and spec.reference is not None
    assert "x.permute(0, 2, 3, 1)" in spec.docstring and "E_ARGUMENT" in spec.docstring


def test_passes_the_harness():
    check_operator(Permute, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape, dims, expected", [
    (("B", 4, 6), (2, 1), ("B", 6, 4)),
    (("B", 4, 6), (1, 2), ("B", 4, 6)),
    (("B", 4, 6), (-1, -2), ("B", 6, 4)),
    (("B", 6), (1,), ("B", 6)),
    (("B", 2, 3, 5), (2, 3, 1), ("B", 3, 5, 2)),
    (("B", 2, 3, 5), (3, 1, 2), ("B", 5, 2, 3)),
    (("B", 2, 3, 5), (-2, -1, 1), ("B", 3, 5, 2)),
    (("B", 2, 3, 5), (1, 3, 2), ("B", 2, 5, 3)),
])
def test_numerics_forward_and_backward(shape, dims, expected):
    source = f"permute({', '.join(map(str, dims))})"
    model = network(source, input_shape=shape, output_shape=expected, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert node.args["dims"] == dims and module.dims == dims  # kept as written
    assert node.output_shapes["out"] == expected and list(model.parameters()) == []
    order = (0, *(d % len(shape) for d in dims))
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, no copy
    assert torch.equal(out, torch.permute(saved, order))
    assert torch.equal(out, spec_of(Permute).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    inverse = [order.index(axis) for axis in range(len(order))]
    assert torch.equal(grad, upstream.permute(inverse))


def test_keyword_tuple_spelling():
    plan = _resolve("permute(dims=(2, 3, 1))", ("B", 2, 3, 5), ("B", 3, 5, 2))
    assert plan.nodes[0].args["dims"] == (2, 3, 1)


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("permute(3, 1, 2)", input_shape=("B", 2, 3, 2), output_shape=("B", 2, 2, 3), device="cpu")
    module = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_the_number_of_entries_fixes_the_rank_both_ways():
    # The bare reshape takes rank 3 from permute(2, 1), then its free factor from the element count.
    plan = _resolve("reshape(8)\npermute(2, 1)\nlayer_norm()", ("B", 8, 4, 4), ("B", 16, 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 16)
    assert plan.nodes[2].input_shapes["x"] == ("B", 16, 8)
    # ... and forward: a bare reshape after permute(2, 3, 1) sees rank 4.
    plan = _resolve("permute(2, 3, 1)\nreshape()\nlinear()", ("B", 2, 3, 4), ("B", 5))
    assert plan.nodes[0].output_shapes["out"] == ("B", 3, 4, 2)


@pytest.mark.parametrize("dims", ["2, 1", "-1, 1", "2, -2"])
def test_a_width_known_only_from_the_output_reaches_the_linear_before(dims):
    plan = _resolve(f"linear()\npermute({dims})", ("B", 4, 8), ("B", 16, 4))
    assert plan.nodes[0].args["out_features"] == 16
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_channels_last_round_trip_keeps_every_extent():
    source = "permute(2, 3, 1)\npermute(3, 1, 2)"
    plan = _resolve(source, ("B", 3, 4, 5), ("B", 3, 4, 5))
    assert plan.nodes[0].output_shapes["out"] == ("B", 4, 5, 3)
    model = network(source, input_shape=("B", 3, 4, 5), output_shape=("B", 3, 4, 5), device="cpu")
    x = torch.randn(2, 3, 4, 5)
    assert torch.equal(model(x), x)


def test_channels_last_layer_norm_matches_torch():
    # [B, C, H, W] -> [B, C, H*W] -> [B, H*W, C]: each pixel normalized over its channels, and back.
    source = "reshape(8, 16)\npermute(2, 1)\nlayer_norm(elementwise_affine=False)\npermute(2, 1)\nreshape(8, 4, 4)"
    model = network(source, input_shape=("B", 8, 4, 4), output_shape=("B", 8, 4, 4), device="cpu")
    x = torch.randn(2, 8, 4, 4)
    expected = F.layer_norm(x.permute(0, 2, 3, 1), (8,)).permute(0, 3, 1, 2)
    torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize("source, remedy", [("permute(0, 2, 1)", "permute(2, 1)"),
                                            ("permute(0, 2, 3, 1)", "permute(2, 3, 1)"),
                                            ("permute(2, 0, 1)", None), ("permute(dims=(0, 1))", "permute(1)")])
def test_a_torch_style_full_order_with_the_batch_is_an_argument_error(source, remedy):
    error = _fails(source, ("B", 4, 6), ("B", 6, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "dims" and "batch" in error.message
    if remedy is not None:
        assert any(remedy in text for text in error.remedies)


@pytest.mark.parametrize("source", ["permute(1, 1)", "permute(2, 3)", "permute(-3, 1)", "permute(1, 3)",
                                    "permute(2, -1)", "permute(1, 2, 3, 4)", "permute()", "permute(dims=())",
                                    "permute(1.0, 2)", "permute(True, 2)", 'permute("2", 1)', "permute(None)"])
def test_an_invalid_order_is_an_argument_error(source):
    error = _fails(source, ("B", 4, 6), ("B", 6, 4))
    assert error.code == "E_ARGUMENT"


def test_entries_for_another_rank_are_a_constraint_error():
    error = _fails("permute(2, 3, 1)", ("B", 4, 6), ("B", 6, 4))
    assert error.code == "E_CONSTRAINT" and "rank" in error.message


def test_contradicting_extents_are_a_constraint_error():
    assert _fails("permute(2, 1)", ("B", 4, 6), ("B", 4, 6)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("permute(2, 1)", ("B", 4, 6), ("B", 6, 4), input_dtype="int64").code == "E_DTYPE"
