"""The §7 conditional-GAN discriminator, in both frontends: named inputs and outputs."""

import pytest
import torch

from hndl import HNDLError, ops
from hndl.torch import network, network_from_callable

SOURCE = """
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""
CONTRACT = {
    "input_shape": {"x": ("B", 1, 28, 28), "y": ("B", 10)},
    "output_shape": {"logits": ("B", 1), "features": ("B", 12544)},
}


def discriminator(*, x, y):
    label = ops.reshape(ops.linear(y, 784, name="label_projection"), 1, 28, 28, name="label_plane")
    ops.concat(x, label, name="conditioned")
    ops.conv(64, policy="down2", name="stage1")
    ops.leaky_relu(0.2)
    features = ops.flatten(name="features")
    return {"logits": ops.linear(1, name="logits"), "features": features}


@pytest.fixture(params=["configuration", "callable"])
def model(request):
    torch.manual_seed(0)
    if request.param == "configuration":
        return network(SOURCE, device="cpu", **CONTRACT)
    return network_from_callable(discriminator, device="cpu", **CONTRACT)


def test_the_header_names_every_port(model):
    header = str(model).splitlines()[0]
    assert header == "Network: x=[B, 1, 28, 28], y=[B, 10] -> logits=[B, 1], features=[B, 12544] dtype=float32"


def test_inputs_bind_by_position_and_keyword_and_outputs_come_back_by_name(model):
    image, label = torch.randn(3, 1, 28, 28), torch.randn(3, 10)
    by_position = model(image, label)
    by_keyword = model(y=label, x=image)
    mixed = model(image, y=label)
    assert list(by_position) == ["logits", "features"]
    assert by_position["logits"].shape == (3, 1) and by_position["features"].shape == (3, 12544)
    for other in (by_keyword, mixed):
        torch.testing.assert_close(other["logits"], by_position["logits"])


def test_both_outputs_differentiate_to_both_inputs(model):
    image = torch.randn(2, 1, 28, 28, requires_grad=True)
    label = torch.randn(2, 10, requires_grad=True)
    scores = model(image, label)
    (scores["logits"].sum() + scores["features"].square().mean()).backward()
    assert image.grad.abs().sum() > 0 and label.grad.abs().sum() > 0


def test_the_resolved_nodes_match_the_spec():
    plan = network(SOURCE, device="cpu", **CONTRACT).plan
    shapes = {node.id: node.output_shapes for node in plan.nodes}
    assert shapes["label_projection"]["out"] == ("B", 784)
    assert shapes["label_plane"]["out"] == ("B", 1, 28, 28)
    assert shapes["conditioned"]["out"] == ("B", 2, 28, 28)
    assert shapes["stage1"]["out"] == ("B", 64, 14, 14)
    assert shapes["features"]["out"] == ("B", 12544)
    assert [port["name"] for port in plan.outputs] == ["logits", "features"]
    assert plan.outputs[1]["ref"] == "node:features/out"


def test_a_missing_or_undeclared_runtime_input_fails_before_any_node_runs(model):
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 1, 28, 28))
    assert error.value.code == "E_BINDING"
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 1, 28, 28), torch.randn(2, 10), z=torch.randn(2, 1))
    assert error.value.code == "E_BINDING"


def test_a_second_input_with_another_batch_fails(model):
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 1, 28, 28), torch.randn(3, 10))
    assert error.value.code == "E_RUNTIME"
