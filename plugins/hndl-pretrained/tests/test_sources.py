"""Sources: the four source forms, what each requires, revisions, the Hub cache, missing dependencies."""

import sys

import pytest

import hndl
from hndl import HNDLError, Registry
from hndl_pretrained.sources import current_revision, parse_source, read_config


def _code(call):
    with pytest.raises(HNDLError) as error:
        call()
    return error.value


@pytest.mark.parametrize("source, kwargs, field", [
    ("", {}, "source"),
    ("s3://bucket/model", {}, "source"),
    ("hf://just-a-name", {}, "source"),
    ("hf://owner/repo@", {}, "source"),
    ("hf://owner/repo", {"config": "/c.json"}, "config"),
    ("hf://owner/repo", {"provider": "net"}, "provider"),
    ("/ckpt/weights.pth", {"sha256": "0" * 64}, "provider"),
    ("/ckpt/weights.pth", {"provider": "net"}, "sha256"),
    ("/ckpt/weights.pth", {"provider": "net", "sha256": "xyz"}, "sha256"),
    ("/ckpt/model.safetensors", {}, "config"),
    ("/ckpt", {"config": "/c.json"}, "config"),
    ("/ckpt", {"provider": "net"}, "provider"),
    ("/ckpt/model.safetensors", {"config": "/c.json", "sha256": "0" * 64}, "sha256"),
])
def test_malformed_sources_fail_before_reading_anything(source, kwargs, field):
    error = _code(lambda: parse_source(source, **kwargs))
    assert error.code == "E_PRETRAINED" and error.location.field == field


def test_the_four_forms_parse():
    hub = parse_source("hf://owner/repo@v1.0")
    assert (hub.kind, hub.repo, hub.ref) == ("hub", "owner/repo", "v1.0")
    assert parse_source("hf://owner/repo").ref is None
    assert parse_source("/ckpt").kind == "directory"
    bare = parse_source("/ckpt/model.safetensors", config="/ckpt/config.json")
    assert bare.kind == "safetensors" and str(bare.config) == "/ckpt/config.json"
    pth = parse_source("/w.pth", provider="net", sha256="AB" * 32)
    assert pth.kind == "state_dict" and pth.sha256 == "ab" * 32 and pth.is_provider


def test_local_revision_is_a_content_digest_that_follows_the_files(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    first = current_revision(parse_source(str(copy)))
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64
    assert current_revision(parse_source(str(gpt2_dir))) == first  # content, not location
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert current_revision(parse_source(str(copy))) != first


def test_missing_paths_and_missing_weights_fail(tmp_path, gpt2_dir, kit):
    assert _code(lambda: current_revision(parse_source(str(tmp_path / "absent")))).code == "E_PRETRAINED"
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    (copy / "model.safetensors").unlink()
    error = _code(lambda: current_revision(parse_source(str(copy))))
    assert error.code == "E_PRETRAINED" and "safetensors" in error.message
    (copy / "config.json").unlink()
    assert _code(lambda: read_config(parse_source(str(copy)), "sha256:0")).code == "E_PRETRAINED"


def test_a_malformed_config_fails(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    (tmp_path / "model.safetensors").write_bytes(b"")
    error = _code(lambda: read_config(parse_source(str(tmp_path)), "x"))
    assert error.code == "E_PRETRAINED" and "JSON object" in error.message
    (tmp_path / "config.json").write_text("{not json")
    assert _code(lambda: read_config(parse_source(str(tmp_path)), "x")).code == "E_PRETRAINED"


def _resolve(source, input_shape=("B", 8), output_shape=("B", 8, 32), **kwargs):
    kwargs.setdefault("input_dtype", "int64")
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)


def test_a_config_naming_neither_library_fails(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "ckpt")
    (copy / "config.json").write_text('{"hidden_size": 32}')
    error = _code(lambda: _resolve(f'pretrained("{copy}")'))
    assert error.code == "E_PRETRAINED" and "neither" in error.message and error.location.node == "n0"


def test_an_unknown_model_type_or_architecture_fails(tmp_path, gpt2_dir, resnet_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "ckpt")
    (copy / "config.json").write_text('{"model_type": "no-such-model"}')
    assert "no-such-model" in _code(lambda: _resolve(f'pretrained("{copy}")')).message
    timm_copy = kit.copy_checkpoint(resnet_dir, tmp_path / "timm")
    (timm_copy / "config.json").write_text('{"architecture": "hf-hub:owner/remote"}')
    error = _code(lambda: _resolve(f'pretrained("{timm_copy}")', ("B", 3, 64, 64), ("B", 5), input_dtype=None))
    assert error.code == "E_PRETRAINED" and "hf-hub:owner/remote" in error.message


@pytest.mark.parametrize("module", ["transformers", "timm"])
def test_a_missing_dependency_is_e_pretrained_not_import_error(module, monkeypatch, gpt2_dir, resnet_dir):
    from hndl_pretrained import pretrained

    pretrained._ADAPTERS.clear()
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    if module == "transformers":
        call = lambda: _resolve(f'pretrained("{gpt2_dir}")')  # noqa: E731
    else:
        call = lambda: _resolve(f'pretrained("{resnet_dir}")', ("B", 3, 64, 64), ("B", 5), input_dtype=None)  # noqa: E731
    error = _code(call)
    assert error.code == "E_PRETRAINED" and module in error.message
    assert "hndl[pretrained]" in " ".join(error.remedies)


def test_a_registry_without_the_pack_does_not_know_the_operator(gpt2_dir):
    error = _code(lambda: _resolve(f'pretrained("{gpt2_dir}")', registry=Registry.from_packs("basic")))
    assert error.code == "E_OPERATOR"


def test_the_hub_records_the_commit_and_reads_only_config_json(hub_cache, gpt2_dir, kit):
    hub_cache.add("owner/tiny-gpt2", kit.COMMIT_A, gpt2_dir, weights=False)  # no weights in the cache at all
    plan = _resolve('pretrained("hf://owner/tiny-gpt2")')
    node = plan.nodes[0]
    assert node.args["revision"] == kit.COMMIT_A and node.provenance["revision"] == "inferred"
    assert node.output_shapes == {"out": ("B", 8, 32)}


def test_the_hub_honours_a_revision_and_a_branch(hub_cache, gpt2_dir, bert_dir, kit):
    hub_cache.add("owner/tiny", kit.COMMIT_A, gpt2_dir, weights=False)
    hub_cache.add("owner/tiny", kit.COMMIT_B, bert_dir, weights=False, branch="dev")
    assert _resolve('pretrained("hf://owner/tiny@dev", output="pooled")',
                    output_shape=("B", 32)).nodes[0].args["revision"] == kit.COMMIT_B
    pinned = _resolve(f'pretrained("hf://owner/tiny@{kit.COMMIT_A}")')
    assert pinned.nodes[0].args["revision"] == kit.COMMIT_A


def test_an_uncached_repository_fails_offline(hub_cache):
    error = _code(lambda: _resolve('pretrained("hf://owner/absent")'))
    assert error.code == "E_PRETRAINED" and "owner/absent" in error.message


def _record_hub_requests(monkeypatch) -> list:
    """Every hf_hub_download call the pack makes, answered as an uncached file."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    requests = []

    def download(repo_id, filename, **kwargs):
        requests.append(dict(kwargs, repo_id=repo_id, filename=filename))
        raise LocalEntryNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return requests


def test_the_hub_is_read_from_the_cache_only_unless_downloads_are_opted_in(monkeypatch):
    """Issue 29 item 5: whatever HF_HUB_OFFLINE says, the pack asks huggingface_hub for cached files
    only (local_files_only) unless HNDL_PRETRAINED_DOWNLOAD=1."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HNDL_PRETRAINED_DOWNLOAD", raising=False)
    requests = _record_hub_requests(monkeypatch)
    error = _code(lambda: _resolve('pretrained("hf://acme/tiny")'))
    assert error.code == "E_PRETRAINED" and error.location.field == "source"
    assert "downloads are off" in error.message and any("HNDL_PRETRAINED_DOWNLOAD=1" in r for r in error.remedies)
    assert [(r["filename"], r["local_files_only"]) for r in requests] == [("config.json", True)]
    monkeypatch.setenv("HNDL_PRETRAINED_DOWNLOAD", "1")
    requests.clear()
    error = _code(lambda: _resolve('pretrained("hf://acme/tiny")'))
    assert error.code == "E_PRETRAINED" and "downloads are off" not in error.message
    assert [(r["filename"], r["local_files_only"]) for r in requests] == [("config.json", False)]
