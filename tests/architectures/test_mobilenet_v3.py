"""torchvision's MobileNetV3-Small (Howard et al. 2019) written in HNDL configuration text --
the conv/batch_norm/hardswish stem, the eleven inverted_residual blocks of its bneck table
(explicit hidden widths, ReLU or hard-swish, squeeze-and-excitation squeezing the hidden width
to a multiple of 8 with a hard-sigmoid gate, batch norms with eps 1e-3 and momentum 0.01, and
torchvision's MobileNetV3 state names), the 1x1 conv/batch_norm/hardswish, adaptive_avg_pool,
flatten, linear/hardswish/dropout(0.2)/linear classifier -- against
``torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.5, num_classes=10)`` built
from its constructor (no download), from identical state, on [2, 3, 64, 64].

Every torchvision state-dictionary key has exactly one HNDL counterpart (node ID + the block's
own key), in the same order within each block, so copying is a strict ``load_state_dict`` per
node; parameter and buffer counts are equal; eval logits and one training forward (batch
statistics, dropout from the same RNG state) and the moved running statistics agree.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

import hndl
from hndl.torch import network

#: Every MobileNetV3 block: eps 1e-3 / momentum 0.01 and torchvision's MobileNetV3 state names.
V3 = 'norm_eps=0.001, norm_momentum=0.01, layout="mobilenet_v3"'
#: Its squeeze-and-excitation: make_divisible(hidden // 4, 8) channels, a hard-sigmoid gate.
SE = 'se_ratio=0.25, se_from="hidden", se_divisor=8, se_gate="hardsigmoid"'
HS, RE = 'activation="hardswish"', 'activation="relu"'

# mobilenet_v3_small's bneck table at width_mult 0.5: every width is make_divisible(c * 0.5, 8).
MOBILENET_V3_SMALL = f"""
conv(8, kernel_size=3, stride=2, padding=1, bias=False, name="stem")
batch_norm(eps=0.001, momentum=0.01, name="stem_bn")
hardswish()
inverted_residual(8, hidden_channels=8, stride=2, {RE}, {SE}, {V3}, name="block1")
inverted_residual(16, hidden_channels=40, stride=2, {RE}, {V3}, name="block2")
inverted_residual(16, hidden_channels=48, {RE}, {V3}, name="block3")
inverted_residual(24, hidden_channels=48, kernel_size=5, stride=2, {HS}, {SE}, {V3}, name="block4")
inverted_residual(24, hidden_channels=120, kernel_size=5, {HS}, {SE}, {V3}, name="block5")
inverted_residual(24, hidden_channels=120, kernel_size=5, {HS}, {SE}, {V3}, name="block6")
inverted_residual(24, hidden_channels=64, kernel_size=5, {HS}, {SE}, {V3}, name="block7")
inverted_residual(24, hidden_channels=72, kernel_size=5, {HS}, {SE}, {V3}, name="block8")
inverted_residual(48, hidden_channels=144, kernel_size=5, stride=2, {HS}, {SE}, {V3}, name="block9")
inverted_residual(48, hidden_channels=288, kernel_size=5, {HS}, {SE}, {V3}, name="block10")
inverted_residual(48, hidden_channels=288, kernel_size=5, {HS}, {SE}, {V3}, name="block11")
conv(288, kernel_size=1, bias=False, name="last")
batch_norm(eps=0.001, momentum=0.01, name="last_bn")
hardswish()
adaptive_avg_pool(1, name="pool")
flatten()
linear(512, name="fc1")
hardswish()
dropout(0.2, name="drop")
linear(name="fc2")
"""
CONTRACT = {"input_shape": ("B", 3, 64, 64), "output_shape": ("B", 10)}

#: HNDL node ID -> the torchvision submodule holding the same state
STATE = {"stem": "features.0.0", "stem_bn": "features.0.1", **{f"block{i}": f"features.{i}" for i in range(1, 12)},
         "last": "features.12.0", "last_bn": "features.12.1", "fc1": "classifier.0", "fc2": "classifier.3"}


def _reference() -> nn.Module:
    torch.manual_seed(0)
    reference = torchvision.models.mobilenet_v3_small(weights=None, width_mult=0.5, num_classes=10)
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


def _key_map(model: nn.Module) -> dict[str, str]:
    """Our state key -> torchvision's, through STATE."""
    keys = {}
    for key in model.state_dict():
        node, _, rest = key.removeprefix("nodes.n_").partition(".")
        keys[key] = f"{STATE[node]}.{rest}"
    return keys


def _copied_model(reference: nn.Module) -> nn.Module:
    model = network(MOBILENET_V3_SMALL, device="cpu", **CONTRACT)
    for node_id, path in STATE.items():
        model[node_id].load_state_dict(reference.get_submodule(path).state_dict())  # strict: names must agree
    return model


def test_the_resolver_completes_mobilenet_v3_small():
    plan = hndl.resolve(MOBILENET_V3_SMALL, **CONTRACT)
    nodes = {node.id: node for node in plan.nodes}
    blocks = [node for node in plan.nodes if node.alias == "inverted_residual"]
    assert len(blocks) == 11 and all(node.op == "inverted_residual@2" for node in blocks)
    assert [node.args["in_channels"] for node in blocks] == [8, 8, 16, 16, 24, 24, 24, 24, 24, 48, 48]
    assert all(node.provenance["in_channels"] == "inferred" for node in blocks)
    assert [node.output_shapes["out"][2] for node in blocks] == [16, 8, 8, 4, 4, 4, 4, 4, 2, 2, 2]
    assert nodes["last"].args["in_channels"] == 48 and nodes["fc1"].args["in_features"] == 288
    assert nodes["fc2"].args["in_features"] == 512 and nodes["fc2"].provenance["out_features"] == "inferred"


def test_the_module_tree_is_torchvisions():
    """Keys one to one, in torchvision's order inside each block; skips, expansions and squeeze
    widths where torchvision puts them; every batch norm with eps 1e-3 and momentum 0.01."""
    reference = _reference()
    model = network(MOBILENET_V3_SMALL, device="cpu", **CONTRACT)
    keys = _key_map(model)
    assert len(set(keys.values())) == len(keys) and set(keys.values()) == set(reference.state_dict())
    for i in range(1, 12):
        ours, theirs = model[f"block{i}"], reference.features[i]
        assert list(ours.state_dict()) == list(theirs.state_dict()), f"block{i}"
        assert ours.residual == theirs.use_res_connect, f"block{i}"
        if ours.se is not None:
            assert ours.se.fc1.out_channels == theirs.block[-2].fc1.out_channels, f"block{i}"
    assert [i for i in range(1, 12) if model[f"block{i}"].residual] == [3, 5, 6, 7, 8, 10, 11]
    assert [i for i in range(1, 12) if model[f"block{i}"].se is None] == [2, 3]
    assert not model["block1"].expand and model["block1"].se.fc1.out_channels == 8
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == sum(isinstance(m, nn.BatchNorm2d) for m in reference.modules())
    assert all(m.eps == 0.001 and m.momentum == 0.01 for m in norms)


def test_matches_torchvision_mobilenet_v3_small_in_eval_mode():
    reference = _reference()
    model = _copied_model(reference)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters()) == 409_394
    assert sum(b.numel() for b in model.buffers()) == sum(b.numel() for b in reference.buffers()) == 6_178
    assert len(list(model.buffers())) == len(list(reference.buffers()))
    model.eval()
    reference.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64)
    snapshot = x.clone()
    with torch.no_grad():
        out, expected = model(x), reference(x)
    assert out.shape == (2, 10)
    torch.testing.assert_close(out, expected)
    assert torch.equal(x, snapshot)  # every operator is out of place
    assert out.std() > 0.01  # the logits are not a degenerate constant


def test_matches_torchvision_mobilenet_v3_small_in_training_mode():
    """Batch statistics (momentum 0.01) and dropout: one forward from the same RNG state, then the
    running statistics."""
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
    theirs = reference.state_dict()
    for ours, name in _key_map(model).items():
        torch.testing.assert_close(model.state_dict()[ours], theirs[name], msg=ours)
