"""Restoring a saved plan re-resolves its pretrained sources: the same checkpoint restores, a changed
one fails with E_CONSTRAINT instead of loading other weights."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.torch import build, restore

TEXT = dict(input_shape=("B", 8), output_shape=("B", 8, 32), input_dtype="int64")


def _restore_fails(text, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.ResolvedPlan.from_json(text, **kwargs)
    return error.value


def test_an_unchanged_local_checkpoint_restores(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    plan = hndl.resolve(f'pretrained("{copy}")', **TEXT)
    restored = hndl.ResolvedPlan.from_json(plan.to_json())
    assert restored == plan


def test_a_changed_local_checkpoint_fails_restoration(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    text = hndl.resolve(f'pretrained("{copy}")', **TEXT).to_json()
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    error = _restore_fails(text)
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0" and "revision" in error.message


def test_a_moved_hub_branch_fails_restoration(hub_cache, gpt2_dir, kit):
    hub_cache.add("owner/tiny", kit.COMMIT_A, gpt2_dir, weights=False)
    text = hndl.resolve('pretrained("hf://owner/tiny")', **TEXT).to_json()
    assert hndl.ResolvedPlan.from_json(text).nodes[0].args["revision"] == kit.COMMIT_A
    hub_cache.add("owner/tiny", kit.COMMIT_B, gpt2_dir, weights=False)  # refs/main now names another commit
    error = _restore_fails(text)
    assert error.code == "E_CONSTRAINT" and kit.COMMIT_B in error.message and kit.COMMIT_A in error.message


def test_a_pinned_hub_commit_survives_a_moved_branch(hub_cache, gpt2_dir, kit):
    hub_cache.add("owner/tiny", kit.COMMIT_A, gpt2_dir, weights=False)
    text = hndl.resolve(f'pretrained("hf://owner/tiny@{kit.COMMIT_A}")', **TEXT).to_json()
    hub_cache.add("owner/tiny", kit.COMMIT_B, gpt2_dir, weights=False)
    assert hndl.ResolvedPlan.from_json(text).nodes[0].args["revision"] == kit.COMMIT_A


def test_a_changed_pth_fails_restoration(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    text = hndl.resolve(kit.net_source(path, sha), input_shape=("B", 3, 8, 8), output_shape=("B", 5),
                        registry=registry).to_json()
    assert hndl.ResolvedPlan.from_json(text, registry=registry).nodes[0].args["sha256"] == sha
    torch.save({key: value * 2 for key, value in net_reference.state_dict().items()}, path)
    error = _restore_fails(text, registry=registry)
    assert error.code == "E_CONSTRAINT"


def test_restoring_a_built_model_rechecks_the_source(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    plan = hndl.resolve(f'pretrained("{copy}")', **TEXT)
    model = build(plan, device="cpu")
    state = model.state_dict()
    again = restore(plan.to_json(), state, device="cpu", like="build")  # built with build()
    x = torch.randint(0, 64, (2, 8))
    torch.testing.assert_close(again(x=x)["output"], model(x=x)["output"])
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n")
    with pytest.raises(HNDLError) as error:
        restore(plan.to_json(), state, device="cpu")
    assert error.value.code == "E_CONSTRAINT"
