"""§14 "Backend equivalence": built modules against handwritten PyTorch from identical state.

For each network the handwritten module receives a copy of the built parameters, then both
run the same input: forward values, the input gradient and every parameter gradient must
agree, and so must the parameters after one SGD (momentum) step and then one Adam step.

Networks: (a) a 5-layer MLP; (b) a conv stack (conv/relu/conv/relu with padding, a down2
conv, flatten, linear); (c) the DCGAN generator of pytorch/examples (dcgan/main.py,
nz=100, ngf=64, nc=3: a kernel-4 stride-1 padding-0 deconv to ngf*8 x 4 x 4, then four
up2 deconvs to 3 x 64 x 64, with the example's N(0, 0.02) conv initialization written as an
init= scheme) -- *without its BatchNorm2d layers*, because no batch_norm operator exists yet;
the handwritten reference omits them identically; (d) the §7 worked generator.

Also §11: frozen parameters still pass input gradients; train()/eval() never change
requires_grad; a built module starts in training mode; nothing is silently cast.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.torch import build, network

MLP = """
linear(64)
relu()
linear(64)
relu()
linear(32)
relu()
linear(32)
relu()
linear()
"""

CONV_STACK = """
conv(16, kernel_size=3, padding=1)
relu()
conv(32, kernel_size=3, padding=1)
relu()
conv(32, policy="down2")
flatten()
linear()
"""

NZ, NGF, NC = 100, 64, 3
DCGAN = f"""
deconv({NGF * 8}, kernel_size=4, stride=1, padding=0, bias=False, init={{"weight": normal(mean=0.0, std=0.02)}})
relu()
deconv({NGF * 4}, policy="up2", bias=False, init={{"weight": normal(mean=0.0, std=0.02)}})
relu()
deconv({NGF * 2}, policy="up2", bias=False, init={{"weight": normal(mean=0.0, std=0.02)}})
relu()
deconv({NGF}, policy="up2", bias=False, init={{"weight": normal(mean=0.0, std=0.02)}})
relu()
deconv({NC}, policy="up2", bias=False, init={{"weight": normal(mean=0.0, std=0.02)}})
tanh()
"""

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""


def mlp_reference():
    return nn.Sequential(
        nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10),
    )


def conv_reference():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 4, stride=2, padding=1), nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )


def dcgan_reference():
    """pytorch/examples dcgan Generator.main with its four BatchNorm2d layers left out."""
    return nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 8, 4, 1, 0, bias=False), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 8, NGF * 4, 4, 2, 1, bias=False), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.ReLU(True),
        nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.ReLU(True),
        nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh(),
    )


def generator_reference():
    return nn.Sequential(
        nn.Linear(128, 8192), nn.ReLU(), nn.Unflatten(1, (512, 4, 4)),
        nn.ConvTranspose2d(512, 256, 4, 2, 1), nn.ReLU(),
        nn.ConvTranspose2d(256, 128, 4, 2, 1), nn.ReLU(),
        nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.ReLU(),
        nn.Conv2d(64, 3, 3, 1, 1), nn.Tanh(),
    )


CASES = {
    "mlp": (MLP, ("B", 20), ("B", 10), mlp_reference),
    "conv_stack": (CONV_STACK, ("B", 3, 16, 16), ("B", 10), conv_reference),
    "dcgan_generator": (DCGAN, ("B", NZ, 1, 1), ("B", NC, 64, 64), dcgan_reference),
    "worked_generator": (GENERATOR, ("B", 128), ("B", 3, 32, 32), generator_reference),
}


def copy_into(model, reference):
    """Identical state: the handwritten module takes the built parameters, in order."""
    built, hand = list(model.parameters()), list(reference.parameters())
    assert [tuple(p.shape) for p in built] == [tuple(p.shape) for p in hand]
    with torch.no_grad():
        for source, target in zip(built, hand):
            target.copy_(source)
            target.requires_grad_(source.requires_grad)
    return built, hand


def one_step(model, reference, built, hand, x, make_optimizers):
    """Forward, input/parameter gradients and one optimizer step, compared."""
    opt_built, opt_hand = make_optimizers(built), make_optimizers(hand)
    x_built = x.clone().requires_grad_(True)
    x_hand = x.clone().requires_grad_(True)
    out_built = model(x=x_built)["output"]
    out_hand = reference(x_hand)
    torch.testing.assert_close(out_built, out_hand, rtol=0, atol=0)  # the same kernels: bitwise equal
    upstream = torch.randn_like(out_hand)
    (out_built * upstream).sum().backward()
    (out_hand * upstream).sum().backward()
    torch.testing.assert_close(x_built.grad, x_hand.grad)
    for a, b in zip(built, hand):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            torch.testing.assert_close(a.grad, b.grad)
    opt_built.step()
    opt_hand.step()
    opt_built.zero_grad()
    opt_hand.zero_grad()
    for a, b in zip(built, hand):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_handwritten_pytorch_from_identical_state(case):
    source, input_shape, output_shape, make_reference = CASES[case]
    torch.manual_seed(0)
    plan = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    model = build(plan, device="cpu")
    reference = make_reference()
    built, hand = copy_into(model, reference)
    x = torch.randn(2, *input_shape[1:])
    one_step(model, reference, built, hand, x,
             lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9))
    one_step(model, reference, built, hand, torch.randn(2, *input_shape[1:]),
             lambda params: torch.optim.Adam(params, lr=1e-3))
    # both ran in training mode the whole time, and only the plan's parameters exist
    assert model.training and reference.training
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


def test_the_dcgan_initialization_is_the_examples_normal_0_02():
    plan = hndl.resolve(DCGAN, input_shape=("B", NZ, 1, 1), output_shape=("B", NC, 64, 64))
    assert [node.initialization["kind"] for node in plan.nodes if node.alias == "deconv"] == ["torch_default@2"] * 5
    model = build(plan, device="cpu", initialization_seed=0)
    weight = model.nodes.n_n2.weight  # 512 x 256 x 4 x 4
    assert abs(weight.mean().item()) < 1e-3 and abs(weight.std().item() - 0.02) < 1e-3
    assert model.nodes.n_n0.bias is None


def test_dcgan_shapes_are_the_examples():
    plan = hndl.resolve(DCGAN, input_shape=("B", NZ, 1, 1), output_shape=("B", NC, 64, 64))
    deconvs = [node for node in plan.nodes if node.alias == "deconv"]
    assert [node.output_shapes["out"] for node in deconvs] == [
        ("B", 512, 4, 4), ("B", 256, 8, 8), ("B", 128, 16, 16), ("B", 64, 32, 32), ("B", 3, 64, 64),
    ]


# -- §11 backend rules ------------------------------------------------------------------------------------------
def test_frozen_parameters_still_pass_input_gradients():
    model = network("linear(16, trainable=False)\nrelu()\nlinear()", input_shape=("B", 8), output_shape=("B", 4),
                    device="cpu")
    reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    built, hand = copy_into(model, reference)
    assert [p.requires_grad for p in built] == [False, False, True, True]
    x = torch.randn(3, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    model(x).sum().backward()
    reference(x_ref).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    torch.testing.assert_close(x.grad, x_ref.grad)
    assert model.nodes.n_n0.weight.grad is None and model.nodes.n_n0.bias.grad is None
    torch.testing.assert_close(model.nodes.n_n2.weight.grad, reference[2].weight.grad)
    # an optimizer over every parameter leaves the frozen ones as they were
    frozen = model.nodes.n_n0.weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert torch.equal(model.nodes.n_n0.weight, frozen)


def test_a_fully_frozen_network_still_differentiates_its_input():
    model = network("linear(6, trainable=False)\ntanh()", input_shape=("B", 3), output_shape=("B", 6), device="cpu")
    x = torch.randn(2, 3, requires_grad=True)
    out = model(x)
    assert out.requires_grad
    (grad,) = torch.autograd.grad(out.sum(), x)
    w = model.nodes.n_n0.weight
    expected = ((1 - out.detach() ** 2) @ w.detach())
    torch.testing.assert_close(grad, expected)


def test_train_and_eval_never_change_requires_grad():
    model = network("linear(8, trainable={'bias': False})\nrelu()\nlinear(8, trainable=False)\nrelu()\nlinear()",
                    input_shape=("B", 4), output_shape=("B", 2), device="cpu")
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    assert flags == {
        "nodes.n_n0.weight": True, "nodes.n_n0.bias": False,
        "nodes.n_n2.weight": False, "nodes.n_n2.bias": False,
        "nodes.n_n4.weight": True, "nodes.n_n4.bias": True,
    }
    model.eval()
    assert not model.training and not any(module.training for module in model.modules())
    assert {name: p.requires_grad for name, p in model.named_parameters()} == flags
    model.train()
    assert all(module.training for module in model.modules())
    assert {name: p.requires_grad for name, p in model.named_parameters()} == flags


@pytest.mark.parametrize("make", ["build", "network"])
def test_a_built_module_starts_in_training_mode(make):
    source, contract = "linear(8)\ndropout(0.5)\nlinear()", {"input_shape": ("B", 4), "output_shape": ("B", 2)}
    if make == "build":
        model = build(hndl.resolve(source, **contract), device="cpu")
    else:
        model = network(source, device="cpu", **contract)
    assert model.training and all(module.training for module in model.modules())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_nothing_is_silently_cast(dtype):
    model = build(hndl.resolve(MLP, input_shape=("B", 20), output_shape=("B", 10)), device="cpu")
    x = torch.ones(2, 20, dtype=dtype)
    with pytest.raises(HNDLError, match=r"^E_RUNTIME\b"):
        model(x=x)
    assert x.dtype == dtype
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_a_reduced_precision_plan_runs_in_its_own_dtype_only():
    plan = hndl.resolve("linear(8)\nrelu()\nlinear()", input_shape=("B", 4), output_shape=("B", 2), dtype="bfloat16")
    model = build(plan, device="cpu")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model(x=torch.randn(3, 4, dtype=torch.bfloat16))["output"].dtype == torch.bfloat16
    with pytest.raises(HNDLError, match=r"^E_RUNTIME\b"):
        model(x=torch.randn(3, 4))


def test_outputs_are_not_detached_or_copied_from_the_graph():
    model = build(hndl.resolve("linear(4)", input_shape=("B", 3), output_shape=("B", 4)), device="cpu")
    x = torch.randn(2, 3, requires_grad=True)
    out = model(x=x)["output"]
    assert out.grad_fn is not None and out.device == x.device
    # second derivatives flow through the built module as through handwritten code
    (grad,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), x)
    w = model.nodes.n_n0.weight.detach()
    torch.testing.assert_close(second, (2 * w.sum(1) @ w).expand(2, 3))
