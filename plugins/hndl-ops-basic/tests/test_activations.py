"""relu@1 and tanh@1: out-of-place elementwise numerics against torch, any supported rank."""

import pytest
import torch

import hndl
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_basic.relu import ReLU
from hndl_ops_basic.tanh import Tanh


@pytest.mark.parametrize("cls, alias, expected", [(ReLU, "relu", torch.relu), (Tanh, "tanh", torch.tanh)])
@pytest.mark.parametrize("shape", [("B", 6), ("B", 4, 6), ("B", 2, 3, 3)])
def test_elementwise_on_every_rank_and_out_of_place(cls, alias, expected, shape):
    model = network(f"{alias}()", input_shape=shape, output_shape=shape, device="cpu")
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    torch.testing.assert_close(out, expected(saved))
    torch.testing.assert_close(out, spec_of(cls).reference(model.nodes.n_n0)(saved))
    assert torch.equal(x.detach(), saved)  # the input is never modified
    out.sum().backward()
    assert x.grad is not None
    assert spec_of(cls).category == "activation"
    assert list(model.parameters()) == []


def test_activation_preserves_shape_in_both_directions():
    plan = hndl.resolve("linear()\ntanh()", input_shape=("B", 16), output_shape=("B", 3))
    assert plan.nodes[0].args["out_features"] == 3
    assert plan.nodes[1].input_shapes["x"] == ("B", 3)


def test_activation_takes_no_arguments():
    with pytest.raises(hndl.HNDLError) as error:
        hndl.resolve("relu(3)", input_shape=("B", 4), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"
