"""upsample2d@1 (alias upsample): an exact integer scale on both spatial axes in both
directions (a known output fixes the input, a non-multiple is a contradiction), numerics
against nn.Upsample and the handwritten pixel repetition (forward and input gradient as block
sums), gradcheck/gradgradcheck in float64, and every error code."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.upsample import Upsample


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Upsample)
    assert spec.alias == "upsample" and spec.qualified == "upsample2d@1"
    assert spec.category == "resampling"
    assert spec.positional_args == ("scale_factor",)
    assert spec.args["scale_factor"].required and spec.args["scale_factor"].type is int
    assert spec.args["mode"].default == "nearest" and spec.args["mode"].choices == ("nearest",)
    assert spec.relation is not None and spec.reference is not None
    assert all(arg.help for arg in spec.args.values())


@pytest.mark.parametrize("factor, size", [(1, (4, 5)), (2, (4, 4)), (3, (2, 5)), (4, (3, 1))])
def test_the_output_is_the_scaled_input(factor, size):
    expected = (factor * size[0], factor * size[1])
    plan = hndl.resolve(f"upsample({factor})", input_shape=("B", 3, *size), output_shape=("B", 3, *expected))
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 3, *expected)
    assert node.args == {"scale_factor": factor, "mode": "nearest"}
    assert node.provenance["mode"] == "default"


def test_a_known_output_fixes_the_input():
    plan = hndl.resolve("linear()\nreshape(16)\nupsample(2)\nconv(3, kernel_size=3, padding=1)", input_shape=("B", 8),
                        output_shape=("B", 3, 16, 16))
    assert plan.nodes[1].output_shapes["out"] == ("B", 16, 8, 8)
    assert plan.nodes[0].args["out_features"] == 16 * 8 * 8
    plan = hndl.resolve("linear()\nreshape(2)\nupsample(3)", input_shape=("B", 4), output_shape=("B", 2, 12, 6))
    assert plan.nodes[1].output_shapes["out"] == ("B", 2, 4, 2)


def test_stages_compose_exactly():
    plan = hndl.resolve("linear()\nreshape(8)\nupsample(2)\nupsample(3)", input_shape=("B", 4),
                        output_shape=("B", 8, 12, 18))
    assert plan.nodes[1].output_shapes["out"] == ("B", 8, 2, 3)


@pytest.mark.parametrize("output", [("B", 2, 9, 8), ("B", 2, 8, 7)])
def test_an_output_that_is_not_a_multiple_is_a_constraint_error(output):
    assert _fails("linear()\nreshape(2)\nupsample(2)", ("B", 4), output).code == "E_CONSTRAINT"


def test_a_wrong_output_extent_is_a_constraint_error():
    assert _fails("upsample(2)", ("B", 2, 4, 4), ("B", 2, 8, 12)).code == "E_CONSTRAINT"
    assert _fails("upsample(2)", ("B", 2, 4, 4), ("B", 3, 8, 8)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("factor, size", [(1, (3, 4)), (2, (5, 3)), (3, (4, 7)), (5, (3, 2)), (7, (2, 3))])
def test_numerics_against_nn_upsample_and_the_pixel_repetition(factor, size):
    model = network(f"upsample({factor})", input_shape=("B", 3, *size),
                    output_shape=("B", 3, factor * size[0], factor * size[1]), device="cpu")
    layer = model.nodes.n_n0
    assert type(layer) is nn.Upsample and layer.scale_factor == float(factor)  # torch's own layer
    reference = nn.Upsample(scale_factor=factor, mode="nearest")
    x = torch.randn(2, 3, *size, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    repeated = x.detach()[:, :, :, None, :, None].expand(2, 3, size[0], factor, size[1], factor)
    torch.testing.assert_close(out, repeated.reshape(2, 3, factor * size[0], factor * size[1]), rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(Upsample).reference(layer)(x), rtol=0, atol=0)
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    block_sums = upstream.reshape(2, 3, size[0], factor, size[1], factor).sum(dim=(3, 5))
    torch.testing.assert_close(x.grad, block_sums)
    model.eval()
    torch.testing.assert_close(model(x), out)
    assert list(layer.parameters()) == [] and list(layer.buffers()) == []


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("upsample(3)", input_shape=("B", 2, 2, 3), output_shape=("B", 2, 6, 9), device="cpu")
    layer = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


@pytest.mark.parametrize(
    "args",
    ["", "0", "-2", "1.5", "2.0", "True", "(2, 2)", '2, mode="bilinear"', '2, mode="nearest-exact"',
     "2, align_corners=False"],
)
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"upsample({args})", ("B", 2, 4, 4), ("B", 2, 8, 8)).code == "E_ARGUMENT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 2, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("upsample(2)", shape, shape).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("upsample(2)", ("B", 2, 4, 4), ("B", 2, 8, 8), input_dtype="int64").code == "E_DTYPE"
