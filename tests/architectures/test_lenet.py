"""LeNet-5 built only from the operator catalog, against a handwritten torch.nn model from
identical state: the classic tanh/average-pooling network and the modern relu/max-pooling
variant on [B, 1, 32, 32], comparing forward values, input gradients, parameter gradients and
one optimizer step. The resolver infers the 16 * 5 * 5 = 400 flattened width and the last
layer's 10 classes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch import network

CLASSIC = """
conv(6, kernel_size=5, name="c1")
tanh(name="a1")
avg_pool(2, name="s2")
conv(16, kernel_size=5, name="c3")
tanh(name="a3")
avg_pool(2, name="s4")
flatten(name="flat")
linear(120, name="f5")
tanh(name="a5")
linear(84, name="f6")
tanh(name="a6")
linear(name="f7")
"""
MODERN = (CLASSIC.replace("tanh", "relu").replace("avg_pool", "max_pool"))
CONTRACT = {"input_shape": ("B", 1, 32, 32), "output_shape": ("B", 10)}
#: node ID -> index of the same layer in the handwritten Sequential
STATEFUL = {"c1": 0, "c3": 3, "f5": 7, "f6": 9, "f7": 11}


def handwritten(activation, pool):
    return nn.Sequential(
        nn.Conv2d(1, 6, 5), activation(), pool(2),
        nn.Conv2d(6, 16, 5), activation(), pool(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120), activation(),
        nn.Linear(120, 84), activation(),
        nn.Linear(84, 10),
    )


VARIANTS = {
    "classic": (CLASSIC, nn.Tanh, nn.AvgPool2d),
    "modern": (MODERN, nn.ReLU, nn.MaxPool2d),
}


def test_the_resolver_completes_lenet():
    plan = hndl.resolve(CLASSIC, **CONTRACT)
    nodes = {node.id: node for node in plan.nodes}
    assert [nodes[name].output_shapes["out"] for name in ("c1", "s2", "c3", "s4", "flat", "f5", "f6", "f7")] == [
        ("B", 6, 28, 28), ("B", 6, 14, 14), ("B", 16, 10, 10), ("B", 16, 5, 5), ("B", 400), ("B", 120),
        ("B", 84), ("B", 10),
    ]
    assert nodes["f5"].args["in_features"] == 400 and nodes["f5"].provenance["in_features"] == "inferred"
    assert nodes["f7"].args["out_features"] == 10 and nodes["f7"].provenance["out_features"] == "inferred"
    assert nodes["s2"].args["stride"] == (2, 2) and nodes["s2"].provenance["stride"] == "inferred"
    assert [node.alias for node in plan.nodes] == [
        "conv", "tanh", "avg_pool", "conv", "tanh", "avg_pool", "flatten", "linear", "tanh", "linear", "tanh",
        "linear",
    ]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_handwritten_lenet_from_identical_state(variant):
    source, activation, pool = VARIANTS[variant]
    torch.manual_seed(0)
    model = network(source, device="cpu", **CONTRACT)
    reference = handwritten(activation, pool)
    for node_id, index in STATEFUL.items():
        reference[index].load_state_dict(model[node_id].state_dict())
    # 61,706 parameters: the classic count with fully connected C3
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters()) == 61706
    built, hand = list(model.parameters()), list(reference.parameters())
    optimizers = (torch.optim.SGD(built, lr=0.1, momentum=0.9), torch.optim.SGD(hand, lr=0.1, momentum=0.9))
    for step in range(2):
        x = torch.randn(4, 1, 32, 32)
        x_built, x_hand = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out, expected = model(x_built), reference(x_hand)
        assert out.shape == (4, 10)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)  # the same kernels in the same order
        labels = torch.randint(0, 10, (4,))
        nn.functional.cross_entropy(out, labels).backward()
        nn.functional.cross_entropy(expected, labels).backward()
        torch.testing.assert_close(x_built.grad, x_hand.grad)
        for node_id, index in STATEFUL.items():
            for (name, ours), theirs in zip(model[node_id].named_parameters(), reference[index].parameters()):
                torch.testing.assert_close(ours.grad, theirs.grad, msg=f"{node_id}.{name} at step {step}")
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
        for ours, theirs in zip(built, hand):
            torch.testing.assert_close(ours, theirs)
