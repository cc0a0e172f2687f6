"""Older multi-branch CNNs, exact against torchvision with weights copied, that need what this pack
gained for issue 27: GoogLeNet (Szegedy et al. 2014; ceil-mode max pools in the stem, between the
stages and in every Inception pool branch), SqueezeNet 1.0 and 1.1 (Iandola et al. 2016; 3x3
stride-2 max pools in ceil mode, Fire modules joined by concat) and ShuffleNet V2 x0.5 (Ma et al.
2018; chunk, concat and channel_shuffle(2) in every unit). Each is HNDL configuration text,
generated per block here; the resolver infers every input channel count and batch norm width, and
the classifier widths from the output contract. Inputs are sized so that the ceil-mode pools see
even extents, where ceil and floor mode differ (SqueezeNet 1.0 at 53 x 53: 24 -> 12, 12 -> 6,
6 -> 3; floor mode gives 11, 5, 2)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from hndl.torch import network


def _fire(name: str, source: str, squeeze: int, expand: int) -> str:
    """torchvision's Fire: a 1x1 squeeze, then 1x1 and 3x3 expands joined on the channel axis."""
    return (f'{name}_s = relu(conv({source}, {squeeze}, kernel_size=1, name="{name}_squeeze"))\n'
            f'{name}_a = relu(conv({name}_s, {expand}, kernel_size=1, name="{name}_expand1x1"))\n'
            f'{name}_b = relu(conv({name}_s, {expand}, kernel_size=3, padding=1, name="{name}_expand3x3"))\n'
            f'{name} = concat({name}_a, {name}_b)\n')


#: torchvision's feature layers per version: ("conv", out, kernel) | ("pool",) | ("fire", squeeze, expand)
LAYERS = {
    "1_0": [("conv", 96, 7), ("pool",), ("fire", 16, 64), ("fire", 16, 64), ("fire", 32, 128), ("pool",),
            ("fire", 32, 128), ("fire", 48, 192), ("fire", 48, 192), ("fire", 64, 256), ("pool",), ("fire", 64, 256)],
    "1_1": [("conv", 64, 3), ("pool",), ("fire", 16, 64), ("fire", 16, 64), ("pool",), ("fire", 32, 128),
            ("fire", 32, 128), ("pool",), ("fire", 48, 192), ("fire", 48, 192), ("fire", 64, 256), ("fire", 64, 256)],
}
#: the smallest input sizes at which every ceil-mode pool of the version sees an even extent
SIZE = {"1_0": 53, "1_1": 49}
BUILDERS = {"1_0": torchvision.models.squeezenet1_0, "1_1": torchvision.models.squeezenet1_1}


def squeezenet(version: str) -> tuple[str, dict[str, str]]:
    """The HNDL text of SqueezeNet ``version`` and its node -> torchvision submodule map."""
    lines, state, current = [], {}, "x"
    for index, layer in enumerate(LAYERS[version]):
        name = f"f{index}"
        if layer[0] == "conv":
            lines.append(f'{name} = relu(conv({current}, {layer[1]}, kernel_size={layer[2]}, stride=2, name="stem"))\n')
            state["stem"] = f"features.{index}"
        elif layer[0] == "pool":
            lines.append(f'{name} = max_pool({current}, 3, stride=2, ceil_mode=True, name="pool{index}")\n')
        else:
            lines.append(_fire(name, current, layer[1], layer[2]))
            position = index + 1  # torchvision's features hold the stem's ReLU at index 1
            for part in ("squeeze", "expand1x1", "expand3x3"):
                state[f"{name}_{part}"] = f"features.{position}.{part}"
        current = name
    lines.append(f'dropout({current}, 0.5)\nconv(kernel_size=1, name="classifier")\nrelu()\n'
                 'adaptive_avg_pool(1)\nflatten()\n')
    state["classifier"] = "classifier.1"
    return "".join(lines), state


def _unit(name: str, source: str, inputs: int, channels: int, stride: int) -> tuple[str, dict[str, str]]:
    """torchvision's ShuffleNet V2 InvertedResidual: stride 1 splits the channels in half and
    transforms the second half; stride 2 transforms the whole input on two branches. The halves
    are joined by concat and interleaved by channel_shuffle(2). Returns the text and the state map."""
    half = channels // 2
    if stride == 1:
        text = f"{name}_l, {name}_in = chunk({source}, 2)\n"
        first = f"{name}_in"
    else:
        text = (f'{name}_l0 = batch_norm(conv({source}, {inputs}, kernel_size=3, stride=2, padding=1, '
                f'groups={inputs}, bias=False, name="{name}_b1_0"), name="{name}_b1_1")\n'
                f'{name}_l = relu(batch_norm(conv({name}_l0, {half}, kernel_size=1, bias=False, name="{name}_b1_2"), '
                f'name="{name}_b1_3"))\n')
        first = source
    text += (f'{name}_r0 = relu(batch_norm(conv({first}, {half}, kernel_size=1, bias=False, name="{name}_b2_0"), '
             f'name="{name}_b2_1"))\n'
             f'{name}_r1 = batch_norm(conv({name}_r0, {half}, kernel_size=3, stride={stride}, padding=1, '
             f'groups={half}, bias=False, name="{name}_b2_3"), name="{name}_b2_4")\n'
             f'{name}_r = relu(batch_norm(conv({name}_r1, {half}, kernel_size=1, bias=False, name="{name}_b2_5"), '
             f'name="{name}_b2_6"))\n'
             f"{name} = channel_shuffle(concat({name}_l, {name}_r), 2)\n")
    layers = {"branch2": (0, 1, 3, 4, 5, 6), **({"branch1": (0, 1, 2, 3)} if stride == 2 else {})}
    return text, {f"{name}_b{branch[-1]}_{layer}": f"{branch}.{layer}" for branch, numbers in layers.items()
                  for layer in numbers}


def shufflenet_v2_x0_5() -> tuple[str, dict[str, str]]:
    """The HNDL text of torchvision's shufflenet_v2_x0_5 and its node -> submodule map."""
    text = ('stem = max_pool(relu(batch_norm(conv(x, 24, kernel_size=3, stride=2, padding=1, bias=False, '
            'name="conv1"), name="conv1_bn")), 3, stride=2, padding=1)\n')
    state = {"conv1": "conv1.0", "conv1_bn": "conv1.1", "conv5": "conv5.0", "conv5_bn": "conv5.1", "fc": "fc"}
    current, inputs = "stem", 24
    for stage, (repeats, channels) in enumerate(zip((4, 8, 4), (48, 96, 192)), start=2):
        for index in range(repeats):
            name = f"s{stage}u{index}"
            unit, parts = _unit(name, current, inputs, channels, 2 if index == 0 else 1)
            text += unit
            state.update({node: f"stage{stage}.{index}.{path}" for node, path in parts.items()})
            current, inputs = name, channels
    text += (f'relu(batch_norm(conv({current}, 1024, kernel_size=1, bias=False, name="conv5"), name="conv5_bn"))\n'
             'adaptive_avg_pool(1)\nflatten()\nlinear(name="fc")\n')
    return text, state


def _randomized(reference: nn.Module) -> nn.Module:
    """Non-trivial normalization state and small classifier weights, so eval mode is a real test."""
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.2)
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return reference.eval()


def _copy(model: nn.Module, reference: nn.Module, state: dict[str, str]) -> None:
    for node_id, path in state.items():
        model[node_id].load_state_dict(reference.get_submodule(path).state_dict())  # strict: names must agree


def _counts(module: nn.Module) -> tuple[int, int]:
    return sum(p.numel() for p in module.parameters()), sum(b.numel() for b in module.buffers())


@pytest.mark.parametrize("version", ["1_0", "1_1"])
def test_squeezenet_matches_torchvision_in_eval_mode(version):
    torch.manual_seed(0)
    reference = _randomized(BUILDERS[version](weights=None, num_classes=10))
    text, state = squeezenet(version)
    size = SIZE[version]
    contract = {"input_shape": ("B", 3, size, size), "output_shape": ("B", 10)}
    model = network(text, device="cpu", **contract)
    plan = model.plan
    pools = [node for node in plan.nodes if node.alias == "max_pool"]
    assert [node.input_shapes["x"][2] for node in pools] == [24, 12, 6]
    assert [node.output_shapes["out"][2] for node in pools] == [12, 6, 3]  # floor mode: 11, 5, 2
    assert all(node.args["ceil_mode"] for node in pools)
    _copy(model, reference, state)
    assert _counts(model) == _counts(reference)
    assert len(model.state_dict()) == len(reference.state_dict())
    model.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        out, expected = model(x), reference(x)
    torch.testing.assert_close(out, expected)
    assert out.std() > 0


def test_shufflenet_v2_matches_torchvision_in_eval_mode():
    torch.manual_seed(0)
    reference = _randomized(torchvision.models.shufflenet_v2_x0_5(weights=None))
    text, state = shufflenet_v2_x0_5()
    contract = {"input_shape": ("B", 3, 64, 64), "output_shape": ("B", 1000)}
    model = network(text, device="cpu", **contract)
    plan = model.plan
    shuffles = [node for node in plan.nodes if node.alias == "channel_shuffle"]
    assert len(shuffles) == 16 and all(node.args["groups"] == 2 for node in shuffles)
    assert [node.output_shapes["out"][1] for node in shuffles] == [48] * 4 + [96] * 8 + [192] * 4
    _copy(model, reference, state)
    assert _counts(model) == _counts(reference)
    assert len(model.state_dict()) == len(reference.state_dict())
    model.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out, expected = model(x), reference(x)
    torch.testing.assert_close(out, expected)
    assert out.std() > 0


def _basic(name: str, source: str, channels: int, kernel: int = 1, stride: int = 1, padding: int = 0) -> str:
    """torchvision's BasicConv2d: convolution without bias, batch norm with eps 0.001, ReLU."""
    return (f"relu(batch_norm(conv({source}, {channels}, kernel_size={kernel}, stride={stride}, padding={padding}, "
            f'bias=False, name="{name}_conv"), eps=0.001, name="{name}_bn"))')


#: torchvision's Inception widths: ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5 (a 3x3 in torchvision), pool_proj
INCEPTIONS = {
    "inception3a": (64, 96, 128, 16, 32, 32), "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64), "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64), "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128), "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}
#: (the Inception block it follows, kernel) of each ceil-mode pool between the stages
STAGE_POOLS = {"inception3b": 3, "inception4e": 2}


def googlenet() -> tuple[str, dict[str, str]]:
    """The HNDL text of torchvision's googlenet(aux_logits=False) and its node -> submodule map."""
    text = (f"c1 = {_basic('conv1', 'x', 64, 7, 2, 3)}\n"
            'p1 = max_pool(c1, 3, stride=2, ceil_mode=True, name="maxpool1")\n'
            f"c2 = {_basic('conv2', 'p1', 64)}\n"
            f"c3 = {_basic('conv3', 'c2', 192, 3, 1, 1)}\n"
            'p2 = max_pool(c3, 3, stride=2, ceil_mode=True, name="maxpool2")\n')
    state = {f"{name}_{part}": f"{name}.{part}" for name in ("conv1", "conv2", "conv3") for part in ("conv", "bn")}
    current = "p2"
    for index, (name, (one, reduce3, three, reduce5, five, pool)) in enumerate(INCEPTIONS.items()):
        text += (f"{name}_1 = {_basic(name + '_b1', current, one)}\n"
                 f"{name}_2r = {_basic(name + '_b2r', current, reduce3)}\n"
                 f"{name}_2 = {_basic(name + '_b2', name + '_2r', three, 3, 1, 1)}\n"
                 f"{name}_3r = {_basic(name + '_b3r', current, reduce5)}\n"
                 f"{name}_3 = {_basic(name + '_b3', name + '_3r', five, 3, 1, 1)}\n"
                 f'{name}_4p = max_pool({current}, 3, stride=1, padding=1, ceil_mode=True, name="{name}_pool")\n'
                 f"{name}_4 = {_basic(name + '_b4', name + '_4p', pool)}\n"
                 f"{name} = concat({name}_1, {name}_2, {name}_3, {name}_4)\n")
        for node, path in (("b1", "branch1"), ("b2r", "branch2.0"), ("b2", "branch2.1"), ("b3r", "branch3.0"),
                           ("b3", "branch3.1"), ("b4", "branch4.1")):
            for part in ("conv", "bn"):
                state[f"{name}_{node}_{part}"] = f"{name}.{path}.{part}"
        current = name
        if name in STAGE_POOLS:
            kernel = STAGE_POOLS[name]
            text += f'pool{index} = max_pool({current}, {kernel}, stride=2, ceil_mode=True)\n'
            current = f"pool{index}"
    text += f'adaptive_avg_pool({current}, 1)\nflatten()\ndropout(0.2)\nlinear(name="fc")\n'
    state["fc"] = "fc"
    return text, state


def test_googlenet_matches_torchvision_in_eval_mode():
    torch.manual_seed(0)
    reference = _randomized(torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False))
    assert reference.transform_input is False
    text, state = googlenet()
    contract = {"input_shape": ("B", 3, 64, 64), "output_shape": ("B", 1000)}
    model = network(text, device="cpu", **contract)
    plan = model.plan
    pools = [node for node in plan.nodes if node.alias == "max_pool" and node.args["stride"] == (2, 2)]
    assert [(node.input_shapes["x"][2], node.output_shapes["out"][2]) for node in pools] == [
        (32, 16), (16, 8), (8, 4), (4, 2)]  # floor mode: 15, 7, 3 for the 3x3 pools
    assert all(node.args["ceil_mode"] for node in plan.nodes if node.alias == "max_pool")
    _copy(model, reference, state)
    assert _counts(model) == _counts(reference)
    assert len(model.state_dict()) == len(reference.state_dict())
    model.eval()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out, expected = model(x), reference(x)
    torch.testing.assert_close(out, expected)
    assert out.std() > 0
