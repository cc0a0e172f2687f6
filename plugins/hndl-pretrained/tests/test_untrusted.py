"""Bad input, second pass (issue 15): a pretrained source string and the files it names are
untrusted data. A path is the host's literal path (no ``~`` expansion), Hub names follow the
Hub's own rules and never climb out of the cache, malformed config.json fields are E_PRETRAINED,
and resolution is bounded by the node's limits before any large file is hashed or any large
architecture is built."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.persist import canonical
from hndl.torch import build
from hndl_pretrained import sources
from hndl_pretrained.sources import parse_source

TEXT = dict(input_shape=("B", 8), output_shape=("B", 8, 32), input_dtype="int64")
IMAGE = dict(input_shape=("B", 3, 64, 64), output_shape=("B", 5))


def _fails(call) -> HNDLError:
    with pytest.raises(HNDLError) as error:
        call()
    return error.value


def resign(record: dict) -> str:
    """Both digests recomputed as §10 defines them, so a tampered plan reaches revalidation."""
    semantic = {key: value for key, value in record.items() if key not in ("frontend", "digests")}
    semantic["nodes"] = [{key: value for key, value in node.items() if key not in ("source", "provenance")}
                         for node in record["nodes"]]
    record["digests"] = {"semantic": "sha256:" + hashlib.sha256(canonical(semantic)).hexdigest()}
    record["digests"]["artifact"] = "sha256:" + hashlib.sha256(canonical(record)).hexdigest()
    return canonical(record).decode("utf-8")


# -- which files a call opens (audit events of the calling thread only) ---------------------------------------
_OPENED: dict[int, list] = {}


def _record(event: str, args: tuple, _opened=_OPENED, _ident=threading.get_ident) -> None:
    paths = _opened.get(_ident())
    if paths is not None and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str):
        paths.append(args[0])


sys.addaudithook(_record)  # inert outside opened()


@contextmanager
def opened():
    """The paths this thread opens or lists inside the block."""
    paths: list = []
    _OPENED[threading.get_ident()] = paths
    try:
        yield paths
    finally:
        _OPENED.pop(threading.get_ident(), None)


def _code_file(path: str) -> bool:
    """Python lazily importing library code or data (transformers, timm): not a file the source chose."""
    real = os.path.realpath(path)
    roots = {os.path.realpath(root) for root in (sys.prefix, sys.base_prefix, *sys.path) if root}
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots
               if os.path.isdir(root) and root != os.path.realpath(os.getcwd()))


def _hub_credentials(path: str) -> bool:
    """huggingface_hub reading the host's own token file for any hub lookup: one fixed file the
    host's environment names, whatever the source says."""
    from huggingface_hub import constants

    return os.path.realpath(path) == os.path.realpath(constants.HF_TOKEN_PATH)


# -- item 3: no ~ expansion -------------------------------------------------------------------------------------------
def test_a_tilde_source_is_the_hosts_literal_path_never_a_home_directory(tmp_path, monkeypatch, gpt2_dir, kit):
    home = tmp_path / "home"
    kit.copy_checkpoint(gpt2_dir, home / "ckpt")
    monkeypatch.setenv("HOME", str(home))  # expanding ~ would find a checkpoint here
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    for source in ("~nosuchuser/ckpt", "~/ckpt"):
        error = _fails(lambda: hndl.resolve(f'pretrained("{source}")', **TEXT))
        assert error.code == "E_PRETRAINED" and error.location.field == "source" and error.location.node == "n0"
        assert repr(source) in error.message and "does not exist" in error.message
    kit.copy_checkpoint(gpt2_dir, workdir / "~" / "ckpt")  # a directory literally named ~
    plan = hndl.resolve('pretrained("~/ckpt")', **TEXT)
    assert plan.nodes[0].args["source"] == "~/ckpt"


def test_a_re_signed_plan_with_a_tilde_source_fails_restoration_with_e_pretrained(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    record = json.loads(hndl.resolve(f'pretrained("{copy}")', **TEXT).to_json())
    record["nodes"][0]["args"]["source"] = "~nosuchuser/ckpt"
    error = _fails(lambda: hndl.ResolvedPlan.from_json(resign(record)))
    assert error.code == "E_PRETRAINED" and error.location.node == "n0"
    assert "'~nosuchuser/ckpt' does not exist" in error.message


# -- item 4: the config.json fields HNDL reads are validated ---------------------------------------------------------
@pytest.mark.parametrize("section, key, value", [
    ("pretrained_cfg", "input_size", 5),
    ("pretrained_cfg", "input_size", [3, "64", 64]),
    ("pretrained_cfg", "input_size", [3, 64]),
    ("pretrained_cfg", "fixed_input_size", "yes"),
    ("model_args", "in_chans", "3"),
    ("model_args", "img_size", [1.5, 2]),
    ("", "num_classes", -1),
])
def test_a_malformed_timm_field_is_e_pretrained_naming_the_field(tmp_path, resnet_dir, kit, section, key, value):
    copy = kit.copy_checkpoint(resnet_dir, tmp_path / "timm")
    config = kit.config_of(copy)
    (config.setdefault(section, {}) if section else config)[key] = value
    (copy / "config.json").write_text(json.dumps(config))
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}")', **IMAGE))
    assert error.code == "E_PRETRAINED" and error.location.node == "n0"
    assert f"{section + '.' if section else ''}{key}" in error.message and "must be" in error.message


def test_architectures_that_are_not_a_list_of_names_are_e_pretrained(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    config = kit.config_of(copy)
    config["architectures"] = 5
    (copy / "config.json").write_text(json.dumps(config))
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}", output="logits")', **{**TEXT, "output_shape": ("B", 8, 64)}))
    assert error.code == "E_PRETRAINED" and "architectures" in error.message


# -- issue 29: config.json is read through an allowlist per route ----------------------------------------------------
def _edited(tmp_path: Path, checkpoint: Path, kit, edit) -> Path:
    copy = kit.copy_checkpoint(checkpoint, tmp_path / "edited")
    config = kit.config_of(copy)
    edit(config)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


@pytest.mark.parametrize("fixture, key, edit, contracts", [
    ("gpt2_dir", "planted", lambda c: c.__setitem__("planted", 1), TEXT),
    ("gpt2_dir", "pruned_heads", lambda c: c.__setitem__("pruned_heads", {"0": [1]}), TEXT),
    ("gpt2_dir", "experts_implementation", lambda c: c.__setitem__("experts_implementation", "grouped_mm"), TEXT),
    ("clip_dir", "text_config.planted", lambda c: c["text_config"].__setitem__("planted", True),
     dict(input_shape=("B", 8), output_shape=("B", 8, 32), input_dtype="int64")),
    ("resnet_dir", "planted", lambda c: c.__setitem__("planted", 1), IMAGE),
    ("resnet_dir", "pretrained_cfg.planted", lambda c: c["pretrained_cfg"].__setitem__("planted", 1), IMAGE),
    ("resnet_dir", "model_args.device", lambda c: c["model_args"].__setitem__("device", "cpu"), IMAGE),
    ("resnet_dir", "model_args.pruned", lambda c: c["model_args"].__setitem__("pruned", True), IMAGE),
])
def test_a_config_key_outside_the_routes_allowlist_is_refused_naming_it(tmp_path, request, kit, fixture, key, edit,
                                                                          contracts):
    """Keys a route does not read are refused, not only keys known to load something (model_args.device
    would even build the model on a real device during resolution)."""
    copy = _edited(tmp_path, request.getfixturevalue(fixture), kit, edit)
    component = ', component="text"' if fixture == "clip_dir" else ""
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}"{component})', **contracts))
    assert error.code == "E_PRETRAINED" and error.location.node == "n0"
    assert f"sets {key}," in error.message and f"Remove {key} from config.json." in error.remedies


def test_metadata_keys_are_tolerated_and_never_reach_transformers(tmp_path, gpt2_dir, kit):
    copy = _edited(tmp_path, gpt2_dir, kit, lambda c: c.update(
        auto_map={"AutoModel": "modeling_x.X"}, task_specific_params={"text-generation": {"max_length": 50}},
        max_length=20, num_beams=4, tokenizer_class="GPT2Tokenizer", _name_or_path="elsewhere", torchscript=True,
        n_ctx=16, pruned_heads={}, quantization_config=None))
    plan = hndl.resolve(f'pretrained("{copy}")', **TEXT)
    model = build(plan, device="cpu")
    config = next(module.config for module in model.modules() if hasattr(module, "config"))
    dropped = ("auto_map", "task_specific_params", "tokenizer_class", "torchscript", "n_ctx", "quantization_config")
    assert not any(hasattr(config, key) for key in dropped)
    assert config.name_or_path != "elsewhere"


#: What transformers 4.x saved into every configuration (here into each CLIP tower, as openai's CLIP
#: checkpoints on the Hub carry it), beside the top-level text_config_dict/vision_config_dict: null.
LEGACY_TOWER_KEYS = dict(
    _name_or_path="", add_cross_attention=False, architectures=None, bad_words_ids=None, chunk_size_feed_forward=0,
    cross_attention_hidden_size=None, decoder_start_token_id=None, diversity_penalty=0.0, do_sample=False,
    dropout=0.0, early_stopping=False, encoder_no_repeat_ngram_size=0, finetuning_task=None,
    forced_bos_token_id=None, forced_eos_token_id=None, id2label={"0": "LABEL_0", "1": "LABEL_1"},
    is_decoder=False, is_encoder_decoder=False, label2id={"LABEL_0": 0, "LABEL_1": 1}, length_penalty=1.0,
    max_length=20, min_length=0, no_repeat_ngram_size=0, num_beam_groups=1, num_beams=1, num_return_sequences=1,
    output_attentions=False, output_hidden_states=False, output_scores=False, prefix=None, problem_type=None,
    pruned_heads={}, remove_invalid_values=False, repetition_penalty=1.0, return_dict=True,
    return_dict_in_generate=False, sep_token_id=None, task_specific_params=None, temperature=1.0,
    tie_encoder_decoder=False, tie_word_embeddings=True, tokenizer_class=None, top_k=50, top_p=1.0,
    torch_dtype=None, torchscript=False, transformers_version="4.16.0.dev0", use_bfloat16=False)


def test_a_configuration_saved_by_transformers_4_still_resolves(tmp_path, clip_dir, kit):
    def legacy(config: dict) -> None:
        for tower in ("text_config", "vision_config"):
            config[tower] = {**LEGACY_TOWER_KEYS, **config[tower]}
        config.update(text_config_dict=None, vision_config_dict=None, transformers_version=None)

    copy = _edited(tmp_path, clip_dir, kit, legacy)
    plan = hndl.resolve(f'pretrained("{copy}", component="vision", output="embeds")', input_shape=("B", 3, 16, 16),
                        output_shape=("B", 24))
    assert plan.nodes[0].output_shapes == {"out": ("B", 24)}


@pytest.mark.parametrize("architecture", ["hf-hub:timm/resnet18.a1_in1k", "local-dir:/tmp", "timm/resnet18"])
def test_a_timm_backbone_names_a_bare_timm_architecture(architecture):
    from transformers import TimmBackboneConfig

    from hndl_pretrained.libraries import transformers_config

    assert transformers_config({"backbone": "resnet18"}, TimmBackboneConfig, "'x'") == {"backbone": "resnet18"}
    error = _fails(lambda: transformers_config({"backbone": architecture}, TimmBackboneConfig, "'x'"))
    assert error.code == "E_PRETRAINED" and "sets backbone," in error.message and "timm model source" in error.message


# -- item 11: Hub names by the Hub's rules; every cache path stays in the cache ----------------------------------------
@pytest.mark.parametrize("source", [
    "hf://owner/repo@pr/../../x", "hf://owner/repo@..", "hf://owner/repo@a/../b", "hf://owner/repo@/etc/passwd",
    "hf://owner/repo@a//b", "hf://owner/repo@a/", "hf://owner/repo@.hidden", "hf://owner/repo@main.lock",
    "hf://../repo", "hf://owner/..", "hf://owner/re..po", "hf://owner/a--b", "hf://owner/repo-", "hf://owner/.repo",
    "hf://" + "a" * 50 + "/" + "b" * 50, "hf://owner/repo/extra", "hf://owner/repo@" + "r" * 256,
])
def test_a_hub_name_outside_the_hubs_rules_is_refused_before_anything_is_read(source):
    error = _fails(lambda: parse_source(source))
    assert error.code == "E_PRETRAINED" and error.location.field == "source"
    assert any("'..'" in remedy for remedy in error.remedies)


def test_the_hubs_own_names_still_parse():
    for source, repo, ref in [("hf://owner/repo@refs/pr/1", "owner/repo", "refs/pr/1"),
                              ("hf://Org-1/model.v2_x@v1.0-rc", "Org-1/model.v2_x", "v1.0-rc"),
                              ("hf://o/r@" + "c" * 40, "o/r", "c" * 40)]:
        parsed = parse_source(source)
        assert (parsed.repo, parsed.ref) == (repo, ref)


def test_a_dotdot_revision_never_opens_a_file_beside_the_cache(hub_cache, gpt2_dir, kit):
    hub_cache.add("owner/repo", kit.COMMIT_A, gpt2_dir, weights=False)
    hub_cache.add("owner/repo", kit.COMMIT_B, gpt2_dir, weights=False, branch="other")
    (hub_cache.repo("owner/repo") / "refs" / "pr").mkdir()
    beside = hub_cache.root / "secret.txt"  # refs/pr/../../../secret.txt
    beside.write_text(kit.COMMIT_B)  # reads like a ref, so an unchecked revision would resolve
    with opened() as paths:
        error = _fails(lambda: hndl.resolve('pretrained("hf://owner/repo@pr/../../../secret.txt")', **TEXT))
    assert error.code == "E_PRETRAINED" and error.location.field == "source" and "malformed revision" in error.message
    assert not any(os.path.realpath(path) == str(beside.resolve()) for path in paths)


def test_a_snapshot_file_linked_outside_the_cache_is_refused(hub_cache, tmp_path, gpt2_dir, kit):
    snapshot = hub_cache.add("owner/repo", kit.COMMIT_A, gpt2_dir, weights=False)
    outside = kit.copy_checkpoint(gpt2_dir, tmp_path / "outside")
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(outside / "config.json")
    error = _fails(lambda: hndl.resolve('pretrained("hf://owner/repo")', **TEXT))
    assert error.code == "E_PRETRAINED" and "not inside a commit snapshot" in error.message
    assert str(outside) not in error.message


# -- item 17: resolution is bounded by the node's limits -----------------------------------------------------------------
def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def test_an_8_gib_sparse_pth_is_refused_by_its_size_before_hashing(tmp_path, registry, kit):
    path = _sparse(tmp_path / "huge.pth", 8 * 2**30)
    started = time.perf_counter()
    error = _fails(lambda: hndl.resolve(kit.net_source(path, "0" * 64), input_shape=("B", 3, 8, 8),
                                        output_shape=("B", 5), registry=registry, limits={"max_state_bytes": 2**20}))
    seconds = time.perf_counter() - started
    assert error.code == "E_RESOURCE" and error.location.node == "n0"
    assert "max_state_bytes=1048576" in error.message and "nothing was hashed" in error.message
    assert seconds < 5.0  # hashing 8 GiB takes several seconds; a stat takes microseconds


def test_sparse_safetensors_weights_are_refused_by_their_size(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    _sparse(copy / "model.safetensors", 8 * 2**30)
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}")', **TEXT, limits={"max_state_bytes": 2**20}))
    assert error.code == "E_RESOURCE" and "max_state_bytes" in error.message


def _deep_gpt2(tmp_path: Path, gpt2_dir: Path, kit, **changes) -> Path:
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "deep")
    config = kit.config_of(copy)
    config.update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


# -- issue 29 item 7: weights far larger than their architecture are refused by size, with the default limits -------
@pytest.fixture
def never_hashed(monkeypatch) -> list:
    """Records (and short-cuts) every digest resolution asks for: a refusal by size leaves it empty."""
    hashed: list = []
    monkeypatch.setattr(sources, "file_digest", lambda path, what="file": hashed.append(Path(path).name) or "0" * 64)
    return hashed


@pytest.mark.parametrize("gib", [8, 60])
def test_sparse_safetensors_far_larger_than_the_architecture_are_refused_before_hashing(tmp_path, gpt2_dir, kit,
                                                                                        never_hashed, gib):
    """A small config.json beside a sparse model.safetensors of 8 or 60 GiB, default limits: its GPT-2
    registers about 100 KB, so the file is refused by its size (before: hashed whole, 50 s for 8 GiB)."""
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    _sparse(copy / "model.safetensors", gib * 2**30)
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}")', **TEXT))
    assert error.code == "E_PRETRAINED" and error.location.node == "n0" and error.location.field == "source"
    assert f"are {gib * 2**30} bytes on disk" in error.message and "nothing was hashed" in error.message
    assert never_hashed == []


def test_a_sparse_pth_far_larger_than_the_providers_model_is_refused_before_hashing(tmp_path, registry, kit,
                                                                                   never_hashed):
    path = _sparse(tmp_path / "huge.pth", 8 * 2**30)
    error = _fails(lambda: hndl.resolve(kit.net_source(path, "0" * 64), input_shape=("B", 3, 8, 8),
                                        output_shape=("B", 5), registry=registry))
    assert error.code == "E_PRETRAINED" and "nothing was hashed" in error.message and never_hashed == []


def test_weights_swapped_for_a_far_larger_file_after_resolution_are_refused_unread(tmp_path, gpt2_dir, kit):
    """The build and the restoration check the size against the architecture too, before reading a byte."""
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    plan = hndl.resolve(f'pretrained("{copy}")', **TEXT)
    _sparse(copy / "model.safetensors", 256 * 2**20)
    for call in (lambda: build(plan, device="cpu"), lambda: hndl.ResolvedPlan.from_json(plan.to_json())):
        error = _fails(call)
        assert error.code == "E_PRETRAINED" and "nothing was hashed" in error.message


def test_weights_stored_at_twice_the_float32_state_still_fit(tmp_path, registry, net_reference, kit):
    """The size rule leaves room for float64 copies (or a head the node does not build)."""
    path = tmp_path / "net64.pth"
    torch.save({key: value.double() for key, value in net_reference.state_dict().items()}, path)
    plan = hndl.resolve(kit.net_source(path, kit.sha256_of(path)), input_shape=("B", 3, 8, 8), output_shape=("B", 5),
                        registry=registry)
    model = build(plan, device="cpu", registry=registry)
    expected = net_reference(torch.ones(2, 3, 8, 8))
    assert torch.allclose(model(x=torch.ones(2, 3, 8, 8))["output"], expected, atol=1e-6)


def test_too_many_layers_stop_construction_at_max_node_modules(tmp_path, gpt2_dir, kit):
    copy = _deep_gpt2(tmp_path, gpt2_dir, kit, n_layer=2000)
    started = time.perf_counter()
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}")', **TEXT, limits={"max_node_modules": 100}))
    seconds = time.perf_counter() - started
    assert error.code == "E_RESOURCE" and error.location.node == "n0"
    assert "max_node_modules=100" in error.message and "stopped at submodule 101," in error.message
    assert seconds < 30.0  # stopped after about 10 of the 2000 layers (building them all takes far longer)
    nn.Sequential(*[nn.Identity() for _ in range(500)])  # the registration hooks are gone again


def test_too_large_a_state_stops_construction_at_max_state_bytes(tmp_path, gpt2_dir, kit):
    copy = _deep_gpt2(tmp_path, gpt2_dir, kit, vocab_size=2**20)  # a 128 MiB token embedding
    error = _fails(lambda: hndl.resolve(f'pretrained("{copy}")', **TEXT, limits={"max_state_bytes": 2**24}))
    assert error.code == "E_RESOURCE" and error.location.node == "n0" and "max_state_bytes=16777216" in error.message


class Wide(nn.Module):
    def __init__(self, count: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(count))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(x)


def test_a_providers_model_is_bounded_too_and_other_threads_are_not_counted(tmp_path, registry):
    path = tmp_path / "wide.pth"
    torch.save(Wide(3).state_dict(), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    outcome = {}

    def other_thread_builds_many() -> None:
        try:
            outcome["module"] = nn.Sequential(*[nn.Identity() for _ in range(200)])
        except Exception as error:  # would mean the hook counted another thread's modules
            outcome["error"] = error

    def build() -> nn.Module:
        worker = threading.Thread(target=other_thread_builds_many)
        worker.start()
        worker.join()
        return Wide(3)

    registry.pretrained_provider("wide", build)
    registry.pretrained_provider("wider", lambda: Wide(200))
    source = f'pretrained("{path}", provider="{{}}", sha256="{digest}")'
    contracts = dict(input_shape=("B", 4), output_shape=("B", 3), registry=registry, limits={"max_node_modules": 50})
    assert hndl.resolve(source.format("wide"), **contracts).nodes[0].output_shapes == {"out": ("B", 3)}
    assert "error" not in outcome and len(outcome["module"]) == 200
    error = _fails(lambda: hndl.resolve(source.format("wider"), **contracts))
    assert error.code == "E_RESOURCE" and "max_node_modules=50" in error.message


def test_memory_error_in_a_meta_trace_propagates(tmp_path, registry):
    path = tmp_path / "tiny.pth"
    torch.save(Wide(1).state_dict(), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()

    def exhausted() -> nn.Module:
        raise MemoryError("out of memory while building")

    registry.pretrained_provider("exhausted", exhausted)
    with pytest.raises(MemoryError):
        hndl.resolve(f'pretrained("{path}", provider="exhausted", sha256="{digest}")', input_shape=("B", 4),
                     output_shape=("B", 3), registry=registry)


# -- path-like strings join the fuzz families ---------------------------------------------------------------------------
_PIECES = ("..", ".", "~", "~root", "~nosuchuser", "", "gpt2", "config.json", "model.safetensors", "x.pth",
           "\0", "a" * 300, "\u202e", "\udcff", "é", "\U0001f600", "CON", "con.safetensors", "hf:", "//")


def _path_like(root: str) -> st.SearchStrategy[str]:
    parts = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), min_size=1, max_size=6)
    joined = parts.map("/".join)
    return st.one_of(
        joined,                                                      # relative to the working directory
        joined.map(lambda tail: f"{root}/{tail}"),                   # under the temp root
        st.sampled_from(["/", "//", "/etc/passwd", "/dev/zero", "/proc/self/environ", "/nonexistent-hndl",
                         "~", "~/", "a" * 5000, "/" + "a/" * 3000, "hf://" + "a/" * 3000, f"{root}/gpt2",
                         f"{root}/./gpt2//"]),
        joined.map(lambda tail: f"hf://owner/repo@{tail}"),
        joined.map(lambda tail: f"hf://{tail}"),
    )


@pytest.fixture
def fuzz_roots(tmp_path_factory, gpt2_dir, kit, hub_cache, monkeypatch):
    """A checkpoint under a deep temp root (two '..' stay inside it) and a working directory beside it."""
    root = tmp_path_factory.mktemp("fuzz") / "a" / "b" / "c"
    kit.copy_checkpoint(gpt2_dir, root / "gpt2")
    hub_cache.add("owner/repo", kit.COMMIT_A, gpt2_dir, weights=False)
    workdir = root / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return root, hub_cache.root


#: Examples per run of the path-like target: the normal suite's count and the long profile's
#: (``pytest -m fuzz``), the same two counts as tests/reliability/conftest.py.
NORMAL_EXAMPLES, FUZZ_EXAMPLES = 60, 5000


def _check_path_like_sources(fuzz_roots, examples: int) -> None:
    """Sources reach the operator through a captured call, so strings no configuration text can
    hold (lone surrogates) reach it too."""
    root, hub_root = fuzz_roots
    allowed = (os.path.realpath(root.parent.parent), os.path.realpath(hub_root))
    registry = Registry.builtins()

    @settings(max_examples=examples, deadline=None, database=None)
    @given(source=_path_like(str(root)))
    def check(source: str) -> None:
        with opened() as paths:
            try:
                hndl.resolve_callable(lambda x: registry.ops.pretrained(x, source), registry=registry, **TEXT)
            except HNDLError as error:
                assert error.code in ("E_PRETRAINED", "E_SCHEMA", "E_ARGUMENT"), error
                assert len(error.message) < 2_000
        outside = [path for path in paths if not os.path.realpath(path).startswith(allowed)
                   and not _code_file(path) and not _hub_credentials(path)]
        assert outside == [], f"{source!r} opened {outside[:3]}"

    check()


def test_path_like_sources_resolve_or_fail_with_a_source_code_and_open_nothing_outside(fuzz_roots):
    _check_path_like_sources(fuzz_roots, NORMAL_EXAMPLES)


@pytest.mark.fuzz
def test_fuzz_path_like_sources(fuzz_roots):
    _check_path_like_sources(fuzz_roots, FUZZ_EXAMPLES)


def test_security_md_lists_every_explicit_config_key():
    """SECURITY.md's table of the config.json keys each route reads names every key the pack lists
    explicitly (the keys derived from the libraries' own classes are described there by rule)."""
    from hndl_pretrained import libraries

    security = (Path(__file__).resolve().parents[3] / "SECURITY.md").read_text(encoding="utf-8")
    table = security[security.index("| Route | config.json keys read |"):]
    table = table[:table.index("\n\n")]
    for key in (*libraries.TIMM_KEYS, *libraries.TIMM_WEIGHT_LOCATIONS, *libraries.TIMM_LOADER_ARGUMENTS,
                *libraries.TORCH_ATTENTION, *libraries.TRANSFORMERS_GENERIC, *libraries.TRANSFORMERS_METADATA):
        assert f"`{key}`" in table, key
