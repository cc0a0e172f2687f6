"""Runtime validation once per input signature (the runtime-validation design, §11).

The first call for a signature (each input's shape, dtype and device, the training flag and
the autocast state) runs every port check and the registered-state check; later calls with a
remembered signature run the straight-line fast path. These tests pin the cache and each
invalidation, the exact error texts, that exceptions raised inside nodes keep their type and
gain one note, and how registered-state mutations are reported.
"""

import copy

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError
from hndl.torch import build, network
from hndl.torch import state_watch
from hndl.torch.graph_module import MAX_SIGNATURES, NOTE_PREFIX

MLP = "linear(8)\nrelu()\nlinear(3, name='head')"
MLP_CONTRACT = {"input_shape": ("B", 4), "output_shape": ("B", 3)}


def mlp(**kwargs):
    return build(hndl.resolve(MLP, **MLP_CONTRACT), device="cpu", **kwargs)


def notes(error):
    return [note for note in getattr(error, "__notes__", ()) if note.startswith(NOTE_PREFIX)]


@pytest.fixture
def registry():
    """A registry with the small misbehaving operators these tests need."""
    registry = hndl.Registry.builtins()

    @registry.operator("flaky", identity="test.flaky", summary="Identity until told to fail.",
                       shape="x[B, D] -> out[B, D]")
    class Flaky(nn.Module):
        """Returns its input; ``failure`` (a plain attribute, not state) makes it raise."""

        def __init__(self):
            super().__init__()
            self.failure = None
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.failure == "matmul":
                return x @ torch.ones(3, 3)
            if self.failure == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if self.failure == "hndl":
                raise HNDLError("E_RUNTIME", "flaky gave up")
            return x

    @registry.operator("shrink", identity="test.shrink", summary="Identity until told to drift.",
                       shape="x[B, D] -> out[B, D]")
    class Shrink(nn.Module):
        """Returns its input, or only its first two features once ``drift`` is set."""

        def __init__(self):
            super().__init__()
            self.drift = False

        def forward(self, x):
            return x[:, :2] if self.drift else x

    @registry.operator("scaled", identity="test.scaled", summary="Multiply by a buffer.",
                       shape="x[B, D] -> out[B, D]")
    class Scaled(nn.Module):
        """Multiplies by a registered buffer of ones."""

        def __init__(self, D):
            super().__init__()
            self.register_buffer("scale", torch.ones(D))

        def forward(self, x):
            return x * self.scale

    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_module("proj", None)

    @registry.operator("lazy", identity="test.lazy", summary="Creates a layer on first use.",
                       shape="x[B, D] -> out[B, D]")
    class Lazy(nn.Module):
        """The lazy-initialisation bug: fills a declared-None submodule slot during forward."""

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

    @registry.operator("probe", identity="test.probe", summary="Identity, or one row when told.",
                       shape="x[B, D] -> out[B, D]")
    class Probe(nn.Module):
        """Returns its input, or only its first row once ``truncate`` is set."""

        def __init__(self):
            super().__init__()
            self.truncate = False

        def forward(self, x):
            return x[:1] if self.truncate else x

    @registry.operator("wrapped", identity="test.wrapped", summary="A built graph inside a node.",
                       shape="x[B, D] -> out[B, D]")
    class Wrapped(nn.Module):
        """Runs an inner HNDL graph (``linear`` then ``flaky`` named 'deep')."""

        def __init__(self, D):
            super().__init__()
            plan = hndl.resolve(f"linear({D})\nflaky(name='deep')", input_shape=("B", D),
                                output_shape=("B", D), registry=registry)
            self.inner = build(plan, device="cpu", registry=registry)

        def forward(self, x):
            return self.inner(x=x)["output"]

    return registry


def custom(source, registry, input_shape=("B", 4), output_shape=("B", 4)):
    plan = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry)
    return build(plan, device="cpu", registry=registry)


# -- the cache and its invalidations -------------------------------------------------------------
def test_each_signature_is_validated_once():
    model = mlp()
    x = torch.randn(3, 4)
    first = model(x=x)["output"]
    assert model._validations == 1
    for _ in range(3):
        torch.testing.assert_close(model(x=x)["output"], first)
        model(x=torch.randn(3, 4))
    assert model._validations == 1
    assert len(model._signatures) == 1


def test_a_new_batch_size_is_validated_and_remembered():
    model = mlp()
    model(x=torch.randn(3, 4))
    model(x=torch.randn(5, 4))
    assert model._validations == 2
    model(x=torch.randn(3, 4))
    model(x=torch.randn(5, 4))
    assert model._validations == 2


def test_the_training_flag_is_part_of_the_signature():
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    model.eval()
    model(x=x)
    assert model._validations == 2
    model.train()
    model(x=x)
    assert model._validations == 2


def test_autocast_is_part_of_the_signature():
    relus = build(hndl.resolve("relu()\nrelu()", input_shape=("B", 4), output_shape=("B", 4)), device="cpu")
    x = torch.randn(3, 4)
    relus(x=x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        relus(x=x)
        relus(x=x)
    assert relus._validations == 2
    relus(x=x)
    assert relus._validations == 2
    model = mlp()
    model(x=x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x=x)["output"]  # a floating port may carry autocast's dtype (SPEC.md §11)
        assert out.dtype is torch.bfloat16
        with pytest.raises(HNDLError) as error:
            model(x=x.to(torch.float16))  # neither the contract's float32 nor autocast's bfloat16
    assert model._validations == 3
    assert error.value.code == "E_RUNTIME"
    assert error.value.message.startswith("input 'x': expected dtype float32 or bfloat16 (autocast), got float16")


def test_moving_or_casting_the_module_forgets_every_signature():
    model = mlp()
    model(x=torch.randn(3, 4))
    model(x=torch.randn(2, 4))
    model.to("cpu")
    assert model._signatures == {}
    model(x=torch.randn(3, 4))
    assert model._validations == 3
    model.double()
    assert model._signatures == {}
    assert model(x=torch.randn(3, 4, dtype=torch.float64))["output"].dtype is torch.float64
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 4))
    assert error.value.message.startswith("input 'x': expected dtype float64, got float32")


def test_registering_state_on_a_module_of_the_graph_forces_revalidation():
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    head = model.nodes.n_head
    head.weight = nn.Parameter(head.weight.detach().clone())  # same shape: legitimate
    assert model._signatures == {}
    model(x=x)
    assert model._validations == 2
    model(x=x)
    assert model._validations == 2
    assert model in state_watch.watched_graphs(head)


def test_unrelated_modules_do_not_invalidate():
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    other = mlp()
    nn.Linear(4, 4).register_buffer("extra", torch.zeros(1))
    other.nodes.n_head.ghost = nn.Parameter(torch.zeros(1))
    model(x=x)
    assert model._validations == 1
    assert len(model._signatures) == 1


def test_at_most_64_signatures_are_remembered():
    relus = build(hndl.resolve("relu()", input_shape=("B", 2), output_shape=("B", 2)), device="cpu")
    for batch in range(1, MAX_SIGNATURES + 1):
        relus(x=torch.randn(batch, 2))
    assert len(relus._signatures) == MAX_SIGNATURES
    relus(x=torch.randn(MAX_SIGNATURES + 1, 2))
    assert len(relus._signatures) == 1
    relus(x=torch.randn(1, 2))
    assert relus._validations == MAX_SIGNATURES + 2


def test_load_state_dict_in_place_keeps_the_cache_and_assign_revalidates():
    model = mlp()
    x = torch.ones(3, 4)
    model(x=x)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    model.load_state_dict(state)
    assert torch.all(model(x=x)["output"] == 0)
    assert model._validations == 1
    model.load_state_dict({name: torch.ones_like(value) for name, value in state.items()}, assign=True)
    assert torch.all(model(x=x)["output"] == 41)  # relu(4 + 1) * 8 + 1
    assert model._validations == 2


# -- errors from HNDL's own checks ---------------------------------------------------------------
def test_a_broken_input_after_the_first_call_reports_the_contract():
    model = mlp()
    model(x=torch.randn(3, 4))
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 5))
    assert error.value.code == "E_RUNTIME"
    assert error.value.message == (
        "input 'x': expected shape [B=3, 4], got [3, 5]\n"
        "  expected [B=3, 4]:float32 on cpu\n"
        "  got      [3, 5]:float32 on cpu"
    )
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 4, dtype=torch.float64))
    assert error.value.message == (
        "input 'x': expected dtype float32, got float64\n"
        "  expected [B=3, 4]:float32 on cpu\n"
        "  got      [3, 4]:float64 on cpu"
    )
    with pytest.raises(HNDLError) as error:
        model(x=[[1.0] * 4])
    assert error.value.code == "E_RUNTIME" and "input 'x'" in error.value.message


def test_a_second_input_with_another_batch_names_the_batch_source():
    model = build(hndl.resolve("concat(x, y)", input_shape={"x": ("B", 4), "y": ("B", 6)},
                               output_shape=("B", 10)), device="cpu")
    model(x=torch.randn(3, 4), y=torch.randn(3, 6))
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 4), y=torch.randn(2, 6))
    assert error.value.code == "E_RUNTIME"
    assert error.value.message == (
        "input 'y': expected shape [B=3, 6], got [2, 6]\n"
        "  expected [B=3, 6]:float32 on cpu\n"
        "  got      [2, 6]:float32 on cpu\n"
        "  B=3 is this call's batch size, read from input 'x'"
    )


def test_binding_errors_come_before_any_node_runs_on_every_path(registry):
    model = custom("flaky()", registry)
    model(x=torch.randn(2, 4))
    flaky = model.nodes.n_n0
    for call in (lambda: model(), lambda: model(y=torch.randn(2, 4)),
                 lambda: model(x=torch.randn(2, 4), y=torch.randn(2, 4))):
        with pytest.raises(HNDLError) as error:
            call()
        assert error.value.code == "E_BINDING"
    assert flaky.calls == 1


def test_an_output_port_that_breaks_its_batch_multiple_is_reported(registry):
    source = "both = concat(x, x, axis=0)\nprobe(both, name='p')\na, b = chunk(2, dim=0)\nadd(a, b)"
    model = custom(source, registry)
    model.nodes.n_p.truncate = True
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 4))
    assert error.value.message == (
        "probe 'p' output 'out': expected shape [2*B=6, 4], got [1, 4]\n"
        "  expected [2*B=6, 4]:float32 on cpu\n"
        "  got      [1, 4]:float32 on cpu\n"
        "  B=3 is this call's batch size, read from input 'x'"
    )
    assert error.value.location.node == "p" and error.value.location.line == 2


# -- exceptions raised inside nodes --------------------------------------------------------------
FLAKY_NOTE = (
    "HNDL: raised inside node 'odd' (flaky, line 2, column 1)\n"
    "  input 'x': got [2, 4]:float32 on cpu; contract [B=2, 4]:float32 on cpu"
)


@pytest.mark.parametrize("validated", [False, True], ids=["validating call", "fast path"])
def test_a_torch_error_inside_a_node_keeps_its_type_and_gains_one_note(registry, validated):
    model = custom("linear(4)\nflaky(name='odd')", registry, input_shape=("B", 8))
    x = torch.randn(2, 8)
    if validated:
        model(x=x)
    model.nodes.n_odd.failure = "matmul"
    with pytest.raises(RuntimeError) as error:
        model(x=x)
    assert type(error.value) is RuntimeError
    assert str(error.value) == "mat1 and mat2 shapes cannot be multiplied (2x4 and 3x3)"
    assert error.value.__notes__ == [FLAKY_NOTE]
    assert model._validations == 1


def test_out_of_memory_keeps_its_type(registry):
    model = custom("linear(4)\nflaky(name='odd')", registry, input_shape=("B", 8))
    x = torch.randn(2, 8)
    model(x=x)
    model.nodes.n_odd.failure = "oom"
    with pytest.raises(torch.OutOfMemoryError) as error:
        model(x=x)
    assert type(error.value) is torch.OutOfMemoryError
    assert error.value.__notes__ == [FLAKY_NOTE]


def test_an_hndl_error_inside_a_node_keeps_its_message_and_gains_a_note(registry):
    model = custom("linear(4)\nflaky(name='odd')", registry, input_shape=("B", 8))
    model.nodes.n_odd.failure = "hndl"
    for _ in range(2):
        with pytest.raises(HNDLError) as error:
            model(x=torch.randn(2, 8))
        assert error.value.code == "E_RUNTIME" and error.value.message == "flaky gave up"
        assert error.value.__notes__ == [FLAKY_NOTE]


def test_nested_graphs_keep_only_the_innermost_note(registry):
    model = custom("relu()\nwrapped(name='outer')", registry)
    x = torch.randn(2, 4)
    model(x=x)
    inner = model.nodes.n_outer.inner
    inner.nodes.n_deep.failure = "matmul"
    for _ in range(2):
        with pytest.raises(RuntimeError) as error:
            model(x=x)
        assert error.value.__notes__ == [
            "HNDL: raised inside node 'deep' (flaky, line 2, column 1)\n"
            "  input 'x': got [2, 4]:float32 on cpu; contract [B=2, 4]:float32 on cpu"
        ]
    # the inner graph's modules are watched by both graphs
    assert set(state_watch.watched_graphs(inner.nodes.n_deep)) == {inner, model}


def test_an_upstream_node_that_drifts_after_validation_is_named_at_the_port(registry):
    model = custom("shrink(name='d')\nlinear(3, name='head')", registry, output_shape=("B", 3))
    x = torch.randn(2, 4)
    model(x=x)
    model.nodes.n_d.drift = True
    with pytest.raises(RuntimeError) as error:
        model(x=x)
    (note,) = error.value.__notes__
    lines = note.splitlines()
    assert lines[0] == "HNDL: raised inside node 'head' (linear, line 2, column 1)"
    assert lines[1] == "  linear 'head' input 'x' (from node:d/out): expected shape [B=2, 4], got [2, 2]"
    assert lines[2].startswith("  shrink 'd' returned this")


# -- registered-state mutations ------------------------------------------------------------------
def test_state_created_during_the_first_forward_is_rejected(registry):
    model = custom("lazy()", registry)
    for _ in range(2):
        with pytest.raises(HNDLError) as error:
            model(x=torch.randn(2, 4))
        assert error.value.code == "E_RUNTIME"
    first = "registered state of lazy 'n0' changed during forward: submodule 'nodes.n_n0.inner.proj' was filled in with Linear (it was None at build)"
    model = custom("lazy()", registry)
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(2, 4))
    assert error.value.message == first
    assert str(error.value).startswith("E_RUNTIME (node n0; line 1, column 1): " + first)
    assert "create it in __init__" in error.value.remedies[0]
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(2, 4))
    assert error.value.message == first.replace("changed during forward", "no longer matches the build")


def test_state_registered_during_a_later_forward_is_rejected(registry):
    model = custom("late()", registry)
    x = torch.randn(2, 4)
    model(x=x)
    model(x=x)
    with pytest.raises(HNDLError) as error:
        model(x=x)
    assert error.value.message == (
        "registered state of late 'n0' changed during forward: buffer 'nodes.n_n0.late' was added"
    )
    with pytest.raises(HNDLError) as error:
        model(x=x)
    assert "no longer matches the build: buffer 'nodes.n_n0.late' was added" in error.value.message


def _graft(model):
    model.nodes.n_head.extra = nn.Linear(2, 2)


def _add_parameter(model):
    model.nodes.n_head.ghost = nn.Parameter(torch.zeros(3))


def _replace_node(model):
    model.nodes.n_head = nn.Linear(8, 3)


@pytest.mark.parametrize("mutate, expected", [
    (_graft, "registered state of linear 'head' no longer matches the build: submodule 'nodes.n_head.extra' was added (Linear)"),
    (_add_parameter, "registered state of linear 'head' no longer matches the build: parameter 'nodes.n_head.ghost' was added"),
    (_replace_node, "registered state of linear 'head' no longer matches the build: submodule 'nodes.n_head' was replaced with another Linear (it was Linear at build)"),
])
def test_hooked_mutations_after_the_first_call_fail_on_every_call(mutate, expected):
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    mutate(model)
    for _ in range(3):
        with pytest.raises(HNDLError) as error:
            model(x=x)
        assert error.value.code == "E_RUNTIME" and error.value.message == expected


def test_a_buffer_set_to_none_fails_on_every_call(registry):
    model = custom("scaled(name='s')", registry)
    x = torch.randn(2, 4)
    model(x=x)
    model.nodes.n_s.scale = None
    for _ in range(3):
        with pytest.raises(HNDLError) as error:
            model(x=x)
        assert error.value.message == (
            "registered state of scaled 's' no longer matches the build: buffer 'nodes.n_s.scale' was set to None"
        )


def test_a_deleted_parameter_raises_attribute_error_with_a_state_note_on_every_call():
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    del model.nodes.n_head.weight  # no registration hook fires for del
    for _ in range(3):
        with pytest.raises(AttributeError) as error:
            model(x=x)
        assert error.value.__notes__ == [
            "HNDL: raised inside node 'head' (linear, line 3, column 1)\n"
            "  registered state no longer matches the build: parameter 'nodes.n_head.weight' was removed\n"
            "  input 'x': got [3, 8]:float32 on cpu; contract [B=3, 8]:float32 on cpu"
        ]
    with pytest.raises(HNDLError) as error:  # a new signature runs the full check first
        model(x=torch.randn(2, 4))
    assert error.value.message.endswith("parameter 'nodes.n_head.weight' was removed")


@pytest.mark.parametrize("how", ["assign", "data"])
def test_a_wrong_shaped_parameter_raises_runtime_error_on_every_call(how):
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    if how == "assign":
        model.nodes.n_head.weight = nn.Parameter(torch.randn(3, 5))
    else:
        model.nodes.n_head.weight.data = torch.randn(3, 5)
    for _ in range(3):
        with pytest.raises(RuntimeError) as error:
            model(x=x)
        assert type(error.value) is RuntimeError
        assert len(notes(error.value)) == 1 and "node 'head'" in notes(error.value)[0]


def test_a_parameter_set_to_none_is_reported_at_the_next_revalidation():
    """The documented gap: ``param = None`` runs no registration hook, and Linear tolerates a
    missing bias, so calls with an already validated signature run bias-free; the next full
    check (here a new batch size) reports it."""
    model = mlp()
    x = torch.randn(3, 4)
    model(x=x)
    model.nodes.n_head.bias = None
    hidden = model.nodes.n_n1(model.nodes.n_n0(x))
    torch.testing.assert_close(model(x=x)["output"], hidden @ model.nodes.n_head.weight.T)
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(2, 4))
    assert error.value.message == (
        "registered state of linear 'head' no longer matches the build: parameter 'nodes.n_head.bias' was set to None"
    )


def test_deepcopy_gives_the_clone_its_own_cache_and_watch():
    model = mlp()
    x = torch.randn(3, 4)
    expected = model(x=x)["output"]
    clone = copy.deepcopy(model)
    assert clone._signatures == {} and clone._validations == 0
    assert clone.plan is model.plan
    assert clone._steps[2].module is clone.nodes.n_head is not model.nodes.n_head
    torch.testing.assert_close(clone(x=x)["output"], expected)
    assert clone in state_watch.watched_graphs(clone.nodes.n_head)
    assert clone not in state_watch.watched_graphs(model.nodes.n_head)
    clone.nodes.n_head.ghost = nn.Parameter(torch.zeros(1))
    with pytest.raises(HNDLError) as error:
        clone(x=x)
    assert error.value.message.endswith("parameter 'nodes.n_head.ghost' was added")
    torch.testing.assert_close(model(x=x)["output"], expected)
    assert model._validations == 1
    model.nodes.n_n0.ghost = nn.Parameter(torch.zeros(1))
    with pytest.raises(HNDLError) as error:
        model(x=x)
    assert error.value.message.endswith("parameter 'nodes.n_n0.ghost' was added")


def test_deepcopy_of_a_mutated_module_still_reports_the_mutation():
    model = mlp()
    model(x=torch.randn(3, 4))
    del model.nodes.n_head.bias
    clone = copy.deepcopy(model)
    with pytest.raises(HNDLError) as error:
        clone(x=torch.randn(3, 4))
    assert error.value.message.endswith("parameter 'nodes.n_head.bias' was removed")


def test_replacing_the_nodes_container_is_reported():
    model = mlp()
    model(x=torch.randn(3, 4))
    model.nodes = nn.ModuleDict(dict(model.nodes.items()))
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(3, 4))
    assert error.value.message == "registered state of the graph no longer matches the build: submodule 'nodes' was replaced with ModuleDict"


# -- batch multiples and the facade --------------------------------------------------------------
def test_a_chunk_and_concat_graph_runs_at_batches_1_3_and_64():
    source = "both = concat(x, x, axis=0)\nthree = concat(both, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, c)"
    model = build(hndl.resolve(source, input_shape=("B", 3, 8, 8), output_shape=("B", 3, 8, 8)), device="cpu")
    for batch in (1, 3, 64):
        for _ in range(2):
            x = torch.randn(batch, 3, 8, 8, requires_grad=True)
            out = model(x=x)["output"]
            torch.testing.assert_close(out, 2 * x)
            (grad,) = torch.autograd.grad(out.square().sum(), x, create_graph=True)
            torch.testing.assert_close(grad, 8 * x)
            (second,) = torch.autograd.grad(grad.sum(), x)
            torch.testing.assert_close(second, torch.full_like(x, 8.0))
    assert model._validations == 3
    with pytest.raises(HNDLError) as error:
        model(x=torch.randn(2, 3, 8, 4))
    assert error.value.message.startswith("input 'x': expected shape [B=2, 3, 8, 8], got [2, 3, 8, 4]")


def test_the_positional_fast_path_serves_a_facade():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 4)
    expected = model(x)
    torch.testing.assert_close(model._positional(model, (x,)), expected)
    torch.testing.assert_close(model._positional(model, (x,)), expected)
    with pytest.raises(HNDLError) as error:
        model._positional(model, (x, x))
    assert error.value.code == "E_BINDING"
    with pytest.raises(HNDLError) as error:
        model._positional(model, (torch.randn(3, 5),))
    assert error.value.message.startswith("input 'x': expected shape [B=3, 4], got [3, 5]")


def test_an_error_from_torch_compile_machinery_says_so(registry):
    model = custom("linear(4)\nflaky(name='odd')", registry, input_shape=("B", 8))

    class BackendFailure(RuntimeError):
        __module__ = "torch._dynamo.exc"

    def fail(x):
        raise BackendFailure("backend compiler failed")

    model(x=torch.randn(2, 8))
    model.nodes.n_odd.forward = fail
    with pytest.raises(BackendFailure) as error:
        model(x=torch.randn(2, 8))
    (note,) = error.value.__notes__
    assert note.splitlines()[1] == "  the error comes from torch.compile (dynamo/inductor), not from the node's own code"


def test_a_deleted_model_is_freed_by_reference_counting():
    """No reference cycle (generated code, state record, watches, failure notes) keeps the
    modules alive until the cyclic collector runs: deleting the model frees them at once."""
    import gc
    import weakref

    enabled = gc.isenabled()
    gc.disable()
    try:
        model = mlp()
        model(x=torch.randn(3, 4))
        model(x=torch.randn(3, 4))
        model.nodes.n_head.weight.data = torch.randn(3, 5)
        try:
            model(x=torch.randn(3, 4))
        except RuntimeError:
            pass
        layer = weakref.ref(model.nodes.n_n0)
        del model
        assert layer() is None
    finally:
        if enabled:
            gc.enable()


def test_the_registration_hooks_are_installed_once_and_ignore_other_modules():
    assert len(state_watch._HANDLES) == 3
    state_watch.install()
    assert len(state_watch._HANDLES) == 3
    assert state_watch.watched_graphs(nn.Linear(2, 2)) == ()


def test_pickling_rebuilds_the_runtime_and_keeps_the_build_record():
    import pickle

    model = mlp()
    x = torch.randn(3, 4)
    expected = model(x=x)["output"]
    del model.nodes.n_head.bias  # recorded at build: the copy must still see it as removed
    restored = pickle.loads(pickle.dumps(model))
    assert restored._signatures == {} and restored in state_watch.watched_graphs(restored.nodes.n_head)
    with pytest.raises(HNDLError) as error:
        restored(x=x)
    assert error.value.message.endswith("parameter 'nodes.n_head.bias' was removed")
    fresh = pickle.loads(pickle.dumps(mlp()))
    fresh.load_state_dict(mlp().state_dict())
    assert fresh(x=x)["output"].shape == expected.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
def test_signatures_follow_the_device_and_moves_on_cuda():
    model = build(hndl.resolve(MLP, **MLP_CONTRACT), device="cuda")
    x = torch.randn(3, 4, device="cuda")
    expected = model(x=x)["output"]
    torch.testing.assert_close(model(x=x)["output"], expected)
    assert model._validations == 1
    with pytest.raises(HNDLError) as error:
        model(x=x.cpu())
    assert error.value.message.startswith("input 'x': expected device cuda:0, got cpu")
    model.to("cpu")
    torch.testing.assert_close(model(x=x.cpu())["output"], expected.cpu())
    with pytest.raises(HNDLError) as error:
        model(x=x)
    assert error.value.message.splitlines()[1] == "  expected [B=3, 4]:float32 on cpu"
    model.to("cuda")
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x=x)["output"], expected)


# -- where notes point, and positional calls (issue 15, items 22 and 24) --------------------------
def test_a_note_for_a_node_captured_from_a_callable_prints_only_what_is_known(registry):
    """Native capture records the call's line but not its column: the note says ``line N``,
    never ``column None``."""

    def embedding(x):
        hidden = registry.ops.linear(x, 4)
        return registry.ops.flaky(hidden, name="odd")

    plan = hndl.resolve_callable(embedding, input_shape=("B", 8), output_shape=("B", 4), registry=registry)
    line = embedding.__code__.co_firstlineno + 2
    assert plan.nodes[1].source["line"] == line and plan.nodes[1].source["column"] is None
    model = build(plan, device="cpu", registry=registry)
    model.nodes.n_odd.failure = "matmul"
    with pytest.raises(RuntimeError) as error:
        model(x=torch.randn(2, 8))
    (note,) = notes(error.value)
    assert note.splitlines()[0] == f"HNDL: raised inside node 'odd' (flaky, line {line})"
    assert "None" not in note


def test_a_graph_module_called_positionally_is_e_binding_before_any_node_runs(registry):
    model = custom("flaky()", registry)
    x = torch.randn(2, 4)
    model(x=x)
    for call in (lambda: model(x), lambda: model(x, x=x), lambda: model.forward(x)):
        with pytest.raises(HNDLError) as error:
            call()
        assert error.value.code == "E_BINDING"
        assert error.value.message.startswith("a GraphModule takes its inputs by keyword (x=...); got 1 positional")
        assert "network facade" in error.value.remedies[0]
    assert model.nodes.n_n0.calls == 1
    assert torch.equal(model(x=x)["output"], x)


def test_a_positional_call_through_hooks_is_e_binding_unless_a_hook_binds_it(registry):
    model = custom("flaky()", registry)
    x = torch.randn(2, 4)
    handle = model.register_forward_hook(lambda module, args, output: output)
    with pytest.raises(HNDLError) as error:
        model(x)
    assert error.value.code == "E_BINDING"
    handle.remove()
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: ((), {"x": args[0]}), with_kwargs=True)
    assert torch.equal(model(x)["output"], x)  # forward checks what the hooks hand it
    handle.remove()


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph breaks", "fullgraph"])
def test_a_compiled_graph_module_called_positionally_fails_naming_hndl(fullgraph):
    torch._dynamo.reset()
    try:
        model = mlp()
        x = torch.randn(3, 4)
        compiled = torch.compile(model, backend="eager", fullgraph=fullgraph)
        torch.testing.assert_close(compiled(x=x)["output"], model(x=x)["output"])
        with pytest.raises(Exception) as error:
            compiled(x)
        if fullgraph:
            assert "HNDL: a contract or registered-state check failed while tracing" in str(error.value)
        else:
            assert isinstance(error.value, HNDLError) and error.value.code == "E_BINDING"
    finally:
        torch._dynamo.reset()
