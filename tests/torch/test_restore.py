"""Restoration (§12, §14 "Registration and recovery", "Compatibility"): a saved plan plus a
state dictionary round-trips in this process and in a fresh one; every bad state entry is
reported before anything is loaded; tampered plans fail; derived caches refresh after state
loading and device moves."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.torch import build, restore
from hndl.torch.restore import check_state, load_state

MLP = "linear(32)\nrelu()\nlinear(16, trainable=False)\ntanh()\nlinear()"
CONTRACT = {"input_shape": ("B", 12), "output_shape": ("B", 5)}
CONV = 'conv(8, kernel_size=3, padding=1)\nrelu()\nconv(16, policy="down2")\nrelu()\nflatten()\nlinear()'
CONV_CONTRACT = {"input_shape": ("B", 3, 8, 8), "output_shape": ("B", 4)}


def raises(code):
    return pytest.raises(HNDLError, match=rf"^{code}\b")


def snapshot(module):
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def same_state(module, state):
    current = module.state_dict()
    return current.keys() == state.keys() and all(torch.equal(current[key], state[key]) for key in state)


@pytest.fixture
def saved(tmp_path):
    """A trained-looking model, its plan file and its state file."""
    plan = hndl.resolve(MLP, **CONTRACT)
    model = build(plan, device="cpu", initialization_seed=11)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.25)  # not what any initializer produces
    (tmp_path / "plan.json").write_text(plan.to_json(), encoding="utf-8")
    torch.save(model.state_dict(), tmp_path / "state.pt")
    return plan, model, tmp_path


# -- round trips --------------------------------------------------------------------------------------------
def test_round_trip_in_this_process(saved):
    plan, model, path = saved
    state = torch.load(path / "state.pt", weights_only=True)
    restored = restore((path / "plan.json").read_text(encoding="utf-8"), state, device="cpu")
    assert restored.plan == plan and restored.plan.to_json() == plan.to_json()
    assert same_state(restored, model.state_dict())
    assert restored.training and all(module.training for module in restored.modules())
    x = torch.randn(7, 12)
    assert torch.equal(restored(x=x)["output"], model(x=x)["output"])
    # trainability comes from the plan, not from the state dictionary
    flags = {name: p.requires_grad for name, p in restored.named_parameters()}
    assert flags == {name: p.requires_grad for name, p in model.named_parameters()}
    assert flags["nodes.n_n2.weight"] is False and flags["nodes.n_n0.weight"] is True


@pytest.mark.parametrize("form", ["text", "bytes", "path", "plan"])
def test_every_form_of_the_saved_plan_restores(saved, form):
    plan, model, path = saved
    source = {
        "text": (path / "plan.json").read_text(encoding="utf-8"),
        "bytes": (path / "plan.json").read_bytes(),
        "path": path / "plan.json",
        "plan": plan,
    }[form]
    restored = restore(source, model.state_dict(), device="cpu")
    assert same_state(restored, model.state_dict())


def test_round_trip_in_a_fresh_process(saved):
    plan, model, path = saved
    x = torch.randn(4, 12)
    torch.save(x, path / "x.pt")
    expected = model(x=x)["output"]
    script = textwrap.dedent("""
        import sys, pathlib, torch
        import hndl, hndl.frontends.pipeline as pipeline
        from hndl.torch import restore

        def refuse(*args, **kwargs):
            raise AssertionError("restoration must not resolve source or run a callable")
        pipeline.resolve = pipeline.resolve_file = pipeline.resolve_callable = refuse
        hndl.resolve = hndl.resolve_file = hndl.resolve_callable = refuse

        path = pathlib.Path(sys.argv[1])
        model = restore((path / "plan.json").read_bytes(), torch.load(path / "state.pt", weights_only=True),
                        device="cpu")
        assert model.training
        torch.save({"output": model(x=torch.load(path / "x.pt", weights_only=True))["output"],
                    "digest": model.plan.semantic_digest}, path / "out.pt")
    """)
    (path / "restore_child.py").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, str(path / "restore_child.py"), str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = torch.load(path / "out.pt", weights_only=True)
    assert result["digest"] == plan.semantic_digest
    assert torch.equal(result["output"], expected)


def test_round_trip_of_a_conv_stack_with_named_ports():
    plan = hndl.resolve(
        'conv(x, 8, kernel_size=3, padding=1)\nrelu()\nconv(16, policy="down2")\nrelu()\nflatten()\n'
        'h = linear(16)\nscore = linear(h, 1)\nout = score',
        input_shape={"x": ("B", 3, 8, 8)}, output_shape={"score": ("B", 1)},
    )
    model = build(plan, device="cpu")
    restored = restore(plan.to_json(), model.state_dict(), device="cpu")
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(restored(x=x)["score"], model(x=x)["score"])


def test_without_a_state_dict_restore_is_build_and_follows_the_seed():
    plan = hndl.resolve(CONV, **CONV_CONTRACT)
    first = restore(plan.to_json(), device="cpu", initialization_seed=5)
    second = build(plan, device="cpu", initialization_seed=5)
    assert same_state(first, snapshot(second))
    assert first.build_receipt["seed_mode"] == "isolated"


def test_loading_never_changes_trainability_or_mode(saved):
    plan, model, _ = saved
    restored = restore(plan, None, device="cpu")
    restored.eval()
    load_state(restored, model.state_dict())
    assert not restored.training  # the host's mode is kept
    assert restored.nodes.n_n2.weight.requires_grad is False
    assert restored.nodes.n_n0.weight.requires_grad is True


# -- bad state dictionaries ---------------------------------------------------------------------------------
def _bad(kind, state):
    state = dict(state)
    if kind == "missing":
        del state["nodes.n_n0.bias"]
    elif kind == "extra":
        state["nodes.n_n1.weight"] = torch.zeros(3)
    elif kind == "shape":
        state["nodes.n_n4.weight"] = torch.zeros(5, 17)
    elif kind == "dtype":
        state["nodes.n_n4.weight"] = state["nodes.n_n4.weight"].double()
    elif kind == "not a tensor":
        state["nodes.n_n4.bias"] = [0.0] * 5
    elif kind == "meta":
        state["nodes.n_n4.bias"] = torch.empty(5, device="meta")
    return state


BAD = ["missing", "extra", "shape", "dtype", "not a tensor", "meta"]


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_state_fails_with_e_integrity_before_anything_is_loaded(saved, kind, monkeypatch):
    plan, model, _ = saved
    calls = []
    original = nn.Module.load_state_dict
    monkeypatch.setattr(nn.Module, "load_state_dict",
                        lambda self, *a, **k: calls.append(self) or original(self, *a, **k))
    with raises("E_INTEGRITY") as error:
        restore(plan.to_json(), _bad(kind, model.state_dict()), device="cpu")
    assert calls == []  # nothing was loaded
    assert error.value.location.node in {"n0", "n1", "n4"}


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_state_leaves_a_live_module_untouched(saved, kind):
    plan, model, _ = saved
    live = build(plan, device="cpu", initialization_seed=3)
    fresh = build(plan, device="cpu", initialization_seed=3)
    with raises("E_INTEGRITY"):
        load_state(live, _bad(kind, model.state_dict()))
    assert same_state(live, snapshot(fresh))  # exactly the seeded initial values
    assert not same_state(live, model.state_dict())


def test_every_problem_is_reported_at_once(saved):
    plan, model, _ = saved
    state = dict(model.state_dict())
    del state["nodes.n_n0.bias"]
    state["nodes.n_n4.weight"] = state["nodes.n_n4.weight"].half()
    state["nodes.n_n9.weight"] = torch.zeros(1)
    with raises("E_INTEGRITY") as error:
        check_state(build(plan, device="cpu"), state)
    chain = error.value.chain
    assert len(chain) == 3
    assert "missing entry 'nodes.n_n0.bias'" in chain
    assert "unexpected entry 'nodes.n_n9.weight'" in chain
    assert any("float16" in fact and "float32" in fact for fact in chain)


def test_a_state_that_is_not_a_mapping_is_a_schema_error(saved):
    plan, model, _ = saved
    with raises("E_SCHEMA"):
        restore(plan.to_json(), list(model.state_dict().items()), device="cpu")


def _versioned_registry(version):
    registry = hndl.Registry.builtins()

    @registry.operator("gain", identity="test.gain", summary="Per-feature gain for the test.",
                       shape="x[B, D] -> out[B, D]")
    class Gain(nn.Module):
        """A learned per-feature gain; version 2 renamed its parameter from scale to gain."""

        _version = version

        def __init__(self, D):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(D))

        def forward(self, x):
            return x * self.gain

    return registry


def test_a_state_from_another_parameter_layout_is_e_state_version():
    registry = _versioned_registry(2)
    plan = hndl.resolve("linear(4)\ngain()", input_shape=("B", 3), output_shape=("B", 4), registry=registry)
    model = build(plan, device="cpu", registry=registry)
    old = model.state_dict()
    old["nodes.n_n1.scale"] = old.pop("nodes.n_n1.gain")  # what implementation version 1 saved
    old._metadata["nodes.n_n1"] = {"version": 1}
    with raises("E_STATE_VERSION") as error:
        restore(plan.to_json(), old, device="cpu", registry=registry)
    assert error.value.location.node == "n1"
    assert "version 1" in error.value.message and "version 2" in error.value.message


def test_same_module_version_with_a_wrong_layout_is_e_integrity():
    registry = _versioned_registry(2)
    plan = hndl.resolve("linear(4)\ngain()", input_shape=("B", 3), output_shape=("B", 4), registry=registry)
    state = build(plan, device="cpu", registry=registry).state_dict()
    state["nodes.n_n1.scale"] = state.pop("nodes.n_n1.gain")
    with raises("E_INTEGRITY"):
        restore(plan.to_json(), state, device="cpu", registry=registry)


def test_a_version_difference_with_a_fitting_layout_loads():
    registry = _versioned_registry(2)
    plan = hndl.resolve("gain()", input_shape=("B", 3), output_shape=("B", 3), registry=registry)
    state = build(plan, device="cpu", registry=registry).state_dict()
    state["nodes.n_n0.gain"] = torch.full((3,), 2.0)
    state._metadata["nodes.n_n0"] = {"version": 1}
    restored = restore(plan.to_json(), state, device="cpu", registry=registry)
    assert torch.equal(restored.nodes.n_n0.gain, torch.full((3,), 2.0))


# -- the plan half ---------------------------------------------------------------------------------------------
def test_tampered_plan_text_is_e_integrity(saved):
    plan, model, _ = saved
    text = plan.to_json()
    assert '"out_features":32' in text
    with raises("E_INTEGRITY"):
        restore(text.replace('"out_features":32', '"out_features":33', 1), model.state_dict(), device="cpu")


def test_tampered_plan_with_recomputed_digests_fails_its_equations(saved):
    from hndl.persist import _body, _digest, _semantic_record, _sha256, _with_digests

    plan, _, _ = saved
    record = json.loads(plan.to_json())
    record["nodes"][0]["output_shapes"]["out"] = ["B", 33]  # digests recomputed, equations broken
    del record["digests"]
    semantic = _digest(_semantic_record(record))
    body = _body(record)
    text = _with_digests(body, semantic, _sha256(_with_digests(body, semantic))).decode("utf-8")
    with raises("E_INTEGRITY"):
        restore(text, device="cpu")


def test_unsupported_versions_and_identities_are_e_state_version(saved):
    plan, _, _ = saved
    record = json.loads(plan.to_json())
    record["schema_version"] = 2
    with raises("E_STATE_VERSION"):
        restore(json.dumps(record), device="cpu")
    registry = _versioned_registry(1)
    custom = hndl.resolve("gain()", input_shape=("B", 3), output_shape=("B", 3), registry=registry)
    with raises("E_STATE_VERSION"):
        restore(custom.to_json(), device="cpu")  # the built-in registry lacks test.gain@1
    with raises("E_STATE_VERSION"):
        restore(custom, device="cpu")  # a plan object is revalidated against the registry too


@pytest.mark.parametrize("saved_plan", [None, 3, {"nodes": []}])
def test_anything_else_is_a_schema_error(saved_plan):
    with raises("E_SCHEMA"):
        restore(saved_plan, device="cpu")


def test_a_malformed_device_fails_before_loading():
    plan = hndl.resolve(MLP, **CONTRACT)
    with raises("E_SCHEMA"):
        restore(plan.to_json(), device="tpu")


# -- derived caches ---------------------------------------------------------------------------------------------
def _cached_registry():
    registry = hndl.Registry.builtins()

    @registry.operator("normed", identity="test.normed", summary="Scale by a cached weight norm for the test.",
                       shape="x[B, D] -> out[B, D]")
    class Normed(nn.Module):
        """out = x * weight / |weight|, with |weight| cached in a non-persistent buffer that is
        refreshed after state loading (a load_state_dict post hook) and after moves (_apply)."""

        def __init__(self, D):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(D))
            self.register_buffer("norm", self.weight.detach().norm(), persistent=False)
            self.register_load_state_dict_post_hook(lambda module, incompatible: module.refresh())

        def refresh(self):
            with torch.no_grad():
                self.norm.copy_(self.weight.norm())

        def _apply(self, fn, recurse=True):
            result = super()._apply(fn, recurse)
            self.refresh()
            return result

        def forward(self, x):
            return x * self.weight / self.norm

    return registry


def test_derived_caches_refresh_after_state_loading():
    registry = _cached_registry()
    plan = hndl.resolve("linear(6)\nnormed()", input_shape=("B", 4), output_shape=("B", 6), registry=registry)
    trained = build(plan, device="cpu", registry=registry)
    with torch.no_grad():
        trained.nodes.n_n1.weight.mul_(3.0)
        trained.nodes.n_n1.refresh()
    state = trained.state_dict()
    assert "nodes.n_n1.norm" not in state  # a derived cache is not state
    restored = restore(plan.to_json(), state, device="cpu", registry=registry, initialization_seed=1)
    cache = restored.nodes.n_n1.norm
    torch.testing.assert_close(cache, state["nodes.n_n1.weight"].norm())
    x = torch.randn(3, 4)
    torch.testing.assert_close(restored(x=x)["output"], trained(x=x)["output"])


def test_derived_caches_follow_dtype_and_device_moves():
    registry = _cached_registry()
    plan = hndl.resolve("normed()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    model = restore(plan.to_json(), device="cpu", registry=registry)
    node = model.nodes.n_n0
    model.to(torch.float64)
    assert node.norm.dtype == torch.float64
    torch.testing.assert_close(node.norm, node.weight.detach().norm())
    model.to(torch.float32)
    if torch.cuda.is_available():
        model.to("cuda")
        assert node.norm.device.type == "cuda"
        torch.testing.assert_close(node.norm, node.weight.detach().norm())
        x = torch.randn(2, 4, device="cuda")
        torch.testing.assert_close(model(x=x)["output"], x * node.weight / node.weight.norm())
