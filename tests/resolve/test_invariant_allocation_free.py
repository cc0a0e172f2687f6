"""Invariant 3 over every declared operator example: resolution constructs no module,
allocates no tensor, draws no random number, opens no socket and reads no file."""

import builtins
import io
import random
import socket

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
from hndl import Registry


class _RefuseTensorOps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"resolution ran the tensor operation {func}")


def _examples():
    registry = Registry.builtins()
    return [
        pytest.param(spec, example, id=f"{spec.alias}-{index}")
        for spec in registry
        for index, example in enumerate(spec.examples)
        if not example.network
    ]


@pytest.fixture(scope="module")
def registry():
    return Registry.builtins()


@pytest.fixture
def guarded(monkeypatch):
    """Refuse module construction, sockets and file opening; check RNG states afterwards."""
    import torch._dynamo  # noqa: F401  -- finish torch's lazy imports before open() is refused

    with _RefuseTensorOps():
        pass

    def refuse(what):
        def refused(*args, **kwargs):
            raise AssertionError(f"resolution called {what}")

        return refused

    monkeypatch.setattr(nn.Module, "__init__", refuse("nn.Module.__init__"))
    monkeypatch.setattr(socket, "socket", refuse("socket.socket"))
    monkeypatch.setattr(builtins, "open", refuse("open"))
    monkeypatch.setattr(io, "open", refuse("io.open"))
    torch_rng, python_rng = torch.get_rng_state(), random.getstate()
    yield
    assert torch.equal(torch.get_rng_state(), torch_rng)
    assert random.getstate() == python_rng


@pytest.mark.parametrize("spec, example", _examples())
def test_every_operator_example_resolves_without_effects(spec, example, registry, guarded):
    with _RefuseTensorOps():
        plan = hndl.resolve(
            example.source,
            input_shape=example.input_shape,
            output_shape=example.output_shape,
            input_dtype=example.input_dtype,
            registry=registry,
        )
    assert any(node.op == spec.qualified for node in plan.nodes)


def test_the_guards_are_live(guarded):
    with pytest.raises(AssertionError):
        nn.ReLU()
    with pytest.raises(AssertionError):
        open(__file__)
    with _RefuseTensorOps(), pytest.raises(AssertionError):
        torch.ones(1) + 1


def test_every_installed_first_party_operator_has_an_example():
    assert len(_examples()) >= len(Registry.builtins())
