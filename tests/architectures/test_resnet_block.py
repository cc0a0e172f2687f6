"""A ResNet basic block two ways, both against a handwritten torchvision-style BasicBlock from
identical state: (a) authored as a graph from catalog operators with explicit named tensors
(conv, batch_norm, relu, conv, batch_norm, a projection conv + batch_norm branch, add, relu),
and (b) as the one-node residual_block operator. Forward values, input gradients, parameter
gradients and running statistics are compared in training mode, then outputs in evaluation
mode; a small ResNet (stem, two blocks, global pooling, classifier) closes the loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch import network

PROJECTED_GRAPH = """
h = conv(x, 16, kernel_size=3, stride=2, padding=1, bias=False, name="conv1")
h = batch_norm(h, name="bn1")
h = relu(h, name="relu1")
h = conv(h, kernel_size=3, padding=1, bias=False, name="conv2")
h = batch_norm(h, name="bn2")
skip = conv(x, kernel_size=1, stride=2, bias=False, name="proj")
skip = batch_norm(skip, name="proj_bn")
total = add(h, skip, name="join")
out = relu(total, name="relu2")
"""
IDENTITY_GRAPH = """
h = conv(x, 8, kernel_size=3, padding=1, bias=False, name="conv1")
h = batch_norm(h, name="bn1")
h = relu(h, name="relu1")
h = conv(h, kernel_size=3, padding=1, bias=False, name="conv2")
h = batch_norm(h, name="bn2")
total = add(h, x, name="join")
out = relu(total, name="relu2")
"""
#: graph node ID -> the handwritten block's submodule holding the same state
GRAPH_STATE = {"conv1": "conv1", "bn1": "bn1", "conv2": "conv2", "bn2": "bn2", "proj": "downsample.0",
               "proj_bn": "downsample.1"}

CASES = {
    # name: (graph, operator source, in channels, out channels, stride, input size)
    "projected": (PROJECTED_GRAPH, "residual_block(16, stride=2)", 8, 16, 2, (8, 7)),
    "identity": (IDENTITY_GRAPH, "residual_block()", 8, 8, 1, (6, 6)),
}


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock, written out by hand."""

    expansion = 1

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(planes),
            )
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


def _contract(c_in, c_out, stride, size):
    out_size = tuple((extent - 1) // stride + 1 for extent in size)
    return {"input_shape": ("B", c_in, *size), "output_shape": ("B", c_out, *out_size)}


def _randomize_norms(module):
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                sub.weight.uniform_(0.5, 1.5)
                sub.bias.normal_(0, 0.2)


def _compare(model, reference, pairs, c_in, size):
    """Two training steps then evaluation; ``pairs`` lists (built module, handwritten module)."""
    for step in range(2):
        x = torch.randn(3, c_in, *size)
        x_built, x_hand = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out, expected = model(x_built), reference(x_hand)
        torch.testing.assert_close(out, expected)
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x_built.grad, x_hand.grad)
        for ours, theirs in pairs:
            for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
                torch.testing.assert_close(a.grad, b.grad, msg=f"{name} at step {step}")
            for (name, a), b in zip(ours.named_buffers(), theirs.buffers()):
                torch.testing.assert_close(a, b, msg=f"{name} at step {step}")
    model.eval()
    reference.eval()
    x = torch.randn(2, c_in, *size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


def test_the_graph_resolves_its_omitted_channels():
    plan = hndl.resolve(PROJECTED_GRAPH, **_contract(8, 16, 2, (8, 7)))
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["conv2"].args["out_channels"] == 16 and nodes["conv2"].provenance["out_channels"] == "inferred"
    assert nodes["proj"].args["out_channels"] == 16 and nodes["proj"].provenance["out_channels"] == "inferred"
    assert nodes["conv1"].output_shapes["out"] == nodes["proj"].output_shapes["out"] == ("B", 16, 4, 4)
    assert dict(nodes["join"].inputs) == {"x": "node:bn2/out", "y": "node:proj_bn/out"}
    assert dict(nodes["proj"].inputs) == {"x": "input:x"}
    plan = hndl.resolve(IDENTITY_GRAPH, **_contract(8, 8, 1, (6, 6)))
    assert {node.id: node.args.get("out_channels") for node in plan.nodes if node.alias == "conv"} == {
        "conv1": 8, "conv2": 8}


@pytest.mark.parametrize("case", list(CASES))
def test_the_graph_matches_the_handwritten_block(case):
    graph, _, c_in, c_out, stride, size = CASES[case]
    torch.manual_seed(0)
    model = network(graph, device="cpu", **_contract(c_in, c_out, stride, size))
    reference = BasicBlock(c_in, c_out, stride)
    pairs = []
    for node_id, path in GRAPH_STATE.items():
        if node_id not in model:
            continue
        target = reference.get_submodule(path)
        _randomize_norms(model[node_id])
        target.load_state_dict(model[node_id].state_dict())
        pairs.append((model[node_id], target))
    assert (reference.downsample is not None) == ("proj" in model)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    _compare(model, reference, pairs, c_in, size)


@pytest.mark.parametrize("case", list(CASES))
def test_the_operator_matches_the_handwritten_block(case):
    _, source, c_in, c_out, stride, size = CASES[case]
    torch.manual_seed(0)
    model = network(source, device="cpu", **_contract(c_in, c_out, stride, size))
    block = model.nodes.n_n0
    _randomize_norms(block)
    reference = BasicBlock(c_in, c_out, stride)
    reference.load_state_dict(block.state_dict())  # same submodule names as torchvision
    _compare(model, reference, [(block, reference)], c_in, size)


@pytest.mark.parametrize("case", list(CASES))
def test_the_graph_and_the_operator_agree(case):
    graph, source, c_in, c_out, stride, size = CASES[case]
    contract = _contract(c_in, c_out, stride, size)
    graph_model = network(graph, device="cpu", **contract)
    operator_model = network(source, device="cpu", **contract)
    block = operator_model.nodes.n_n0
    for node_id, path in GRAPH_STATE.items():
        if node_id in graph_model:
            block.get_submodule(path).load_state_dict(graph_model[node_id].state_dict())
    x = torch.randn(2, c_in, *size)
    torch.testing.assert_close(graph_model(x), operator_model(x))


SMALL_RESNET = """
conv(8, kernel_size=3, padding=1, bias=False, name="stem")
batch_norm(name="stem_bn")
relu()
residual_block(8, name="layer1")
residual_block(16, stride=2, name="layer2")
adaptive_avg_pool(1, name="pool")
flatten()
linear(name="fc")
"""


def test_a_small_resnet_matches_its_handwritten_twin():
    contract = {"input_shape": ("B", 3, 12, 12), "output_shape": ("B", 10)}
    plan = hndl.resolve(SMALL_RESNET, **contract)
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["layer2"].output_shapes["out"] == ("B", 16, 6, 6)
    assert nodes["fc"].args["in_features"] == 16 and nodes["fc"].args["out_features"] == 10
    torch.manual_seed(0)
    model = network(SMALL_RESNET, device="cpu", **contract)
    reference = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        BasicBlock(8, 8), BasicBlock(8, 16, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )
    mapping = {"stem": 0, "stem_bn": 1, "layer1": 3, "layer2": 4, "fc": 7}
    for node_id, index in mapping.items():
        reference[index].load_state_dict(model[node_id].state_dict())
    pairs = [(model[node_id], reference[index]) for node_id, index in mapping.items()]
    _compare(model, reference, pairs, 3, (12, 12))
