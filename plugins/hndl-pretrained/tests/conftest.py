"""Tiny checkpoints made from config objects in temporary directories; nothing is downloaded.

Session-scoped checkpoints are shared read-only; a test that changes files copies one into its
own ``tmp_path`` first (``copy_checkpoint``). The Hugging Face cache is laid out by hand
(``hub_cache``) and huggingface_hub runs offline (the root conftest sets HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from hndl import Registry

TEXT = dict(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
BERT = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37, vocab_size=64,
            max_position_embeddings=16, pad_token_id=0)
VIT = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37, image_size=16,
           patch_size=8)


def _seeded(build):
    state = torch.get_rng_state()
    torch.manual_seed(0)
    try:
        return build()
    finally:
        torch.set_rng_state(state)


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    """A GPT-2 language model (its head is tied to the token embedding)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    directory = tmp_path_factory.mktemp("gpt2")
    _seeded(lambda: GPT2LMHeadModel(GPT2Config(**TEXT))).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory) -> Path:
    """A BERT base model: hidden states and a pooler, no head."""
    from transformers import BertConfig, BertModel

    directory = tmp_path_factory.mktemp("bert")
    _seeded(lambda: BertModel(BertConfig(**BERT))).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory) -> Path:
    """A ViT image model at a native 16x16 resolution (patches of 8: 4 patches plus the class token)."""
    from transformers import ViTConfig, ViTModel

    directory = tmp_path_factory.mktemp("vit")
    _seeded(lambda: ViTModel(ViTConfig(**VIT))).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory) -> Path:
    """A dual-encoder CLIP: 32-wide towers projected to 24."""
    from transformers import CLIPConfig, CLIPModel

    directory = tmp_path_factory.mktemp("clip")
    config = CLIPConfig(
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                         vocab_size=64, max_position_embeddings=16),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                           image_size=16, patch_size=8),
        projection_dim=24,
    )
    _seeded(lambda: CLIPModel(config)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def resnet_dir(tmp_path_factory) -> Path:
    """A timm ResNet-18 with 5 classes whose native resolution is 64x64, saved in timm's hub format."""
    import timm
    from timm.models._hub import save_for_hf

    directory = tmp_path_factory.mktemp("resnet")
    model = _seeded(lambda: timm.create_model("resnet18", pretrained=False, num_classes=5,
                                              pretrained_cfg_overlay=dict(input_size=(3, 64, 64))))
    save_for_hf(model, str(directory), safe_serialization=True)
    return directory


@pytest.fixture(scope="session")
def timm_vit_dir(tmp_path_factory) -> Path:
    """A one-block timm ViT at 32x32 (patches of 8: 16 patches plus the class token), 3 classes."""
    import timm
    from timm.models._hub import save_for_hf

    directory = tmp_path_factory.mktemp("timm_vit")
    arguments = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2)
    model = _seeded(lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3, **arguments))
    save_for_hf(model, str(directory), model_args=arguments, safe_serialization=True)
    return directory


def copy_checkpoint(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


# -- a host-registered provider ---------------------------------------------------------------------------------
class InplaceTanh(nn.Module):
    """An in-place activation: it overwrites its input, as nn.ReLU(inplace=True) does."""

    def forward(self, x):
        return x.tanh_()


class Net(nn.Module):
    """A small conv net whose activations run in place (they overwrite the previous output)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.act1 = InplaceTanh()
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.act2 = InplaceTanh()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.act2(self.conv2(self.act1(self.conv1(x)))))))


class Twice(nn.Module):
    """Runs its block two times: its output is ambiguous as a layer."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(self.block(x)))


def make_net() -> Net:
    return Net()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def net_reference() -> Net:
    return _seeded(Net).eval()


@pytest.fixture
def net_pth(tmp_path, net_reference) -> tuple[Path, str]:
    """The reference Net's state dict as a .pth, with its SHA-256."""
    path = tmp_path / "net.pth"
    torch.save(net_reference.state_dict(), path)
    return path, sha256_of(path)


@pytest.fixture
def registry() -> Registry:
    """A built-in registry with the Net provider and its readouts registered."""
    registry = Registry.builtins()
    registry.pretrained_provider("net", make_net, readouts={
        "pooled": lambda model, x: model.flatten(model.pool(model.act2(model.conv2(model.act1(model.conv1(x)))))),
    })
    registry.pretrained_readout("net", "pair", lambda model, x: (model(x), model(x)))
    registry.pretrained_provider("twice", Twice)
    return registry


def net_source(path: Path, sha: str, extra: str = "") -> str:
    return f'pretrained("{path}", provider="net", sha256="{sha}"{extra})'


# -- the Hugging Face cache, by hand ----------------------------------------------------------------------------
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40


class HubCache:
    """A huggingface_hub cache directory laid out by hand: refs/<branch> and snapshots/<commit>/."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def repo(self, repo_id: str) -> Path:
        return self.root / ("models--" + repo_id.replace("/", "--"))

    def add(self, repo_id: str, commit: str, checkpoint: Path, *, weights: bool = True, branch: str = "main") -> Path:
        snapshot = self.repo(repo_id) / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for item in Path(checkpoint).iterdir():
            if item.name == "config.json" or (weights and item.suffix == ".safetensors"):
                shutil.copy(item, snapshot / item.name)
        self.point(repo_id, branch, commit)
        return snapshot

    def point(self, repo_id: str, branch: str, commit: str) -> None:
        refs = self.repo(repo_id) / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / branch).write_text(commit)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> HubCache:
    import huggingface_hub

    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    assert huggingface_hub.constants.HF_HUB_OFFLINE
    return HubCache(root)


# -- effects of resolution ----------------------------------------------------------------------------------------
class MetaOnly(TorchDispatchMode):
    """Records every tensor operation; resolution may only ever produce meta tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.real: list[str] = []
        self.operations = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.operations += 1
        for value in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(value, torch.Tensor) and value.device.type != "meta":
                self.real.append(str(func))
        return result


class NoEffects:
    """Asserts that a block allocated no real tensor and drew no random number."""

    def __enter__(self):
        self.torch_rng = torch.get_rng_state()
        self.python_rng = random.getstate()
        self.mode = MetaOnly().__enter__()
        return self.mode

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        if exc[0] is None:
            assert self.mode.real == [], f"resolution produced real tensors: {self.mode.real[:5]}"
            assert torch.equal(torch.get_rng_state(), self.torch_rng), "resolution drew from torch's RNG"
            assert random.getstate() == self.python_rng, "resolution drew from Python's RNG"
        return False


def config_of(directory: Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())


@pytest.fixture(scope="session")
def kit():
    """The helpers above, for test modules (conftest is not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        copy_checkpoint=copy_checkpoint, net_source=net_source, sha256_of=sha256_of, NoEffects=NoEffects,
        config_of=config_of, Net=Net, Twice=Twice, InplaceTanh=InplaceTanh, make_net=make_net,
        COMMIT_A=COMMIT_A, COMMIT_B=COMMIT_B, seeded=_seeded,
    )
