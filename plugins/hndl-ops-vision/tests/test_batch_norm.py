"""batch_norm2d@1 (alias batch_norm): num_features inferred in both directions, numerics
against nn.BatchNorm2d in training and evaluation mode (forward, input and parameter
gradients, running statistics), the declared reference, finiteness for constant inputs,
gradcheck/gradgradcheck in float64, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_vision.batch_norm import BatchNorm


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _built(source="batch_norm()", shape=(4, 5, 6)):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu")
    return model, model.nodes.n_n0


def test_declaration():
    spec = spec_of(BatchNorm)
    assert spec.alias == "batch_norm" and spec.qualified == "batch_norm2d@1"
    assert spec.category == "normalization"
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H, W]"
    assert spec.args["eps"].default == 1e-5 and spec.args["eps"].exclusive_min
    assert spec.args["momentum"].default == 0.1
    assert spec.args["affine"].default is True
    assert spec.args["num_features"].inferable and spec.args["num_features"].dim == "C"
    assert spec.positional_args == ()
    assert spec.reference is not None and spec.docstring
    assert all(arg.help for arg in spec.args.values())


def test_num_features_inferred_forward_from_the_producer():
    plan = hndl.resolve("conv(8, kernel_size=3, padding=1)\nbatch_norm()", input_shape=("B", 3, 6, 6),
                        output_shape=("B", 8, 6, 6))
    node = plan.nodes[1]
    assert node.args == {"eps": 1e-5, "momentum": 0.1, "affine": True, "num_features": 8}
    assert node.provenance["num_features"] == "inferred" and node.provenance["eps"] == "default"


def test_channels_inferred_backward_through_the_normalization():
    plan = hndl.resolve("conv(kernel_size=1)\nbatch_norm()", input_shape=("B", 3, 4, 4), output_shape=("B", 5, 4, 4))
    assert plan.nodes[0].args["out_channels"] == 5
    assert plan.nodes[1].args["num_features"] == 5


@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-3, "momentum": 0.3}, {"affine": False}])
def test_numerics_against_nn_batchnorm2d_in_training_mode(kwargs):
    source = "batch_norm(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
    model, layer = _built(source)
    reference = nn.BatchNorm2d(4, **kwargs)
    if layer.affine:
        with torch.no_grad():
            layer.weight.normal_()
            layer.bias.normal_()
    reference.load_state_dict(layer.state_dict())
    for step in range(2):
        x = (torch.randn(3, 4, 5, 6) * 3 + 1).requires_grad_(True)
        x_ref = x.detach().clone().requires_grad_(True)
        out, expected = model(x), reference(x_ref)
        torch.testing.assert_close(out, expected)
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        if layer.affine:
            torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
            torch.testing.assert_close(layer.bias.grad, reference.bias.grad)
        else:
            assert layer.weight is None and layer.bias is None
        torch.testing.assert_close(layer.running_mean, reference.running_mean)
        torch.testing.assert_close(layer.running_var, reference.running_var)
        assert layer.num_batches_tracked.item() == reference.num_batches_tracked.item() == step + 1
    # evaluation mode uses the running statistics on both sides
    model.eval()
    reference.eval()
    x = torch.randn(1, 4, 5, 6)
    torch.testing.assert_close(model(x), reference(x))
    assert not torch.allclose(model(x), F.batch_norm(x, None, None, training=True))


def test_the_running_statistics_follow_the_momentum_formula():
    model, layer = _built("batch_norm(momentum=0.25)")
    x = torch.randn(4, 4, 5, 6)
    model(x)
    mean = x.mean(dim=(0, 2, 3))
    variance = x.var(dim=(0, 2, 3), unbiased=True)
    torch.testing.assert_close(layer.running_mean, 0.25 * mean)
    torch.testing.assert_close(layer.running_var, 0.75 + 0.25 * variance)


def test_training_mode_normalizes_with_the_population_variance():
    model, layer = _built("batch_norm(eps=1e-12)", shape=(1, 2, 2))
    x = torch.tensor([[1.0, 3.0], [1.0, 3.0]]).reshape(1, 1, 2, 2).repeat(2, 1, 1, 1)
    torch.testing.assert_close(model(x), torch.tensor([[-1.0, 1.0], [-1.0, 1.0]]).expand(2, 1, 2, 2))


def test_the_reference_matches_and_leaves_the_running_statistics_alone():
    model, layer = _built()
    reference = spec_of(BatchNorm).reference(layer)
    x = torch.randn(2, 4, 5, 6)
    before = layer.running_mean.clone(), layer.running_var.clone()
    expected = reference(x)
    assert torch.equal(layer.running_mean, before[0]) and torch.equal(layer.running_var, before[1])
    torch.testing.assert_close(model(x), expected)
    layer.eval()
    torch.testing.assert_close(layer(x), reference(x))


def test_state_is_that_of_nn_batchnorm2d():
    _, layer = _built()
    assert list(layer.state_dict()) == list(nn.BatchNorm2d(4).state_dict())
    layer.load_state_dict(nn.BatchNorm2d(4).state_dict())


def test_the_node_is_nn_batchnorm2d_and_momentum_none_is_the_cumulative_average():
    model, layer = _built()
    assert type(layer) is nn.BatchNorm2d  # type-keyed tools (fusion, update_bn, opacus) see torch's layer
    reference = nn.BatchNorm2d(4, momentum=None)
    layer.momentum = None  # what torch.optim.swa_utils.update_bn sets
    for seed in range(3):
        x = torch.randn(3, 4, 5, 6, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
        torch.testing.assert_close(model(x), reference(x))
    torch.testing.assert_close(layer.running_var, reference.running_var)
    torch.testing.assert_close(layer.running_mean, reference.running_mean)


@pytest.mark.parametrize("affine", ["True", "False"])
def test_constant_input_is_finite_forward_and_backward(affine):
    model, layer = _built(f"batch_norm(affine={affine})")
    x = torch.full((3, 4, 5, 6), 7.0, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out).all()
    if layer.affine:
        # the normalized values are zero up to the rounding of the mean (~1e-7 / sqrt(eps))
        torch.testing.assert_close(out, layer.bias[None, :, None, None].expand_as(out).detach(), rtol=0, atol=1e-4)
    out.mul(torch.randn_like(out)).sum().backward()
    assert torch.isfinite(x.grad).all()
    if layer.affine:
        assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(layer.bias.grad).all()
    assert torch.isfinite(layer.running_var).all()


def test_gradcheck_and_gradgradcheck_in_float64():
    model, layer = _built(shape=(3, 2, 3))
    layer = layer.double()
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    x = torch.randn(2, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))
    params = (layer.weight, layer.bias)
    assert torch.autograd.gradcheck(
        lambda w, b: F.batch_norm(x.detach(), None, None, w, b, training=True, eps=layer.eps), params)
    layer.eval()
    assert torch.autograd.gradcheck(layer, (x,))


@pytest.mark.parametrize("args", ["eps=0", "eps=-1e-5", "momentum=-0.1", "momentum=1.5", "affine=1",
                                  "num_features=0", "momentum=True", "0.1"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"batch_norm({args})", ("B", 4, 3, 3), ("B", 4, 3, 3)).code == "E_ARGUMENT"


def test_num_features_contradicting_the_input_is_a_constraint_error():
    assert _fails("batch_norm(num_features=3)", ("B", 4, 3, 3), ("B", 4, 3, 3)).code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 4, 8)])
def test_non_image_ranks_are_constraint_errors(shape):
    assert _fails("batch_norm()", shape, shape).code == "E_CONSTRAINT"


def test_shape_changes_are_constraint_errors():
    assert _fails("batch_norm()", ("B", 4, 3, 3), ("B", 4, 3, 2)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("batch_norm()", ("B", 4, 3, 3), ("B", 4, 3, 3), input_dtype="int64").code == "E_DTYPE"


def test_one_value_per_channel_in_training_mode_is_a_runtime_error():
    model, layer = _built(shape=(4, 1, 1))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 4, 1, 1))
    assert error.value.code == "E_RUNTIME"
    assert layer.num_batches_tracked.item() == 0
    assert model(torch.randn(2, 4, 1, 1)).shape == (2, 4, 1, 1)
    model.eval()
    assert model(torch.randn(1, 4, 1, 1)).shape == (1, 4, 1, 1)
