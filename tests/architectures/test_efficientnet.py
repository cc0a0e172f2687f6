"""torchvision's EfficientNet-B0 (Tan & Le 2019) written in HNDL configuration text -- the
conv/batch_norm/swish stem, the sixteen MBConv blocks as inverted_residual@2 (SiLU,
squeeze-and-excitation squeezing the block's *input* channels by 4 with SiLU inside, the hidden
width rounded to a multiple of 8, torchvision's MBConv state names, and each block's own
stochastic-depth rate 0.2 * j / 16), the 1x1 conv/batch_norm/swish to 1280 channels,
adaptive_avg_pool, flatten, dropout(0.2) and the classifier -- against
``torchvision.models.efficientnet_b0(weights=None, num_classes=10)`` (no download), from identical
state, on [2, 3, 64, 64].

Every torchvision state key has exactly one HNDL counterpart, parameter and buffer counts are
equal, eval logits agree, and a training forward agrees from the same RNG state: the
stochastic-depth draws of the residual blocks and the classifier's dropout are drawn in the same
order, with the same shapes, as torchvision draws them.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

import hndl
from hndl.torch import network

#: (expand_ratio, kernel, stride, out_channels, layers) per stage: torchvision's efficientnet_b0 table.
STAGES = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
MBCONV = 'activation="silu", se_ratio=0.25, se_activation="silu", hidden_divisor=8, layout="mobilenet_v3"'


def _blocks() -> tuple[str, dict[str, str]]:
    """The sixteen block lines (written out below) and node ID -> torchvision path."""
    lines, paths, index = [], {}, 0
    for stage, (ratio, kernel, stride, channels, layers) in enumerate(STAGES, start=1):
        for layer in range(layers):
            name = f"s{stage}b{layer}"
            lines.append(f"inverted_residual({channels}, {ratio}, kernel_size={kernel}, "
                         f"stride={stride if layer == 0 else 1}, stochastic_depth_prob={0.2 * index / 16}, "
                         f"{MBCONV}, name=\"{name}\")")
            paths[name] = f"features.{stage}.{layer}"
            index += 1
    return "\n".join(lines), paths


EFFICIENTNET_B0 = """
conv(32, kernel_size=3, stride=2, padding=1, bias=False, name="stem")
batch_norm(name="stem_bn")
swish()
{blocks}
conv(1280, kernel_size=1, bias=False, name="last")
batch_norm(name="last_bn")
swish()
adaptive_avg_pool(1, name="pool")
flatten()
dropout(0.2, name="drop")
linear(name="fc")
""".format(blocks=_blocks()[0])
CONTRACT = {"input_shape": ("B", 3, 64, 64), "output_shape": ("B", 10)}

#: HNDL node ID -> the torchvision submodule holding the same state
STATE = {"stem": "features.0.0", "stem_bn": "features.0.1", **_blocks()[1], "last": "features.8.0",
         "last_bn": "features.8.1", "fc": "classifier.1"}


def _reference() -> nn.Module:
    torch.manual_seed(0)
    reference = torchvision.models.efficientnet_b0(weights=None, num_classes=10)  # stochastic_depth_prob 0.2
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
    model = network(EFFICIENTNET_B0, device="cpu", **CONTRACT)
    for node_id, path in STATE.items():
        model[node_id].load_state_dict(reference.get_submodule(path).state_dict())  # strict: names must agree
    return model


def test_the_resolver_completes_efficientnet_b0():
    plan = hndl.resolve(EFFICIENTNET_B0, **CONTRACT)
    blocks = [node for node in plan.nodes if node.alias == "inverted_residual"]
    assert len(blocks) == 16
    assert [node.args["in_channels"] for node in blocks] == [32, 16, 24, 24, 40, 40, 80, 80, 80, 112, 112, 112,
                                                              192, 192, 192, 192]
    assert all(node.provenance["in_channels"] == "inferred" for node in blocks)
    assert {node.id: node for node in plan.nodes}["fc"].args["in_features"] == 1280


def test_the_module_tree_is_torchvisions():
    """Keys one to one and in torchvision's order inside each block, the squeeze width from the
    block's input (32 // 4 = 8 in the first block, though its hidden width is 32), the skips and
    the stochastic-depth rates where torchvision puts them."""
    reference = _reference()
    model = network(EFFICIENTNET_B0, device="cpu", **CONTRACT)
    keys = _key_map(model)
    assert len(set(keys.values())) == len(keys) and set(keys.values()) == set(reference.state_dict())
    for node_id, path in STATE.items():
        ours, theirs = model[node_id], reference.get_submodule(path)
        assert list(ours.state_dict()) == list(theirs.state_dict()), node_id
        if node_id in _blocks()[1]:
            assert ours.residual == theirs.use_res_connect, node_id
            assert ours.stochastic_depth.p == theirs.stochastic_depth.p, node_id
            c_in = ours.body[0][0].in_channels
            assert ours.se.fc1.out_channels == theirs.block[-2].fc1.out_channels == c_in // 4, node_id
    assert model["s1b0"].se.fc1.out_channels == 8 and not model["s1b0"].expand


def test_matches_torchvision_efficientnet_b0_in_eval_mode():
    reference = _reference()
    model = _copied_model(reference)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters()) == 4_020_358
    assert sum(b.numel() for b in model.buffers()) == sum(b.numel() for b in reference.buffers()) == 42_065
    model.eval()
    reference.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64)
    before = torch.get_rng_state()
    with torch.no_grad():
        out, expected = model(x), reference(x)
    assert torch.equal(torch.get_rng_state(), before)  # eval: no stochastic depth, no dropout
    assert out.shape == (2, 10)
    torch.testing.assert_close(out, expected)
    assert out.std() > 0.01


def test_matches_torchvision_efficientnet_b0_in_training_mode():
    """Batch statistics, the residual blocks' stochastic depth and the dropout, all from the same
    RNG state: the same draws in the same order."""
    reference = _reference()
    model = _copied_model(reference)
    model.train()
    reference.train()
    x = torch.randn(4, 3, 64, 64)
    torch.manual_seed(2)
    out = model(x)
    ours_after = torch.get_rng_state()
    torch.manual_seed(2)
    expected = reference(x)
    assert torch.equal(ours_after, torch.get_rng_state())
    torch.testing.assert_close(out, expected)
    theirs = reference.state_dict()
    for ours, name in _key_map(model).items():
        torch.testing.assert_close(model.state_dict()[ours], theirs[name], msg=ours)
