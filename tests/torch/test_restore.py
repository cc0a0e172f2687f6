"""Restoration (§12, §14 "Registration and recovery", "Compatibility"): a saved plan plus a
state dictionary round-trips in this process and in a fresh one; every bad state entry is
reported before anything is loaded; tampered plans fail; derived caches refresh after state
loading and device moves."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
from torch import nn

import hndl
import hndl.torch
from hndl import HNDLError
from hndl.persist import PLAN_FILE_REMEDY
from hndl.torch import build, restore
from hndl.torch.network import Network
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
    assert torch.equal(restored(x), model(x=x)["output"])  # called like network()'s model (issue 30 item 8)
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
        torch.save({"output": model(torch.load(path / "x.pt", weights_only=True)),
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
    assert torch.equal(restored(x), model(x=x)["score"])  # one public output: a tensor, as network() gives
    as_built = restore(plan.to_json(), model.state_dict(), device="cpu", like="build")
    assert torch.equal(as_built(x=x)["score"], model(x=x)["score"])


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


# -- a restored model calls like the one that was saved (issue 30 item 8) ----------------------------------
def _train(model, steps=3, seed=0):
    """A training loop written against network()'s model: positional input, a tensor out."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 12, generator=generator), torch.randint(0, 5, (8,), generator=generator)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_network_restores_as_a_network_and_the_same_training_loop_runs_on_it(tmp_path):
    """Before issue 30, restore() returned build()'s GraphModule: ``model(x)`` was E_BINDING
    (keyword inputs only) and a single output came back as a dictionary."""
    model = hndl.torch.network(MLP, device="cpu", initialization_seed=3, **CONTRACT)
    _train(model)
    (tmp_path / "plan.json").write_text(model.plan.to_json(), encoding="utf-8")
    torch.save(model.state_dict(), tmp_path / "state.pt")
    restored = restore(tmp_path / "plan.json", torch.load(tmp_path / "state.pt", weights_only=True), device="cpu")
    assert type(restored) is type(model) and isinstance(restored, Network)
    x = torch.randn(4, 12)
    out = restored(x)
    assert isinstance(out, torch.Tensor) and torch.equal(out, model(x))
    assert torch.equal(restored(x=x), model(x=x))  # keywords as network() takes them
    # §7 layer access works as on the saved model
    assert len(restored) == len(model) and type(restored[0]) is type(model[0])
    assert torch.equal(restored["n0"].weight, model["n0"].weight)
    # the loop that trained the saved model continues on the restored one, step for step alike
    assert _train(restored, seed=1) == _train(model, seed=1)
    assert same_state(restored, model.state_dict())


def test_a_restored_multi_output_network_returns_what_network_returns():
    source = "h = linear(x, 16)\nrelu()\nscore = linear(1)\nlabel = linear(h, 3)"
    contract = {"input_shape": {"x": ("B", 12)}, "output_shape": {"score": ("B", 1), "label": ("B", 3)}}
    model = hndl.torch.network(source, device="cpu", **contract)
    restored = restore(model.plan.to_json(), model.state_dict(), device="cpu")
    x = torch.randn(2, 12)
    expected, got = model(x), restored(x)
    assert isinstance(got, dict) and list(got) == list(expected) == ["score", "label"]
    assert all(torch.equal(got[name], expected[name]) for name in expected)


def test_like_build_returns_what_build_returns():
    """``like="build"``: §7's dictionary form, for a model that was built with build(plan)."""
    plan = hndl.resolve(MLP, **CONTRACT)
    model = build(plan, device="cpu", initialization_seed=4)
    restored = restore(plan.to_json(), model.state_dict(), device="cpu", like="build")
    assert type(restored) is type(model)
    x = torch.randn(3, 12)
    out = restored(x=x)
    assert isinstance(out, dict) and list(out) == ["output"] and torch.equal(out["output"], model(x=x)["output"])
    with raises("E_BINDING"):
        restored(x)  # keyword inputs only, exactly like build()'s module


def test_both_forms_hold_the_same_state_and_load_each_other():
    plan = hndl.resolve(CONV, **CONV_CONTRACT)
    as_network = restore(plan.to_json(), device="cpu", initialization_seed=1)
    as_built = restore(plan.to_json(), device="cpu", initialization_seed=2, like="build")
    assert list(as_network.state_dict()) == list(as_built.state_dict())
    assert as_network.plan == as_built.plan == plan
    load_state(as_built, as_network.state_dict())
    assert same_state(as_built, as_network.state_dict())
    again = restore(plan, as_built.state_dict(), device="cpu")
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(again(x), as_built(x=x)["output"])


@pytest.mark.parametrize("like", ["graph", "Network", "", None, 1, ("network",)])
def test_an_unknown_form_is_an_argument_error_before_the_plan_is_read(like):
    with raises("E_ARGUMENT") as caught:
        restore("not a plan", device="cpu", like=like)
    assert caught.value.location.field == "like"
    assert "like=\"network\"" in caught.value.remedies[0] and "like=\"build\"" in caught.value.remedies[0]


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
    from hndl.persist import digest_of, fields_body, semantic_record, sha256_of, with_digests

    plan, _, _ = saved
    record = json.loads(plan.to_json())
    record["nodes"][0]["output_shapes"]["out"] = ["B", 33]  # digests recomputed, equations broken
    del record["digests"]
    semantic = digest_of(semantic_record(record))
    body = fields_body(record)
    text = with_digests(body, semantic, sha256_of(with_digests(body, semantic))).decode("utf-8")
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
    torch.testing.assert_close(restored(x), trained(x=x)["output"])


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
        torch.testing.assert_close(model(x), x * node.weight / node.weight.norm())


# -- plan files the host names (§7 "Loading limits and trust boundaries") -------------------------------------
class _PathObject(os.PathLike):
    """A host's path object whose ``__fspath__`` gives ``value``, or raises it when it is an exception."""

    def __init__(self, value):
        self.value = value

    def __fspath__(self):
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def _unreadable(kind, tmp_path):
    """(a path naming no readable plan file, the reason the error must give)."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(hndl.resolve(MLP, **CONTRACT).to_json(), encoding="utf-8")
    if kind == "missing":
        return tmp_path / "nowhere.json", "no such file"
    if kind == "directory":
        return tmp_path, "it is a directory"
    if kind == "device":
        return pathlib.Path(os.devnull), "it is not a regular file"
    if kind == "under a file":
        return plan_file / "plan.json", os.strerror(errno.ENOTDIR)
    if kind == "symlink loop":
        os.symlink("loop.json", tmp_path / "loop.json")
        return tmp_path / "loop.json", os.strerror(errno.ELOOP)
    if kind == "name too long":
        return tmp_path / ("p" * 5000), os.strerror(errno.ENAMETOOLONG)
    if kind == "read fails":  # a regular file whose first read is EIO (address 0 is never mapped)
        return pathlib.Path("/proc/self/mem"), os.strerror(errno.EIO)
    if kind == "nul byte":
        return _PathObject(f"{plan_file}\0.json"), "the name contains a NUL byte"
    raise AssertionError(kind)


UNREADABLE = ["missing", "directory", "device", "under a file", "symlink loop", "name too long", "read fails",
              "nul byte"]


@pytest.mark.parametrize("kind", UNREADABLE)
def test_a_plan_path_naming_no_readable_file_is_e_schema(tmp_path, kind):
    path, reason = _unreadable(kind, tmp_path)
    with raises("E_SCHEMA") as error:
        hndl.torch.restore(path, device="cpu")
    assert error.value.message.startswith("cannot read the saved plan ")
    assert error.value.message.endswith(f": {reason}")
    assert error.value.remedies == (PLAN_FILE_REMEDY,)


@pytest.mark.parametrize("failure", [OSError(errno.ESTALE, "Stale file handle"), ValueError("no path yet"), 3],
                         ids=["raises OSError", "raises ValueError", "returns an int"])
def test_a_path_object_whose_fspath_fails_is_e_schema(failure):
    with raises("E_SCHEMA") as error:
        hndl.torch.restore(_PathObject(failure), device="cpu")
    assert error.value.location.field == "saved"
    assert error.value.message.startswith("restore() could not read the path object _PathObject: ")
    assert error.value.remedies == ("Pass a pathlib.Path or the plan JSON text.",)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    outcome = []
    attempt = threading.Thread(target=lambda: outcome.append(_error_of(lambda: restore(fifo, device="cpu"))),
                               daemon=True)
    attempt.start()
    attempt.join(timeout=60)  # the refusal takes milliseconds; a blocked open waits for a writer forever
    if attempt.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the blocked reader go before failing
        attempt.join(timeout=60)
        pytest.fail("restore(path) blocked on a FIFO until a writer appeared")
    (error,) = outcome
    assert isinstance(error, HNDLError) and error.code == "E_SCHEMA"
    assert error.message == f"cannot read the saved plan {str(fifo)!r}: it is not a regular file"


def _error_of(call):
    try:
        call()
    except BaseException as error:  # the test inspects whatever escaped
        return error
    return None


def test_a_readable_plan_file_after_the_refusals_still_restores(saved):
    plan, model, path = saved
    for kind in ("missing", "directory"):
        with raises("E_SCHEMA"):
            restore(_unreadable(kind, path)[0], device="cpu")
    assert restore(path / "plan.json", model.state_dict(), device="cpu").plan == plan


# -- state dictionaries that are not what torch would load (issue 15, items 7 and 10) ------------------------
def test_a_key_that_is_not_a_str_is_e_schema_before_anything_is_loaded(saved):
    plan, model, _ = saved
    live = build(plan, device="cpu", initialization_seed=3)
    before = snapshot(live)
    state = {**model.state_dict(), 3: torch.zeros(1)}
    with raises("E_SCHEMA") as error:
        load_state(live, state)
    assert error.value.message.startswith("state dictionary key 3 is int, not a str")
    assert error.value.location.field == "state_dict"
    assert same_state(live, before)
    with raises("E_SCHEMA"):
        restore(plan.to_json(), {(1, 2): torch.zeros(1)}, device="cpu")


def _uncopyable(kind, tensor):
    """``tensor`` as a kind of tensor ``load_state_dict`` cannot copy into a dense parameter."""
    if kind == "sparse coo":
        return tensor.to_sparse()
    if kind == "sparse csr":
        return tensor.to_sparse_csr()
    if kind == "nested":
        return torch.nested.nested_tensor([tensor, tensor])
    if kind == "jagged":
        return torch.nested.nested_tensor([tensor, tensor], layout=torch.jagged)
    if kind == "quantized":
        return torch.quantize_per_tensor(tensor, 0.1, 0, torch.qint8)
    if kind == "subclass":
        return tensor.as_subclass(_Marked)
    if kind == "meta":
        return torch.empty_like(tensor, device="meta")
    if kind == "complex":
        return tensor.to(torch.complex64)
    raise AssertionError(kind)


class _Marked(torch.Tensor):
    """A tensor subclass (as a host's library might produce); not plain values."""


UNCOPYABLE = {
    "sparse coo": "has layout sparse_coo, not a dense (strided) tensor",
    "sparse csr": "has layout sparse_csr, not a dense (strided) tensor",
    "nested": "is a nested tensor, not a dense one",
    "jagged": "is a NestedTensor, a tensor subclass, not a plain tensor",
    "quantized": "is a quantized tensor (qint8)",
    "subclass": "is a _Marked, a tensor subclass, not a plain tensor",
    "meta": "is a meta tensor and holds no values",
    "complex": "has dtype complex64, the plan builds float32 (nothing is cast silently)",
}


@pytest.mark.filterwarnings("ignore:.*(beta|prototype|deprecated).*:UserWarning")
@pytest.mark.parametrize("kind", list(UNCOPYABLE))
def test_an_uncopyable_tensor_after_four_good_entries_leaves_every_tensor_as_it_was(saved, kind):
    plan, model, _ = saved
    live = build(plan, device="cpu", initialization_seed=3)
    before = snapshot(live)
    state = {key: value + 1 for key, value in model.state_dict().items()}  # every entry differs from live
    key = "nodes.n_n4.weight"
    assert list(state).index(key) == 4 and state[key].dim() == 2  # torch would copy the first four
    state[key] = _uncopyable(kind, state[key])
    with raises("E_INTEGRITY") as error:
        load_state(live, state)
    assert error.value.chain == (f"'{key}' {UNCOPYABLE[kind]}",)
    assert error.value.location.node == "n4"
    assert same_state(live, before)  # not one entry was copied
    with raises("E_INTEGRITY"):
        restore(plan.to_json(), state, device="cpu")


def test_non_contiguous_entries_and_parameters_still_load(saved):
    plan, model, _ = saved
    state = dict(model.state_dict())
    weight = state["nodes.n_n4.weight"]
    state["nodes.n_n4.weight"] = weight.t().contiguous().t()  # same values, transposed strides
    assert not state["nodes.n_n4.weight"].is_contiguous()
    restored = restore(plan.to_json(), state, device="cpu")
    assert same_state(restored, model.state_dict())
    with_parameters = model.state_dict(keep_vars=True)
    assert isinstance(with_parameters["nodes.n_n0.weight"], nn.Parameter)
    assert same_state(restore(plan, with_parameters, device="cpu"), model.state_dict())


@pytest.mark.parametrize("metadata", [["not", "a", "mapping"], {"nodes.n_bn": "version 2"},
                                      {"nodes.n_bn": {"version": "2"}}, {"nodes.n_bn": {"version": True}},
                                      {3: {"version": 1}}, {"nodes.n_bn": {"version": 0}}],
                         ids=["a list", "an entry that is a str", "a str version", "a bool version", "an int prefix",
                              "version 0"])
def test_malformed_version_metadata_is_e_schema_before_anything_is_loaded(metadata):
    """batch_norm's loader compares its saved version with 2: a str there used to raise
    TypeError after the convolution before it had been copied."""
    plan = hndl.resolve("conv(4, kernel_size=1)\nbatch_norm(name='bn')\nflatten()\nlinear(3)",
                        input_shape=("B", 2, 3, 3), output_shape=("B", 3))
    live = build(plan, device="cpu", initialization_seed=3)
    before = snapshot(live)
    state = build(plan, device="cpu", initialization_seed=4).state_dict()
    state._metadata = metadata
    with raises("E_SCHEMA") as error:
        load_state(live, state)
    assert error.value.location.field == "state_dict._metadata"
    assert same_state(live, before)


def test_a_loader_option_in_the_metadata_is_not_the_datas_to_choose(saved):
    """torch reads ``assign_to_params_buffers`` from the metadata: data naming it would swap the
    live Parameters for the file's tensors. load_state passes only the module versions."""
    plan, model, _ = saved
    live = build(plan, device="cpu")
    parameters = {name: parameter for name, parameter in live.named_parameters()}
    state = model.state_dict()
    for entry in state._metadata.values():
        entry["assign_to_params_buffers"] = True
    load_state(live, state)
    assert all(parameter is parameters[name] for name, parameter in live.named_parameters())
    assert same_state(live, model.state_dict())


# -- quantized layers (issue 29, item 10) ----------------------------------------------------------------------
QUANTIZED = "linear(32)\nrelu()\nlinear(16)\nrelu()\nlinear()"
QUANTIZED_CONTRACT = {"input_shape": ("B", 12), "output_shape": ("B", 5)}


def _quantized(seed, source=QUANTIZED, contract=QUANTIZED_CONTRACT):
    """A built network whose linear layers ``quantize_dynamic`` replaced: their state is
    ``scale``, ``zero_point``, ``_packed_params.dtype`` and ``_packed_params._packed_params``
    (the packed weight and bias, saved as the (qint8 weight, float bias) they unpack to)."""
    plan = hndl.resolve(source, **contract)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its deprecation
        return torch.ao.quantization.quantize_dynamic(build(plan, device="cpu", initialization_seed=seed),
                                                      {nn.Linear}, dtype=torch.qint8)


def _values(module):
    """Every value of ``module``'s state, the packed weights unpacked, as comparable plain data."""
    def plain(value):
        if isinstance(value, torch.Tensor):
            value = value.dequantize() if value.is_quantized else value
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return tuple(plain(item) for item in value)
        return value

    return {key: plain(value) for key, value in module.state_dict().items()}


def _same_values(first, second):
    def same(a, b):
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and torch.equal(a, b)
        if isinstance(a, tuple):
            return isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
        return a == b

    return first.keys() == second.keys() and all(same(first[key], second[key]) for key in first)


def _load_quietly(live, state):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_state(live, state)


def test_a_quantized_state_loads_with_its_metadata_and_as_a_plain_dict():
    """Without metadata torch reads every module as version None, the oldest layout: a
    quantized linear layer then looked for ``weight`` and raised KeyError after n0 was copied."""
    source = _quantized(seed=1)
    assert "nodes.n_n0._packed_params._packed_params" in source.state_dict()
    for state in (source.state_dict(), dict(source.state_dict())):
        live = _quantized(seed=2)
        assert not _same_values(_values(live), _values(source))
        _load_quietly(live, state)
        assert _same_values(_values(live), _values(source))
        x = torch.randn(3, 12)
        assert torch.equal(live(x=x)["output"], source(x=x)["output"])


@pytest.mark.parametrize("prefix", ["nodes.n_n2", "nodes.n_n4", "nodes.n_n4._packed_params"])
@pytest.mark.parametrize("version", [1, 2, 9])
def test_a_quantized_layer_saved_at_another_version_is_refused_before_anything_is_loaded(prefix, version):
    """``_metadata["nodes.n_n4"] = {"version": 1}`` made torch's quantized loader look for the
    version 1 layout's ``weight`` entry (KeyError) after n0's weights were copied."""
    live = _quantized(seed=2)
    before = _values(live)
    state = _quantized(seed=1).state_dict()
    state._metadata[prefix] = {"version": version}
    with raises("E_STATE_VERSION") as error:
        _load_quietly(live, state)
    assert error.value.location.field == "state_dict._metadata"
    assert error.value.location.node == prefix.split(".")[1].removeprefix("n_")
    assert f"'{prefix}' was written by module version {version}" in error.value.message
    assert _same_values(_values(live), before)


def _packed(state, key="nodes.n_n4._packed_params._packed_params"):
    return state, key, state[key]


def _repacked(kind, state):
    """``state`` with the last linear layer's packed weights replaced as ``kind`` says."""
    state, key, (weight, bias) = _packed(state)
    if kind == "wider weight":
        other = _quantized(seed=1, contract={"input_shape": ("B", 12), "output_shape": ("B", 7)})
        state[key] = other.state_dict()[key]
    elif kind == "bias shape":
        state[key] = (weight, torch.zeros(6))
    elif kind == "bias dtype":
        state[key] = (weight, bias.double())
    elif kind == "no bias":
        state[key] = (weight, None)
    elif kind == "float weight":
        state[key] = (weight.dequantize(), bias)
    elif kind == "per-channel weight":
        scales, zeros = torch.full((5,), 0.1, dtype=torch.double), torch.zeros(5, dtype=torch.long)
        state[key] = (torch.quantize_per_channel(weight.dequantize(), scales, zeros, 0, torch.qint8), bias)
    elif kind == "one item":
        state[key] = (weight,)
    elif kind == "not a tuple":
        state[key] = weight
    elif kind == "packed dtype":
        state["nodes.n_n4._packed_params.dtype"] = torch.float16
    else:
        raise AssertionError(kind)
    return state


REPACKED = {
    "wider weight": "[0] has shape [7, 16], the plan builds [5, 16]",
    "bias shape": "[1] has shape [6], the plan builds [5]",
    "bias dtype": "[1] has dtype float64, the plan builds float32 (nothing is cast silently)",
    "no bias": "[1] is NoneType, not a tensor",
    "float weight": "[0] is a plain tensor, the plan builds a quantized one (qint8)",
    "per-channel weight": "[0] is quantized per_channel_affine on axis 0, the plan builds per_tensor_affine",
    "one item": " is a tuple of 1, the plan builds a sequence of 2",
    "not a tuple": " is Tensor, the plan builds a sequence of 2",
    "packed dtype": " is float16, the plan builds qint8",
}


@pytest.mark.parametrize("kind", list(REPACKED))
def test_quantized_packed_weights_that_do_not_fit_are_e_integrity_before_anything_is_loaded(kind):
    """A wrong-shaped ``_packed_params`` used to load, and the next call failed in torch."""
    live = _quantized(seed=2)
    before = _values(live)
    state = _repacked(kind, _quantized(seed=1).state_dict())
    with raises("E_INTEGRITY") as error:
        _load_quietly(live, state)
    key = "nodes.n_n4._packed_params.dtype" if kind == "packed dtype" else "nodes.n_n4._packed_params._packed_params"
    assert error.value.chain == (f"'{key}'{REPACKED[kind]}",)
    assert error.value.location.node == "n4"
    assert _same_values(_values(live), before)


def test_a_quantized_weight_where_the_plan_builds_a_quantized_one_fits_only_with_its_scheme():
    """Quantized entries are compared, not refused outright, where the module holds one too."""
    live = _quantized(seed=2)
    state = _quantized(seed=1).state_dict()
    state["nodes.n_n0.scale"] = torch.quantize_per_tensor(state["nodes.n_n0.scale"], 0.1, 0, torch.qint8)
    with raises("E_INTEGRITY") as error:
        _load_quietly(live, state)
    assert error.value.chain == ("'nodes.n_n0.scale' is a quantized tensor (qint8)",)


# -- unbounded echoes and terminal escapes in state keys (issue 29, items 11 and 12) ------------------------------
OSC52 = "\x1b]52;c;aGVsbG8=\x07"


def _without_controls(text):
    return not any(ord(character) < 0x20 and character != "\n" or 0x7f <= ord(character) < 0xa0
                   for character in text)


def test_a_megabyte_state_key_gives_a_short_error(saved):
    plan, model, _ = saved
    live = build(plan, device="cpu")
    state = {**model.state_dict(), "k" * 2**20: torch.zeros(1)}
    with raises("E_INTEGRITY") as error:
        load_state(live, state)
    text = str(error.value)
    assert len(text) < 2_000  # was 3 MB: the key in the message, the chain and the field
    assert f"({2**20} characters)" in error.value.message


def test_twenty_thousand_unexpected_state_keys_are_counted_not_listed(saved):
    plan, model, _ = saved
    live = build(plan, device="cpu")
    before = snapshot(live)
    state = {**model.state_dict(), **{f"nodes.n_extra{index:05d}.weight": torch.zeros(1) for index in range(20_000)}}
    with raises("E_INTEGRITY") as error:
        load_state(live, state)
    message, chain = error.value.message, error.value.chain
    assert message.startswith("the state dictionary does not match the plan (20000 problem(s)): "
                              "unexpected entry 'nodes.n_extra00000.weight'; ")
    assert message.endswith("; ... and 19992 more")
    assert len(chain) == 21 and chain[-1] == "... and 19980 more problem(s)"
    assert chain[:2] == ("unexpected entry 'nodes.n_extra00000.weight'", "unexpected entry 'nodes.n_extra00001.weight'")
    assert len(str(error.value)) < 5_000  # was 2.7 MB
    assert same_state(live, before)


def test_a_state_key_of_a_million_dots_is_refused_without_a_join_per_dot(saved):
    """The version lookup joined the key's parts once per dot: quadratic in the key."""
    plan, model, _ = saved
    state = model.state_dict()
    state["nodes" + "." * 2**20 + "weight"] = torch.zeros(1)
    state._metadata["nodes.n_n0"] = {"version": 1}
    with raises("E_INTEGRITY") as error:
        check_state(build(plan, device="cpu"), state)
    assert len(str(error.value)) < 2_000


@pytest.mark.parametrize("where", ["unexpected", "shape"])
def test_a_state_key_holding_a_terminal_escape_is_shown_escaped(saved, where):
    """An OSC 52 sequence (a clipboard write) in a key landed raw in ``(field ...)``."""
    plan, model, _ = saved
    live = build(plan, device="cpu")
    state = dict(model.state_dict())
    if where == "unexpected":
        state[f"nodes.n_n0.{OSC52}"] = torch.zeros(1)
    else:
        live.nodes.n_n0.register_buffer(OSC52, torch.zeros(2))
        state[f"nodes.n_n0.{OSC52}"] = torch.zeros(3)
    with raises("E_INTEGRITY") as error:
        load_state(live, state)
    text = str(error.value)
    assert _without_controls(text)
    assert "\\x1b]52;c;aGVsbG8=\\x07" in error.value.message
    assert error.value.location.field == "nodes.n_n0.\\x1b]52;c;aGVsbG8=\\x07"


def test_a_metadata_prefix_holding_a_terminal_escape_or_a_megabyte_is_shown_escaped_and_bounded(saved):
    plan, model, _ = saved
    for prefix in (OSC52, "p" * 2**20):
        state = model.state_dict()
        state._metadata = {prefix: {"version": "1"}}
        with raises("E_SCHEMA") as error:
            check_state(build(plan, device="cpu"), state)
        assert _without_controls(str(error.value)) and len(str(error.value)) < 2_000


def test_a_state_dictionary_is_refused_on_the_meta_device_instead_of_loading_nothing():
    model = hndl.torch.network("linear(4)", input_shape=("B", 3), output_shape=("B", 4), device="cpu")
    with pytest.raises(HNDLError) as caught:
        restore(model.plan.to_json(), model.state_dict(), device="meta")
    assert caught.value.code == "E_ARGUMENT" and caught.value.location.field == "device"
    assert "to_empty" in caught.value.remedies[0]
    empty = restore(model.plan.to_json(), device="meta")
    assert all(tensor.is_meta for tensor in empty.state_dict().values())
