"""Checkpoint safety (reliability issue, item 5): checkpoints are untrusted data.

A .pth holding pickled objects is refused (weights-only loading), a wrong sha256 fails before
anything is loaded, and a config.json that asks for remote code never has it imported or run:
``trust_remote_code`` is never enabled. Each checkpoint is made in a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.torch import build


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 3)

    def forward(self, x):
        return self.layer(x)


class Payload:
    """Unpickling this would run code: weights-only loading must refuse it."""

    def __reduce__(self):
        return (Path.write_text, (Path(MARKER), "pickle ran"))


MARKER = "/nonexistent/placeholder"


@pytest.fixture
def registry() -> Registry:
    registry = Registry.builtins()
    registry.pretrained_provider("tiny", Tiny)
    return registry


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve(path: Path, digest: str, registry: Registry):
    return hndl.resolve(f'pretrained("{path}", provider="tiny", sha256="{digest}")',
                        input_shape=("B", 4), output_shape=("B", 3), registry=registry)


def test_a_pth_with_a_pickled_object_is_refused_and_never_unpickled(tmp_path, registry, monkeypatch):
    marker = tmp_path / "executed"
    monkeypatch.setattr(sys.modules[__name__], "MARKER", str(marker))
    path = tmp_path / "evil.pth"
    torch.save({"layer.weight": torch.zeros(3, 4), "layer.bias": torch.zeros(3), "extra": Payload()}, path)
    plan = resolve(path, sha256(path), registry)
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=registry)
    assert error.value.code == "E_PRETRAINED"
    assert not marker.exists()  # the payload's __reduce__ never ran


def test_a_wrong_sha256_fails_before_loading(tmp_path, registry, monkeypatch):
    path = tmp_path / "tiny.pth"
    torch.save(Tiny().state_dict(), path)
    with pytest.raises(HNDLError) as error:
        resolve(path, "0" * 64, registry)
    assert error.value.code in ("E_PRETRAINED", "E_CONSTRAINT")
    assert "sha256" in str(error.value).lower()
    plan = resolve(path, sha256(path), registry)
    torch.save({key: value + 1 for key, value in Tiny().state_dict().items()}, path)  # swapped after resolution
    loads = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args) or {})
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=registry)
    assert error.value.code in ("E_PRETRAINED", "E_CONSTRAINT")
    assert loads == []  # the digest was checked before torch.load was ever called


@pytest.fixture
def remote_code_checkpoint(tmp_path) -> tuple[Path, Path]:
    """A GPT-2 checkpoint whose config.json asks for code shipped beside it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = tmp_path / "remote"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8)).save_pretrained(directory)
    marker = tmp_path / "remote-code-ran"
    code = f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
    (directory / "modeling_evil.py").write_text(code)
    (directory / "configuration_evil.py").write_text(code)
    config = json.loads((directory / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}
    (directory / "config.json").write_text(json.dumps(config))
    return directory, marker


@pytest.mark.parametrize("model_type", ["gpt2", "evil"])
def test_a_config_asking_for_remote_code_never_runs_it(remote_code_checkpoint, model_type):
    directory, marker = remote_code_checkpoint
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = model_type
    (directory / "config.json").write_text(json.dumps(config))
    source = f'pretrained("{directory}", output="features")'
    contracts = dict(input_shape=("B", 8), output_shape=("B", 8, 16), input_dtype="int64")
    if model_type == "evil":  # only the remote code could define it: refused, never imported
        with pytest.raises(HNDLError) as error:
            hndl.resolve(source, **contracts)
        assert error.value.code == "E_PRETRAINED"
    else:  # a known architecture: built from the library's own code, auto_map ignored
        plan = hndl.resolve(source, **contracts)
        model = build(plan, device="cpu")
        assert model(x=torch.zeros(2, 8, dtype=torch.int64))["output"].shape == (2, 8, 16)
    assert not marker.exists()
    assert "modeling_evil" not in sys.modules and "configuration_evil" not in sys.modules
