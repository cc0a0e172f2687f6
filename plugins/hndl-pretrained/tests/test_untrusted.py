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


def test_security_md_lists_every_refused_config_key():
    """SECURITY.md's table of refused config.json keys is the pack's list, key for key."""
    from hndl_pretrained.libraries import TIMM_REFUSED, TRANSFORMERS_REFUSED

    security = (Path(__file__).resolve().parents[3] / "SECURITY.md").read_text(encoding="utf-8")
    table = security[security.index("| Library | Refused keys |"):]
    for key in (*TIMM_REFUSED, *TRANSFORMERS_REFUSED):
        assert f"`{key}`" in table, key
