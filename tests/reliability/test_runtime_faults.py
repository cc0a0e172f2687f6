"""Runtime faults (issue 10, item 4; §11, SPEC "Runtime checks", the validate-once-per-signature
design in /work/shared/seeds/pr-validate-once-per-signature.txt).

* A node raising mid-forward (on the validating call or on the fast path, at the first, a
  middle or the last node, with an ordinary exception, an OOM, an HNDLError or a
  KeyboardInterrupt) propagates with its own type and leaves the model usable: the next call
  gives the same outputs as before, parameters and buffers are untouched, no gradient
  was accumulated, and training continues.
* NaN and infinite inputs pass through: nothing is validated on values, nothing raises, the
  parameters and the validated-signature cache are unchanged, and the next finite call gives
  bit-identical outputs. Running statistics (batch_norm in training mode) absorb a NaN batch
  exactly as the same torch module does; HNDL adds nothing and hides nothing.
* State mutations are caught exactly as the design defines: during the first forward for a
  signature and through any registration hook afterwards (E_RUNTIME, on every call); a
  deleted parameter raises its own AttributeError with a state note; the documented gap,
  ``param = None`` on a module that tolerates it, runs silently on an already validated
  signature and is reported at the next revalidation (a new signature, a train/eval flip,
  ``.to()``/a cast, or any hooked registration).
* Save/restore after a partial failure loses nothing: plan JSON plus ``state_dict()`` written
  after a failed step restore to a module with bit-identical state and outputs that trains on
  identically.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.torch import build, restore

MLP_CONTRACT = {"input_shape": ("B", 4), "output_shape": ("B", 3)}


class Fault(Exception):
    pass


@pytest.fixture(scope="module")
def registry():
    registry = hndl.Registry.from_packs("basic", "vision")

    @registry.operator("faulty", identity="test.faulty", summary="Identity until told to fail.",
                       shape="x[B, D] -> out[B, D]")
    class Faulty(nn.Module):
        """Returns its input; ``failure`` (a plain attribute, not state) makes it raise."""

        def __init__(self):
            super().__init__()
            self.failure = None

        def forward(self, x):
            if self.failure == "runtime":
                raise RuntimeError("a kernel failed")
            if self.failure == "value":
                raise ValueError("bad value")
            if self.failure == "custom":
                raise Fault("custom")
            if self.failure == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if self.failure == "hndl":
                raise HNDLError("E_RUNTIME", "faulty gave up")
            if self.failure == "interrupt":
                raise KeyboardInterrupt
            return x

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_module("proj", None)

    @registry.operator("lazy", identity="test.lazy", summary="Creates a layer on first use.",
                       shape="x[B, D] -> out[B, D]")
    class Lazy(nn.Module):
        """Fills a declared-None submodule slot during forward (the lazy-initialisation bug)."""

        def __init__(self, D):
            super().__init__()
            self.width = D
            self.inner = Inner()

        def forward(self, x):
            if self.inner.proj is None:
                self.inner.proj = nn.Linear(self.width, self.width)
            return self.inner.proj(x)

    @registry.operator("late", identity="test.late", summary="Registers a buffer on its third call.",
                       shape="x[B, D] -> out[B, D]")
    class Late(nn.Module):
        """Registers state during a later forward, after its signature was validated."""

        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                self.register_buffer("late", torch.zeros(1))
            return x

    return registry


SOURCE = ("faulty(name='f0')\nlinear(8, name='l1')\nrelu()\nfaulty(name='f1')\nlinear(8, name='l2')\n"
          "faulty(name='f2')\nout = linear(3, name='head')")


def model_with_faults(registry, seed=0):
    plan = hndl.resolve(SOURCE, **MLP_CONTRACT, registry=registry)
    return build(plan, device="cpu", registry=registry, initialization_seed=seed)


def snapshot(model):
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def assert_same_state(before, model):
    after = model.state_dict()
    assert list(before) == list(after)
    for key, value in before.items():
        assert torch.equal(value, after[key]), key


EXPECTED = {"runtime": RuntimeError, "value": ValueError, "custom": Fault, "oom": torch.OutOfMemoryError,
            "hndl": HNDLError, "interrupt": KeyboardInterrupt}


# ---------------------------------------------------------------------------------------------
# A node raising mid-forward
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("node", ["f0", "f1", "f2"])
@pytest.mark.parametrize("failure", list(EXPECTED))
@pytest.mark.parametrize("path", ["validating call", "fast path"])
def test_a_node_raising_mid_forward_leaves_the_model_usable(registry, node, failure, path):
    model = model_with_faults(registry)
    x = torch.randn(5, 4)
    reference = build(model.plan, device="cpu", registry=registry, initialization_seed=0)
    expected = reference(x=x)["output"]
    if path == "fast path":
        torch.testing.assert_close(model(x=x)["output"], expected, rtol=0, atol=0)
    before = snapshot(model)
    faulty = model.nodes[f"n_{node}"]
    faulty.failure = failure
    for _ in range(2):  # the fault repeats and is reported the same way each time
        with pytest.raises(EXPECTED[failure]) as caught:
            model(x=x)
        assert type(caught.value) is EXPECTED[failure]
        if failure != "interrupt":
            notes = [note for note in getattr(caught.value, "__notes__", ()) if note.startswith("HNDL:")]
            assert len(notes) == 1 and f"node '{node}'" in notes[0], notes
    assert all(parameter.grad is None for parameter in model.parameters())
    assert_same_state(before, model)
    faulty.failure = None
    for _ in range(2):
        torch.testing.assert_close(model(x=x)["output"], expected, rtol=0, atol=0)
    # a different signature is validated and works too
    torch.testing.assert_close(model(x=x[:2])["output"], expected[:2], rtol=0, atol=0)


def test_training_continues_after_a_failed_step_exactly_as_if_it_never_happened(registry):
    torch.manual_seed(0)
    batches = [(torch.randn(6, 4), torch.randn(6, 3)) for _ in range(5)]
    models = [model_with_faults(registry, seed=1) for _ in range(2)]
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) for model in models]
    for step, (x, y) in enumerate(batches):
        for index, (model, optimizer) in enumerate(zip(models, optimizers)):
            optimizer.zero_grad()
            if index == 1 and step in (1, 3):  # the second model fails once mid-forward, then retries
                model.nodes.n_f1.failure = "runtime"
                with pytest.raises(RuntimeError):
                    model(x=x)
                model.nodes.n_f1.failure = None
            loss = nn.functional.mse_loss(model(x=x)["output"], y)
            loss.backward()
            optimizer.step()
    assert_same_state(snapshot(models[0]), models[1])


def test_a_failure_after_backward_started_leaves_no_partial_gradient(registry):
    """Gradients exist only after a complete forward and backward; a forward that raises at the
    last node has built part of an autograd graph that is simply dropped."""
    model = model_with_faults(registry)
    x = torch.randn(4, 4, requires_grad=True)
    model.nodes.n_f2.failure = "runtime"
    with pytest.raises(RuntimeError):
        model(x=x)
    assert x.grad is None and all(parameter.grad is None for parameter in model.parameters())
    model.nodes.n_f2.failure = None
    model(x=x)["output"].sum().backward()
    assert x.grad is not None and all(parameter.grad is not None for parameter in model.parameters())


# ---------------------------------------------------------------------------------------------
# NaN and infinite inputs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_non_finite_inputs_pass_through_without_touching_state_or_the_cache(registry, value, mode):
    model = model_with_faults(registry)
    getattr(model, mode)()
    x = torch.randn(3, 4)
    finite = model(x=x)["output"].clone()
    validations = model._validations
    before = snapshot(model)
    poisoned = x.clone()
    poisoned[1, 2] = value
    out = model(x=poisoned)["output"]  # same signature: the fast path, no value checks
    assert not torch.isfinite(out[1]).all()
    torch.testing.assert_close(out[[0, 2]], finite[[0, 2]], rtol=0, atol=0)  # rows do not mix
    everything = model(x=torch.full((2, 4), value))["output"]  # a new signature: the checked path
    assert everything.shape == (2, 3) and not torch.isfinite(everything).all()
    assert_same_state(before, model)
    assert model._validations == validations + 1
    torch.testing.assert_close(model(x=x)["output"], finite, rtol=0, atol=0)
    assert model._validations == validations + 1  # the 3-row signature was still remembered


def test_nan_through_batch_norm_matches_plain_torch_in_both_modes():
    """HNDL does not sanitize: in training mode the running statistics absorb a NaN batch
    exactly as ``nn.BatchNorm2d`` does; in eval mode the buffers are untouched."""
    plan = hndl.resolve("conv(4, kernel_size=3, padding=1, name='c')\nbatch_norm(name='bn')\nrelu()",
                        input_shape=("B", 2, 5, 5), output_shape=("B", 4, 5, 5))
    model = build(plan, device="cpu", initialization_seed=0)
    twin = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    twin[0].load_state_dict(model.nodes.n_c.state_dict())
    twin[1].load_state_dict(model.nodes.n_bn.state_dict())
    x = torch.randn(3, 2, 5, 5)
    x[0, 0, 0, 0] = float("nan")
    model.eval(), twin.eval()
    before = snapshot(model)
    torch.testing.assert_close(model(x=x)["output"], twin(x), rtol=0, atol=0, equal_nan=True)
    assert_same_state(before, model)
    model.train(), twin.train()
    torch.testing.assert_close(model(x=x)["output"], twin(x), rtol=0, atol=0, equal_nan=True)
    for name, buffer in twin[1].named_buffers():
        torch.testing.assert_close(getattr(model.nodes.n_bn, name), buffer, rtol=0, atol=0, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# State mutations, exactly as the runtime-validation design defines them
# ---------------------------------------------------------------------------------------------

def mlp():
    plan = hndl.resolve("linear(8)\nrelu()\nlinear(3, name='head')", **MLP_CONTRACT)
    return build(plan, device="cpu", initialization_seed=0)


def test_state_filled_in_during_the_first_forward_is_e_runtime_on_every_call(registry):
    plan = hndl.resolve("lazy(name='z')", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    model = build(plan, device="cpu", registry=registry)
    for _ in range(3):
        with pytest.raises(HNDLError) as caught:
            model(x=torch.randn(2, 4))
        assert caught.value.code == "E_RUNTIME"
        assert "submodule 'nodes.n_z.inner.proj' was filled in with Linear" in caught.value.message


def test_state_registered_during_a_later_forward_is_e_runtime(registry):
    plan = hndl.resolve("late(name='t')", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    model = build(plan, device="cpu", registry=registry)
    x = torch.randn(2, 4)
    model(x=x)
    model(x=x)
    for expected in ("changed during forward", "no longer matches the build", "no longer matches the build"):
        with pytest.raises(HNDLError) as caught:
            model(x=x)
        assert caught.value.code == "E_RUNTIME" and expected in caught.value.message
        assert "buffer 'nodes.n_t.late' was added" in caught.value.message


def _graft(model):
    model.nodes.n_head.extra = nn.Linear(2, 2)


def _add_parameter(model):
    model.nodes.n_head.ghost = nn.Parameter(torch.zeros(3))


def _add_buffer(model):
    model.nodes.n_head.register_buffer("ghost", torch.zeros(3))


def _replace_node(model):
    model.nodes.n_head = nn.Linear(8, 3)


def _buffer_to_none(model):
    model.nodes.n_head.register_buffer("scale", torch.ones(3))  # hooked: reported like the others
    model.nodes.n_head.scale = None


@pytest.mark.parametrize("mutate, what", [
    (_graft, "submodule 'nodes.n_head.extra' was added"),
    (_add_parameter, "parameter 'nodes.n_head.ghost' was added"),
    (_add_buffer, "buffer 'nodes.n_head.ghost' was added"),
    (_replace_node, "submodule 'nodes.n_head' was replaced"),
    (_buffer_to_none, "buffer 'nodes.n_head.scale' was added"),
], ids=["graft", "parameter", "buffer", "replace", "buffer-then-none"])
def test_hooked_mutations_after_validation_are_e_runtime_on_every_call(mutate, what):
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    mutate(model)
    for _ in range(3):
        with pytest.raises(HNDLError) as caught:
            model(x=x)
        assert caught.value.code == "E_RUNTIME" and what in caught.value.message, caught.value


@pytest.mark.parametrize("name", ["g" * 2**20, "ghost\x1b]52;c;aGVsbG8=\x07"], ids=["a megabyte", "osc 52"])
def test_a_buffer_registered_under_a_hostile_name_is_named_bounded_and_escaped(name):
    """Issue 29, items 11 and 12: the state difference echoed the registered name whole and raw."""
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    model.nodes.n_head.register_buffer(name, torch.zeros(3))
    with pytest.raises(HNDLError) as caught:
        model(x=x)
    text = str(caught.value)
    assert caught.value.code == "E_RUNTIME" and "' was added" in caught.value.message
    if name.startswith("ghost"):
        assert "buffer 'nodes.n_head.ghost\\x1b]52;c;aGVsbG8=\\x07' was added" in text
    else:
        assert f"... ({len(name) + len('nodes.n_head.')} characters)' was added" in text
    assert "\x1b" not in text and "\x07" not in text and len(text) < 1_000


def test_a_deleted_parameter_raises_its_own_error_with_a_state_note_then_e_runtime_on_revalidation():
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    del model.nodes.n_head.weight  # no hook fires for del
    for _ in range(2):
        with pytest.raises(AttributeError) as caught:
            model(x=x)
        assert any("parameter 'nodes.n_head.weight' was removed" in note for note in caught.value.__notes__)
    with pytest.raises(HNDLError) as caught:
        model(x=x[:2])
    assert caught.value.code == "E_RUNTIME" and caught.value.message.endswith("'nodes.n_head.weight' was removed")


def _new_signature(model, x):
    return model(x=x[:2])


def _flip_training(model, x):
    model.eval()
    return model(x=x)


def _move(model, x):
    model.to("cpu")
    return model(x=x)


def _cast(model, x):
    model.float()
    return model(x=x)


def _hooked_registration_elsewhere_in_the_graph(model, x):
    # re-registering the very same parameter runs torch's registration hook without changing
    # anything: it only forces the next call to run the full state check
    model.nodes.n_n0.weight = model.nodes.n_n0.weight
    return model(x=x)


@pytest.mark.parametrize("revalidate", [_new_signature, _flip_training, _move, _cast,
                                        _hooked_registration_elsewhere_in_the_graph],
                         ids=["new signature", "train/eval", ".to()", "cast", "hooked registration"])
def test_the_documented_gap_param_none_runs_until_the_next_revalidation(revalidate):
    """The design's one silent case: ``linear.bias = None`` goes through no registration hook
    and Linear tolerates it, so an already validated signature runs bias-free; whatever
    forces the next full check reports it, as E_RUNTIME naming the parameter."""
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    model.nodes.n_head.bias = None
    hidden = model.nodes.n_n1(model.nodes.n_n0(x))
    for _ in range(2):  # silently bias-free on the validated signature: the documented gap
        torch.testing.assert_close(model(x=x)["output"], hidden @ model.nodes.n_head.weight.T)
    with pytest.raises(HNDLError) as caught:
        revalidate(model, x)
    assert caught.value.code == "E_RUNTIME"
    assert caught.value.message.endswith("parameter 'nodes.n_head.bias' was set to None"), caught.value.message
    with pytest.raises(HNDLError):  # and from then on on every call, the validated signature included
        model(x=x)


def test_a_deepcopy_of_a_mutated_model_reports_the_mutation_and_the_original_is_independent():
    model = mlp()
    x = torch.randn(3, 4)
    expected = model(x=x)["output"]
    clone = copy.deepcopy(model)
    clone.nodes.n_head.ghost = nn.Parameter(torch.zeros(1))
    with pytest.raises(HNDLError):
        clone(x=x)
    torch.testing.assert_close(model(x=x)["output"], expected, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Save and restore after a partial failure
# ---------------------------------------------------------------------------------------------

def test_save_and_restore_after_a_partial_failure_loses_nothing(registry, tmp_path):
    plan = hndl.resolve("conv(4, kernel_size=3, padding=1, name='c')\nbatch_norm(name='bn')\nrelu()\n"
                        "flatten()\nfaulty(name='f')\nlinear(3, name='head')",
                        input_shape=("B", 2, 5, 5), output_shape=("B", 3), registry=registry)
    model = build(plan, device="cpu", registry=registry, initialization_seed=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(1)
    data = [(torch.randn(4, 2, 5, 5), torch.randn(4, 3)) for _ in range(6)]
    for step, (x, y) in enumerate(data[:3]):
        optimizer.zero_grad()
        if step == 2:
            model.nodes.n_f.failure = "runtime"  # fails after conv and batch_norm ran (train mode)
            with pytest.raises(RuntimeError):
                model(x=x)
            model.nodes.n_f.failure = None
        nn.functional.mse_loss(model(x=x)["output"], y).backward()
        optimizer.step()
    # the failed forward already moved batch_norm's running statistics, as plain torch would:
    # the checkpoint must carry exactly what the live module holds
    (tmp_path / "plan.json").write_text(model.plan.to_json(), encoding="utf-8")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp_path / "state.pt")

    saved = torch.load(tmp_path / "state.pt", weights_only=True)
    restored = restore((tmp_path / "plan.json"), saved["model"], device="cpu", registry=registry, like="build")
    assert restored.plan.semantic_digest == model.plan.semantic_digest
    assert_same_state(snapshot(model), restored)
    resumed = torch.optim.Adam(restored.parameters(), lr=1e-2)
    resumed.load_state_dict(saved["optimizer"])
    model.eval(), restored.eval()
    probe = torch.randn(2, 2, 5, 5)
    torch.testing.assert_close(restored(x=probe)["output"], model(x=probe)["output"], rtol=0, atol=0)
    model.train(), restored.train()
    for x, y in data[3:]:  # both continue training identically
        for net, opt in ((model, optimizer), (restored, resumed)):
            opt.zero_grad()
            nn.functional.mse_loss(net(x=x)["output"], y).backward()
            opt.step()
    assert_same_state(snapshot(model), restored)


def test_restoring_a_state_broken_in_one_entry_fails_before_loading_and_the_live_model_is_intact(registry):
    model = model_with_faults(registry, seed=5)
    x = torch.randn(2, 4)
    expected = model(x=x)["output"]
    state = model.state_dict()
    broken = dict(state)
    broken["nodes.n_head.weight"] = torch.zeros(4, 8)
    with pytest.raises(HNDLError) as caught:
        restore(model.plan.to_json(), broken, device="cpu", registry=registry)
    assert caught.value.code == "E_INTEGRITY"
    torch.testing.assert_close(model(x=x)["output"], expected, rtol=0, atol=0)
    again = restore(model.plan.to_json(), state, device="cpu", registry=registry, like="build")
    torch.testing.assert_close(again(x=x)["output"], expected, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:Validating sparse tensor invariants:UserWarning")
def test_a_weights_only_state_with_one_sparse_entry_is_refused_before_the_first_copy(registry, tmp_path):
    """Issue 15, item 10: torch.load(weights_only=True) accepts a sparse tensor, and torch's own
    load_state_dict used to copy three of four entries before failing on it."""
    from hndl.torch.restore import load_state

    live = build(hndl.resolve("linear(8, name='l1')\nrelu()\nout = linear(3, name='head')", **MLP_CONTRACT,
                              registry=registry), device="cpu", registry=registry, initialization_seed=1)
    state = {key: torch.full_like(value, 7.0) for key, value in live.state_dict().items()}
    assert list(state)[-1] == "nodes.n_head.bias" and len(state) == 4
    state["nodes.n_head.bias"] = state["nodes.n_head.bias"].to_sparse()
    torch.save(state, tmp_path / "state.pt")
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)
    assert loaded["nodes.n_head.bias"].layout is torch.sparse_coo
    before = snapshot(live)
    x = torch.randn(2, 4)
    expected = live(x=x)["output"]
    with pytest.raises(HNDLError) as caught:
        load_state(live, loaded)
    assert caught.value.code == "E_INTEGRITY" and caught.value.location.node == "head"
    assert "'nodes.n_head.bias' has layout sparse_coo, not a dense (strided) tensor" in caught.value.message
    assert_same_state(before, live)
    torch.testing.assert_close(live(x=x)["output"], expected, rtol=0, atol=0)
    with pytest.raises(HNDLError) as caught:
        restore(live.plan.to_json(), loaded, device="cpu", registry=registry)
    assert caught.value.code == "E_INTEGRITY"
