"""Checkpoint safety (reliability issue, item 5): checkpoints are untrusted data.

A .pth holding pickled objects is refused (weights-only loading), a wrong sha256 fails before
anything is loaded, and a config.json that asks for remote code never has it imported or run:
``trust_remote_code`` is never enabled. config.json is read through an allowlist per route, so a
key that would make timm or transformers load another file, fetch from the Hub or import code is
refused, wrapper routes (timm_wrapper) included, and attention is pinned to torch's own; an audit
hook in a fresh interpreter proves such a resolution opens, imports and fetches nothing. A build
hashes the bytes it loads, so weights swapped in place (size and mtime kept) never load. Each
checkpoint is made in a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
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


# -- issue 15: nothing in a config.json chooses another file, and a build hashes what it loads ----------------
def _save_timm_vit(directory: Path) -> Path:
    import timm
    from timm.models._hub import save_for_hf

    arguments = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3, **arguments)
    save_for_hf(model, str(directory), model_args=arguments, safe_serialization=True)
    return directory


def _save_gpt2(directory: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8)).save_pretrained(directory)
    return directory


def _edit_config(directory: Path, edit) -> None:
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("section, key", [
    ("model_args", "checkpoint_path"),
    ("model_args", "pretrained_cfg"),
    ("model_args", "pretrained"),
    ("pretrained_cfg", "file"),
    ("pretrained_cfg", "url"),
    ("pretrained_cfg", "hf_hub_id"),
    ("pretrained_cfg", "custom_load"),
])
def test_a_timm_config_key_that_would_load_another_file_is_refused(tmp_path, monkeypatch, section, key):
    directory = _save_timm_vit(tmp_path / "vit")
    other = tmp_path / "other.pth"
    torch.save({"anything": torch.zeros(1)}, other)
    value = {"checkpoint_path": str(other), "pretrained_cfg": "hf-hub:owner/other", "pretrained": True,
             "file": str(other), "url": "https://example.invalid/w.pth", "hf_hub_id": "owner/other",
             "custom_load": True}[key]
    _edit_config(directory, lambda config: config.setdefault(section, {}).__setitem__(key, value))
    loads = []
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args) or {})
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f'pretrained("{directory}", output="logits")', input_shape=("B", 3, 32, 32),
                     output_shape=("B", 3))
    assert error.value.code == "E_PRETRAINED" and f"{section}.{key}" in error.value.message
    assert f"Remove {section}.{key}" in " ".join(error.value.remedies)
    assert loads == []


@pytest.mark.parametrize("key, value", [
    ("use_pretrained_backbone", True),
    ("quantization_config", {"quant_method": "bitsandbytes", "load_in_8bit": True}),
    ("attn_implementation", "kernels-community/flash-attn"),
    ("_attn_implementation", "owner/kernel:attention"),
    ("backbone", "owner/other-model"),
])
def test_a_transformers_config_key_that_would_load_weights_or_code_is_refused(tmp_path, key, value):
    directory = _save_gpt2(tmp_path / "gpt2")
    _edit_config(directory, lambda config: config.__setitem__(key, value))
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f'pretrained("{directory}")', input_shape=("B", 8), output_shape=("B", 8, 16),
                     input_dtype="int64")
    assert error.value.code == "E_PRETRAINED" and f"sets {key}," in error.value.message


def test_built_in_attention_and_a_false_custom_load_still_resolve(tmp_path):
    gpt2 = _save_gpt2(tmp_path / "gpt2")
    _edit_config(gpt2, lambda config: config.__setitem__("attn_implementation", "eager"))
    hndl.resolve(f'pretrained("{gpt2}")', input_shape=("B", 8), output_shape=("B", 8, 16), input_dtype="int64")
    vit = _save_timm_vit(tmp_path / "vit")
    _edit_config(vit, lambda config: config["pretrained_cfg"].__setitem__("custom_load", False))
    hndl.resolve(f'pretrained("{vit}", output="logits")', input_shape=("B", 3, 32, 32), output_shape=("B", 3))


def _rewrite_in_place_keeping_size_and_mtime(path: Path) -> None:
    """Swap a weights file's tensor bytes without changing its inode, size or mtime."""
    before = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(-4, os.SEEK_END)  # the last float of the last tensor
        handle.write(bytes([0x00, 0x00, 0x80, 0x3F]))  # now 1.0
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_weights_swapped_in_place_with_size_and_mtime_kept_never_load(tmp_path):
    directory = _save_gpt2(tmp_path / "gpt2")
    contracts = dict(input_shape=("B", 8), output_shape=("B", 8, 16), input_dtype="int64")
    plan = hndl.resolve(f'pretrained("{directory}")', **contracts)
    build(plan, device="cpu")  # every cache of the pack now holds this checkpoint
    _rewrite_in_place_keeping_size_and_mtime(directory / "model.safetensors")
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu")
    assert error.value.code == "E_PRETRAINED" and "changed after resolution" in error.value.message
    with pytest.raises(HNDLError) as error:
        hndl.ResolvedPlan.from_json(plan.to_json())
    assert error.value.code == "E_CONSTRAINT" and "revision" in error.value.message


# -- issue 29: the allowlist holds for wrapper routes and attention; resolution opens, imports and fetches nothing ----
def _save_timm_wrapper(directory: Path) -> Path:
    """A transformers TimmWrapperModel around a one-block timm ViT (32x32 images, 17 tokens of 32)."""
    from transformers import TimmWrapperConfig, TimmWrapperModel

    torch.manual_seed(0)
    arguments = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2)
    TimmWrapperModel(TimmWrapperConfig(architecture="vit_tiny_patch16_224", model_args=arguments)).save_pretrained(
        directory)
    return directory


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released), so a connection is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _online_environment(tmp_path: Path) -> dict:
    """The test's environment with huggingface_hub left online (HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE
    unset) but pointed at a closed loopback port and an empty cache, so nothing reaches the internet."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HNDL_PRETRAINED_DOWNLOAD")}
    environment.update(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf-home"),
                       PYTHONNOUSERSITE="1")
    return environment


#: Runs in a fresh interpreter: resolves each benign checkpoint (every import a benign resolution of the
#: family needs happens here), then each hostile one under an audit hook, and prints what each hostile
#: resolution raised, which files it opened or listed, which modules it imported and whether it used the
#: network or started a process.
_AUDITED_RESOLUTION = textwrap.dedent("""
    import json, os, sys

    recording = None

    def audit(event, args):
        if recording is None:
            return
        if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            recording["files"].append(os.path.realpath(os.fsdecode(args[0])))
        elif event == "import":
            recording["imports"].append(str(args[0]))
        elif event.startswith(("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.system")):
            recording["effects"].append(event)

    sys.addaudithook(audit)
    import hndl

    cases = json.loads(sys.argv[1])
    for source, contracts in cases["benign"]:
        hndl.resolve(source, **contracts)
    outcomes = {}
    for name, (source, contracts) in cases["hostile"].items():
        recording = {"files": [], "imports": [], "effects": []}
        before = set(sys.modules)
        try:
            hndl.resolve(source, **contracts)
            outcome = {"code": None}
        except hndl.HNDLError as error:
            outcome = {"code": error.code, "message": error.message, "remedies": list(error.remedies)}
        outcome.update(recording, new_modules=sorted(set(sys.modules) - before))
        recording = None
        outcomes[name] = outcome
    print(json.dumps(outcomes))
""")


def _copy_with_config(source: Path, target: Path, edit) -> Path:
    shutil.copytree(source, target)
    _edit_config(target, edit)
    return target


def test_hostile_configs_are_refused_by_the_allowlist_and_resolution_opens_imports_and_fetches_nothing(tmp_path):
    """Issue 29 items 1-3, on a fresh interpreter with the Hub left online (at a closed port):
    timm_wrapper with model_args.checkpoint_path (torch.load of an outside .pth), with architecture
    local-dir:<dir> (another directory's config.json) or hf-hub:timm/resnet18.a1_in1k (the Hub), and
    attn_implementation flash_attention_2 (the kernels package fetching kernels-community/flash-attn2)
    are each E_PRETRAINED naming the key, and the resolution opens no file outside the checkpoint,
    imports no module a benign resolution of the family did not, and makes no connection."""
    wrapper = _save_timm_wrapper(tmp_path / "wrapper")
    gpt2 = _save_gpt2(tmp_path / "gpt2")
    outside = tmp_path / "outside.pth"
    torch.save({"planted_tensor_name": torch.zeros(1)}, outside)
    other = _save_timm_vit(tmp_path / "other")
    image = dict(input_shape=["B", 3, 32, 32], output_shape=["B", 17, 32])
    text = dict(input_shape=["B", 8], output_shape=["B", 8, 16], input_dtype="int64")
    hostile = {
        "model_args.checkpoint_path": (wrapper, image, lambda c: c["model_args"].__setitem__("checkpoint_path",
                                                                                              str(outside))),
        "architecture@local-dir": (wrapper, image, lambda c: c.__setitem__("architecture", f"local-dir:{other}")),
        "architecture@hf-hub": (wrapper, image,
                                lambda c: c.__setitem__("architecture", "hf-hub:timm/resnet18.a1_in1k")),
        "attn_implementation": (gpt2, text, lambda c: c.__setitem__("attn_implementation", "flash_attention_2")),
    }
    directories, cases = {}, {"benign": [[f'pretrained("{wrapper}")', image], [f'pretrained("{gpt2}")', text]],
                              "hostile": {}}
    for index, (name, (family, contracts, edit)) in enumerate(hostile.items()):
        directories[name] = _copy_with_config(family, tmp_path / f"case{index}", edit)
        cases["hostile"][name] = [f'pretrained("{directories[name]}")', contracts]
    done = subprocess.run([sys.executable, "-c", _AUDITED_RESOLUTION, json.dumps(cases)], capture_output=True,
                          text=True, cwd=tmp_path, env=_online_environment(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    for name, outcome in outcomes.items():
        key = name.partition("@")[0]
        assert outcome["code"] == "E_PRETRAINED", (name, outcome)
        assert f"sets {key}," in outcome["message"] and any(key in remedy for remedy in outcome["remedies"]), outcome
        assert "planted_tensor_name" not in outcome["message"] and "Error" not in outcome["message"], outcome
        inside = os.path.realpath(directories[name])
        assert [path for path in outcome["files"] if not path.startswith(inside + os.sep)] == [], (name, outcome)
        assert outcome["new_modules"] == [] and outcome["imports"] == [], (name, outcome)
        assert outcome["effects"] == [], (name, outcome)


@pytest.mark.parametrize("value", ["flash_attention_2", "flex_attention", "paged|sdpa",
                                   "kernels-community/flash-attn2"])
def test_attention_other_than_torchs_own_is_refused(tmp_path, value):
    directory = _save_gpt2(tmp_path / "gpt2")
    _edit_config(directory, lambda config: config.__setitem__("attn_implementation", value))
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f'pretrained("{directory}")', input_shape=("B", 8), output_shape=("B", 8, 16),
                     input_dtype="int64")
    assert error.value.code == "E_PRETRAINED" and "sets attn_implementation," in error.value.message
    assert "Remove attn_implementation" in " ".join(error.value.remedies)


@pytest.mark.parametrize("requested, pinned", [(None, "sdpa"), ("eager", "eager"), ("sdpa", "sdpa")])
def test_attention_is_pinned_to_torchs_own_when_built(tmp_path, requested, pinned):
    directory = _save_gpt2(tmp_path / "gpt2")
    if requested:
        _edit_config(directory, lambda config: config.__setitem__("attn_implementation", requested))
    plan = hndl.resolve(f'pretrained("{directory}")', input_shape=("B", 8), output_shape=("B", 8, 16),
                        input_dtype="int64")
    model = build(plan, device="cpu")
    chosen = {module.config._attn_implementation for module in model.modules()
              if hasattr(getattr(module, "config", None), "_attn_implementation")}
    assert chosen == {pinned}


def test_a_timm_wrapper_checkpoint_resolves_and_builds_through_the_timm_checks(tmp_path):
    """The wrapper route works (its native input comes from timm, as for a timm checkpoint) and its
    model_args go through the timm route's allowlist: a key no ViT class takes is refused."""
    directory = _save_timm_wrapper(tmp_path / "wrapper")
    plan = hndl.resolve(f'pretrained("{directory}", output="pooled")', input_shape=("B", 3, 32, 32),
                        output_shape=("B", 32))
    model = build(plan, device="cpu")
    assert model(x=torch.zeros(2, 3, 32, 32))["output"].shape == (2, 32)
    _edit_config(directory, lambda config: config["model_args"].__setitem__("cache_dir", str(tmp_path)))
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f'pretrained("{directory}", output="pooled")', input_shape=("B", 3, 32, 32),
                     output_shape=("B", 32))
    assert error.value.code == "E_PRETRAINED" and "sets model_args.cache_dir," in error.value.message
