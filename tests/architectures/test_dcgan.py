"""The DCGAN of pytorch/examples (dcgan/main.py: nz=100, ngf=ndf=64, nc=3) built only from the
operator catalog -- generator and discriminator *with* their BatchNorm2d layers and the
example's weights_init written as init= schemes -- against the handwritten torch.nn models from
identical state: forward values, input gradients, parameter gradients, running statistics, one
Adam step with the example's settings, and evaluation mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch import network

NZ, NGF, NDF, NC = 100, 64, 64, 3
CONV_INIT = 'init={"weight": normal(mean=0.0, std=0.02)}'
NORM_INIT = 'init={"weight": normal(mean=1.0, std=0.02), "bias": 0}'

GENERATOR = f"""
deconv({NGF * 8}, kernel_size=4, stride=1, padding=0, bias=False, {CONV_INIT}, name="g1")
batch_norm({NORM_INIT}, name="g1_bn")
relu()
deconv({NGF * 4}, policy="up2", bias=False, {CONV_INIT}, name="g2")
batch_norm({NORM_INIT}, name="g2_bn")
relu()
deconv({NGF * 2}, policy="up2", bias=False, {CONV_INIT}, name="g3")
batch_norm({NORM_INIT}, name="g3_bn")
relu()
deconv({NGF}, policy="up2", bias=False, {CONV_INIT}, name="g4")
batch_norm({NORM_INIT}, name="g4_bn")
relu()
deconv(policy="up2", bias=False, {CONV_INIT}, name="g5")
tanh()
"""
GENERATOR_CONTRACT = {"input_shape": ("B", NZ, 1, 1), "output_shape": ("B", NC, 64, 64)}

DISCRIMINATOR = f"""
conv({NDF}, policy="down2", bias=False, {CONV_INIT}, name="d1")
leaky_relu(0.2)
conv({NDF * 2}, policy="down2", bias=False, {CONV_INIT}, name="d2")
batch_norm({NORM_INIT}, name="d2_bn")
leaky_relu(0.2)
conv({NDF * 4}, policy="down2", bias=False, {CONV_INIT}, name="d3")
batch_norm({NORM_INIT}, name="d3_bn")
leaky_relu(0.2)
conv({NDF * 8}, policy="down2", bias=False, {CONV_INIT}, name="d4")
batch_norm({NORM_INIT}, name="d4_bn")
leaky_relu(0.2)
conv(kernel_size=4, stride=1, padding=0, bias=False, {CONV_INIT}, name="d5")
sigmoid()
flatten()
"""
DISCRIMINATOR_CONTRACT = {"input_shape": ("B", NC, 64, 64), "output_shape": ("B", 1)}


def generator_reference():
    """pytorch/examples dcgan Generator.main."""
    return nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 8), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 8, NGF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 4), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),
        nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh(),
    )


def discriminator_reference():
    """pytorch/examples dcgan Discriminator.main, then output.view(-1, 1) as a flatten."""
    return nn.Sequential(
        nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 4), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 4, NDF * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 8), nn.LeakyReLU(0.2, inplace=True),
        nn.Conv2d(NDF * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid(), nn.Flatten(),
    )


GENERATOR_STATE = {"g1": 0, "g1_bn": 1, "g2": 3, "g2_bn": 4, "g3": 6, "g3_bn": 7, "g4": 9, "g4_bn": 10, "g5": 12}
DISCRIMINATOR_STATE = {"d1": 0, "d2": 2, "d2_bn": 3, "d3": 5, "d3_bn": 6, "d4": 8, "d4_bn": 9, "d5": 11}


def _copy(model, reference, mapping):
    """Identical state, node by node: parameters and the batch norms' running statistics."""
    for node_id, index in mapping.items():
        reference[index].load_state_dict(model[node_id].state_dict())
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


def _compare_gradients(model, reference, mapping):
    for node_id, index in mapping.items():
        for (name, ours), theirs in zip(model[node_id].named_parameters(), reference[index].parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-6, msg=f"{node_id}.{name}")


def _compare_state(model, reference, mapping):
    for node_id, index in mapping.items():
        for (name, ours), theirs in zip(model[node_id].state_dict().items(), reference[index].state_dict().values()):
            torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6, msg=f"{node_id}.{name}")


def _adam(module):
    return torch.optim.Adam(module.parameters(), lr=0.0002, betas=(0.5, 0.999))


def test_the_resolver_completes_both_networks():
    generator = hndl.resolve(GENERATOR, **GENERATOR_CONTRACT)
    shapes = [node.output_shapes["out"] for node in generator.nodes if node.alias == "deconv"]
    assert shapes == [("B", 512, 4, 4), ("B", 256, 8, 8), ("B", 128, 16, 16), ("B", 64, 32, 32), ("B", 3, 64, 64)]
    norms = [node for node in generator.nodes if node.alias == "batch_norm"]
    assert [node.args["num_features"] for node in norms] == [512, 256, 128, 64]
    assert all(node.provenance["num_features"] == "inferred" for node in norms)
    assert generator.nodes[-2].args["out_channels"] == NC
    discriminator = hndl.resolve(DISCRIMINATOR, **DISCRIMINATOR_CONTRACT)
    shapes = [node.output_shapes["out"] for node in discriminator.nodes if node.alias == "conv"]
    assert shapes == [("B", 64, 32, 32), ("B", 128, 16, 16), ("B", 256, 8, 8), ("B", 512, 4, 4), ("B", 1, 1, 1)]
    assert discriminator.nodes[-3].args["out_channels"] == 1


def test_the_initialization_is_the_examples_weights_init():
    model = network(GENERATOR, device="cpu", initialization_seed=0, **GENERATOR_CONTRACT)
    weight = model["g2"].weight  # 512 x 256 x 4 x 4
    assert abs(weight.mean().item()) < 1e-3 and abs(weight.std().item() - 0.02) < 1e-3
    norm = model["g1_bn"]
    assert abs(norm.weight.mean().item() - 1.0) < 0.01 and abs(norm.weight.std().item() - 0.02) < 0.005
    assert torch.count_nonzero(norm.bias) == 0
    assert torch.equal(norm.running_mean, torch.zeros(512)) and torch.equal(norm.running_var, torch.ones(512))


@pytest.mark.parametrize("which", ["generator", "discriminator"])
def test_matches_handwritten_pytorch_from_identical_state(which):
    if which == "generator":
        source, contract, make, mapping = GENERATOR, GENERATOR_CONTRACT, generator_reference, GENERATOR_STATE
    else:
        source, contract, make, mapping = DISCRIMINATOR, DISCRIMINATOR_CONTRACT, discriminator_reference, \
            DISCRIMINATOR_STATE
    torch.manual_seed(0)
    model = network(source, device="cpu", **contract)
    reference = make()
    _copy(model, reference, mapping)
    optimizers = _adam(model), _adam(reference)
    for step in range(2):
        x = torch.randn(3, *contract["input_shape"][1:])
        x_built, x_hand = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        out, expected = model(x_built), reference(x_hand)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        upstream = torch.randn_like(out)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        torch.testing.assert_close(x_built.grad, x_hand.grad, rtol=1e-4, atol=1e-6)
        _compare_gradients(model, reference, mapping)
        _compare_state(model, reference, mapping)  # the running statistics moved identically
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
        _compare_state(model, reference, mapping)
    model.eval()
    reference.eval()
    x = torch.randn(2, *contract["input_shape"][1:])
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-6)


def test_one_gan_step_matches():
    """The example's generator update: BCE(D(G(z)), real) back through both networks."""
    torch.manual_seed(1)
    generator = network(GENERATOR, device="cpu", **GENERATOR_CONTRACT)
    discriminator = network(DISCRIMINATOR, device="cpu", **DISCRIMINATOR_CONTRACT)
    hand_g, hand_d = generator_reference(), discriminator_reference()
    _copy(generator, hand_g, GENERATOR_STATE)
    _copy(discriminator, hand_d, DISCRIMINATOR_STATE)
    z = torch.randn(2, NZ, 1, 1)
    criterion = nn.BCELoss()
    real = torch.ones(2, 1)
    loss = criterion(discriminator(generator(z)), real)
    expected = criterion(hand_d(hand_g(z)), real)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    _compare_gradients(generator, hand_g, GENERATOR_STATE)
    _compare_gradients(discriminator, hand_d, DISCRIMINATOR_STATE)
