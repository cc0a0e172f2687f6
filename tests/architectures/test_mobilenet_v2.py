"""torchvision's MobileNetV2 (Sandler et al. 2018) written in HNDL configuration text from the
operator catalog -- the conv/batch_norm/relu6 stem, the seventeen inverted_residual blocks of the
(t, c, n, s) table, the 1x1 conv/batch_norm/relu6 to 1280 channels, adaptive_avg_pool, flatten,
dropout(0.2) and the classifier -- against ``torchvision.models.mobilenet_v2(weights=None)``
(width_mult 1.0, its real ReLU6, no download) from identical state, on [2, 3, 64, 64]. The
resolver infers every input channel count, every batch norm width, the classifier's 1280 inputs
and its 1000 classes (from the output contract).

Line count: the HNDL spec below (``MOBILENET_V2``) is 27 non-blank lines, one operator call
per line and no loops. torchvision's model definition -- ``class InvertedResidual`` and
``class MobileNetV2`` in torchvision/models/mobilenetv2.py (torchvision 0.29), each up to its
last line -- is 112 lines of code (39 + 73), counting physical lines that hold a code token and
are neither comment-only nor part of a docstring (154 physical lines including those); the
count leaves out the weights enum, the ``mobilenet_v2`` builder and the helpers it imports
(``Conv2dNormActivation`` from torchvision.ops.misc, ``_make_divisible`` from models._utils).
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

import hndl
from hndl.torch import network

MOBILENET_V2 = """
conv(32, kernel_size=3, stride=2, padding=1, bias=False, name="stem")
batch_norm(name="stem_bn")
relu6()
inverted_residual(16, 1, name="block1")
inverted_residual(24, 6, stride=2, name="block2")
inverted_residual(24, 6, name="block3")
inverted_residual(32, 6, stride=2, name="block4")
inverted_residual(32, 6, name="block5")
inverted_residual(32, 6, name="block6")
inverted_residual(64, 6, stride=2, name="block7")
inverted_residual(64, 6, name="block8")
inverted_residual(64, 6, name="block9")
inverted_residual(64, 6, name="block10")
inverted_residual(96, 6, name="block11")
inverted_residual(96, 6, name="block12")
inverted_residual(96, 6, name="block13")
inverted_residual(160, 6, stride=2, name="block14")
inverted_residual(160, 6, name="block15")
inverted_residual(160, 6, name="block16")
inverted_residual(320, 6, name="block17")
conv(1280, kernel_size=1, bias=False, name="last")
batch_norm(name="last_bn")
relu6()
adaptive_avg_pool(1, name="pool")
flatten()
dropout(0.2, name="drop")
linear(name="fc")
"""
CONTRACT = {"input_shape": ("B", 3, 64, 64), "output_shape": ("B", 1000)}

#: HNDL node ID -> the torchvision submodule holding the same state
STATE = {"stem": "features.0.0", "stem_bn": "features.0.1", **{f"block{i}": f"features.{i}" for i in range(1, 18)},
         "last": "features.18.0", "last_bn": "features.18.1", "fc": "classifier.1"}


def _reference() -> nn.Module:
    torch.manual_seed(0)
    reference = torchvision.models.mobilenet_v2(weights=None)  # width_mult=1.0, dropout=0.2, ReLU6
    with torch.no_grad():  # non-trivial normalization state, so evaluation mode is a real test
        for module in reference.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.2)
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 1.5)
            elif isinstance(module, nn.Linear):
                module.weight.normal_(0, 0.05)
                module.bias.normal_(0, 0.05)
    return reference


def _copied_model(reference: nn.Module) -> nn.Module:
    model = network(MOBILENET_V2, device="cpu", **CONTRACT)
    for node_id, path in STATE.items():
        model[node_id].load_state_dict(reference.get_submodule(path).state_dict())  # strict: names must agree
    return model


def test_the_resolver_completes_mobilenet_v2():
    plan = hndl.resolve(MOBILENET_V2, **CONTRACT)
    nodes = {node.id: node for node in plan.nodes}
    blocks = [node for node in plan.nodes if node.alias == "inverted_residual"]
    assert len(blocks) == 17 and all(node.op == "inverted_residual@2" for node in blocks)
    assert [node.args["in_channels"] for node in blocks] == [32, 16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96,
                                                              96, 160, 160, 160]
    assert all(node.provenance["in_channels"] == "inferred" for node in blocks)
    assert [node.output_shapes["out"][2] for node in blocks] == [32, 16, 16, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 2, 2,
                                                                 2, 2]
    assert nodes["stem_bn"].args["num_features"] == 32 and nodes["last_bn"].args["num_features"] == 1280
    assert nodes["last"].args["in_channels"] == 320
    assert nodes["fc"].args["in_features"] == 1280 and nodes["fc"].provenance["in_features"] == "inferred"
    assert nodes["fc"].args["out_features"] == 1000 and nodes["fc"].provenance["out_features"] == "inferred"
    assert nodes["pool"].output_shapes["out"] == ("B", 1280, 1, 1)


def test_the_module_tree_is_torchvisions():
    """The residual skips sit exactly where torchvision's use_res_connect puts them."""
    reference = _reference()
    model = network(MOBILENET_V2, device="cpu", **CONTRACT)
    for i in range(1, 18):
        ours, theirs = model[f"block{i}"], reference.features[i]
        assert list(ours.state_dict()) == list(theirs.state_dict()), f"block{i}"
        assert ours.residual == theirs.use_res_connect, f"block{i}"
    assert [i for i in range(1, 18) if model[f"block{i}"].residual] == [3, 5, 6, 8, 9, 10, 12, 13, 15, 16]


def test_matches_torchvision_mobilenet_v2_in_eval_mode():
    reference = _reference()
    model = _copied_model(reference)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters()) == 3_504_872
    assert sum(b.numel() for b in model.buffers()) == sum(b.numel() for b in reference.buffers())
    model.eval()
    reference.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64)
    snapshot = x.clone()
    with torch.no_grad():
        out, expected = model(x), reference(x)
    assert out.shape == (2, 1000)
    torch.testing.assert_close(out, expected)
    assert torch.equal(x, snapshot)  # every operator is out of place
    assert out.std() > 0.1  # the logits are not a degenerate constant


def test_matches_torchvision_mobilenet_v2_in_training_mode():
    """Batch statistics and dropout: one forward from the same RNG state, then the running stats."""
    reference = _reference()
    model = _copied_model(reference)
    model.train()
    reference.train()
    x = torch.randn(4, 3, 64, 64)
    torch.manual_seed(2)
    out = model(x)
    torch.manual_seed(2)
    expected = reference(x)
    torch.testing.assert_close(out, expected)
    for node_id, path in STATE.items():
        theirs = reference.get_submodule(path).state_dict()
        for name, value in model[node_id].state_dict().items():
            torch.testing.assert_close(value, theirs[name], msg=f"{node_id}.{name}")
