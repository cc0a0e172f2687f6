"""opacus (issue 28 item 2): a built network is validated, fixed and made private like its handwritten twin.

opacus looks layers up by type: ``ModuleValidator`` refuses batch norm (it mixes the examples of a
batch, so per-example gradients leak) and ``ModuleValidator.fix`` swaps it for a GroupNorm;
``PrivacyEngine.make_private`` attaches per-sample gradient hooks to the layers it knows
(``nn.Conv2d``, ``nn.Linear``, ``nn.GroupNorm``...). A batch-norm node that was an HNDL subclass with its
own forward passed the validator (``[]`` where the twin gets an error) and then failed in
``make_private``; nodes now build as torch's own classes, so every step matches the twin: the same
validation errors, a fix of the unsealed network (``fix`` restructures, which the sealed network
refuses), and one DP-SGD step that moves every parameter exactly as it moves the twin's.
docs/backend.md's "Works with" table names these tests.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from opacus import PrivacyEngine  # a pinned dev dependency (pyproject.toml)
from opacus.validators import ModuleValidator
from torch import nn

from hndl.torch import network, unsealed

CLASSIFIER = """
conv(8, kernel_size=3, padding=1)
batch_norm()
relu()
max_pool(kernel_size=2)
flatten()
linear(32)
relu()
linear()
"""
CONV_NET = """
conv(8, kernel_size=3, padding=1)
relu()
flatten()
linear(32)
relu()
linear()
"""


class Twin(nn.Module):
    """The handwritten model: its layers in a ``nodes`` dict under the network's names, run in order."""

    def __init__(self, layers: dict[str, nn.Module]) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.nodes.values():
            x = layer(x)
        return x


def classifier() -> tuple[nn.Module, Twin]:
    model = network(CLASSIFIER, input_shape=("B", 3, 8, 8), output_shape=("B", 10), device="cpu",
                    initialization_seed=0)
    twin = Twin({
        "n_n0": nn.Conv2d(3, 8, 3, padding=1), "n_n1": nn.BatchNorm2d(8), "n_n2": nn.ReLU(),
        "n_n3": nn.MaxPool2d(2), "n_n4": nn.Flatten(), "n_n5": nn.Linear(128, 32), "n_n6": nn.ReLU(),
        "n_n7": nn.Linear(32, 10),
    })
    twin.load_state_dict(model.state_dict())
    return model, twin


def conv_net() -> tuple[nn.Module, Twin]:
    model = network(CONV_NET, input_shape=("B", 3, 4, 4), output_shape=("B", 10), device="cpu",
                    initialization_seed=0)
    twin = Twin({
        "n_n0": nn.Conv2d(3, 8, 3, padding=1), "n_n1": nn.ReLU(), "n_n2": nn.Flatten(),
        "n_n3": nn.Linear(128, 32), "n_n4": nn.ReLU(), "n_n5": nn.Linear(32, 10),
    })
    twin.load_state_dict(model.state_dict())
    return model, twin


def loader(size: int) -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3, size, size, generator=generator),
                                          torch.randint(0, 10, (8,), generator=generator))
    return torch.utils.data.DataLoader(data, batch_size=4)


def dp_sgd_step(model: nn.Module, size: int) -> dict[str, torch.Tensor]:
    """One DP-SGD step through ``make_private`` (no noise, so the step is deterministic: per-sample
    gradients clipped to norm 1 and averaged); the parameters afterwards."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # opacus warns about the secure RNG and the noise of 0
        private, optimizer, private_loader = PrivacyEngine().make_private(
            module=model, optimizer=optimizer, data_loader=loader(size), noise_multiplier=0.0, max_grad_norm=1.0,
            poisson_sampling=False)
        x, y = next(iter(private_loader))
        optimizer.zero_grad()
        nn.functional.cross_entropy(private(x), y).backward()
        optimizer.step()
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_the_validator_reports_the_batch_norm_of_the_network_as_of_the_twin():
    model, twin = classifier()
    errors = ModuleValidator.validate(model, strict=False)
    assert [str(error) for error in errors] == [str(error) for error in ModuleValidator.validate(twin, strict=False)]
    assert len(errors) == 1 and "BatchNorm cannot support training with differential privacy" in str(errors[0])
    with pytest.raises(Exception) as strict:
        ModuleValidator.validate(model, strict=True)
    assert type(strict.value).__name__ == "UnsupportedModuleError"


def test_fix_of_the_unsealed_network_and_a_dp_sgd_step_match_the_twin():
    model, twin = classifier()
    plain = ModuleValidator.fix(unsealed(copy.deepcopy(model)))
    fixed_twin = ModuleValidator.fix(twin)
    assert type(plain["n1"]) is nn.GroupNorm and type(fixed_twin.nodes.n_n1) is nn.GroupNorm
    assert ModuleValidator.validate(plain, strict=False) == []
    plain.load_state_dict(fixed_twin.state_dict())  # GroupNorm's fresh affine parameters: the same on both
    before = {name: value.clone() for name, value in plain.state_dict().items()}
    got = dp_sgd_step(plain, 8)
    want = dp_sgd_step(fixed_twin, 8)
    assert got.keys() == want.keys()
    for name in got:
        torch.testing.assert_close(got[name], want[name])
    assert not torch.equal(got["nodes.n_n0.weight"], before["nodes.n_n0.weight"])  # the step moved the weights


def test_make_private_trains_a_network_without_batch_norm_like_its_twin():
    model, twin = conv_net()
    assert ModuleValidator.validate(model, strict=False) == [] == ModuleValidator.validate(twin, strict=False)
    got = dp_sgd_step(model, 4)  # the sealed network itself: make_private wraps it, changing no structure
    want = dp_sgd_step(twin, 4)
    for name in want:
        torch.testing.assert_close(got[name], want[name])
    x = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(model(x), twin(x))
