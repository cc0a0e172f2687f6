"""hardtanh@1: declaration (min_val/max_val defaults), the min_val < max_val check (E_ARGUMENT),
numerics forward and backward against F.hardtanh on every rank, out of place, gradcheck and
gradgradcheck in float64, shape inference both ways, error codes, harness."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_basic.hardtanh import Hardtanh


def _away_from(x, kinks):
    """Move values off the points where the derivative jumps, so finite differences hold."""
    for kink in kinks:
        x = torch.where((x - kink).abs() < 0.05, x + 0.1, x)
    return x


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Hardtanh)
    assert spec.alias == "hardtanh" and spec.qualified == "hardtanh@1" and spec.version == 1
    assert spec.positional_args == ("min_val", "max_val")
    assert spec.args["min_val"].type is float and spec.args["min_val"].default == -1.0
    assert spec.args["max_val"].type is float and spec.args["max_val"].default == 1.0
    assert all(arg.help for arg in spec.args.values())
    assert spec.category == "activation" and str(spec.shape) == "x[B, ...] -> out[B, ...]"
    assert spec.validate is not None and spec.reference is not None
    assert "E_ARGUMENT" in spec.docstring
    assert issubclass(Hardtanh, torch.nn.Hardtanh)


def test_passes_the_harness():
    check_operator(Hardtanh, registry=Registry.from_packs("basic"))


@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
@pytest.mark.parametrize("source, low, high", [("hardtanh()", -1.0, 1.0), ("hardtanh(-2.5, 0.5)", -2.5, 0.5),
                                               ("hardtanh(max_val=3)", -1.0, 3.0)])
def test_numerics_forward_and_backward_out_of_place(shape, source, low, high):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    module = model.nodes.n_n0
    node = model.plan.nodes[0]
    assert (node.args["min_val"], node.args["max_val"]) == (low, high)
    assert (module.min_val, module.max_val) == (low, high) and module.inplace is False
    assert list(model.parameters()) == []
    x = _away_from(torch.randn(3, *shape[1:]) * 3, (low, high)).requires_grad_()
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved) and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, F.hardtanh(saved, low, high))
    torch.testing.assert_close(out, torch.clamp(saved, low, high))
    torch.testing.assert_close(out, spec_of(Hardtanh).reference(module)(saved))
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    torch.testing.assert_close(grad, torch.where((saved > low) & (saved < high), upstream, 0.0))
    torch_x = saved.clone().requires_grad_()
    (expected,) = torch.autograd.grad((F.hardtanh(torch_x, low, high) * upstream).sum(), torch_x)
    torch.testing.assert_close(grad, expected)


def test_defaults_and_provenance():
    node = hndl.resolve("hardtanh()", input_shape=("B", 4), output_shape=("B", 4)).nodes[0]
    assert node.args == {"min_val": -1.0, "max_val": 1.0}
    assert node.provenance["min_val"] == "default" and node.provenance["max_val"] == "default"
    node = hndl.resolve("hardtanh(-3, 2)", input_shape=("B", 4), output_shape=("B", 4)).nodes[0]
    assert node.args == {"min_val": -3.0, "max_val": 2.0} and isinstance(node.args["min_val"], float)
    assert node.provenance["min_val"] == "explicit"


def test_gradcheck_and_gradgradcheck_in_float64():
    model = network("hardtanh(-0.5, 2.0)", input_shape=("B", 3, 4), output_shape=("B", 3, 4), device="cpu")
    module = model.nodes.n_n0.double()
    x = _away_from(torch.randn(2, 3, 4, dtype=torch.float64) * 2, (-0.5, 2.0)).requires_grad_()
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_shape_infers_in_both_directions():
    backward = hndl.resolve("linear()\nhardtanh()", input_shape=("B", 16), output_shape=("B", 3))
    assert backward.nodes[0].args["out_features"] == 3
    forward = hndl.resolve("linear(5)\nhardtanh()\nlinear()", input_shape=("B", 4, 16), output_shape=("B", 4, 2))
    assert forward.nodes[1].output_shapes["out"] == ("B", 4, 5)


@pytest.mark.parametrize("source", ["hardtanh(1.0, -1.0)", "hardtanh(0.5, 0.5)", "hardtanh(min_val=2)",
                                    "hardtanh(max_val=-1)"])
def test_min_val_must_be_below_max_val(source):
    error = _fails(source, ("B", 4))
    assert error.code == "E_ARGUMENT" and "min_val < max_val" in error.message
    assert error.location.node == "n0" and error.remedies


@pytest.mark.parametrize("source", ['hardtanh("-1")', "hardtanh(True)", "hardtanh(-1.0, 1.0, 2.0)",
                                    "hardtanh(inplace=True)", "hardtanh(None)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4)).code == "E_ARGUMENT"


def test_shape_and_dtype_errors():
    assert _fails("hardtanh()", ("B", 4), ("B", 5)).code == "E_CONSTRAINT"
    assert _fails("hardtanh()", ("B", 4), input_dtype="int64").code == "E_DTYPE"
