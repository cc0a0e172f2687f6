"""torch.compile traces a built module with no graph break and matches eager execution.

Under ``torch.compiler.is_compiling()`` forward traces the full checked program (every port
check and the registered-state check, which dynamo turns into guards) and never consults the
per-signature cache, so a module compiled after eager calls traces the same program.
"""

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import hndl
from hndl.torch import build, network

MLP = """
linear(64)
relu()
linear()
"""
MLP_CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
BRANCHED = """
a, b = chunk(2)
h = relu(a)
j = linear(h, 4, name="proj")
k = add(j, b)
both = concat(k, b, axis=0)
first, second = chunk(both, 2, dim=0)
add(first, linear(second, 4))
"""
BRANCHED_CONTRACT = {"input_shape": ("B", 8), "output_shape": ("B", 4)}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("called_eagerly_first", [False, True])
def test_the_spec_mlp_compiles_with_fullgraph_and_matches_eager(called_eagerly_first):
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 128)
    if called_eagerly_first:
        model(x)
        model(x)
    expected = model(x)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), expected)
    torch.testing.assert_close(compiled(x), expected)


def test_a_branched_graph_compiles_with_fullgraph_and_matches_eager():
    model = network(BRANCHED, device="cpu", **BRANCHED_CONTRACT)
    x = torch.randn(5, 8, requires_grad=True)
    expected = model(x)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, expected)
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected_grad,) = torch.autograd.grad(model(x).sum(), x)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("source, contract", [(MLP, MLP_CONTRACT), (BRANCHED, BRANCHED_CONTRACT)], ids=["mlp", "branched"])
def test_dynamo_explain_finds_one_graph_and_no_break(source, contract):
    module = build(hndl.resolve(source, **contract), device="cpu")
    x = torch.randn(2, contract["input_shape"][1])
    module(x=x)
    explanation = torch._dynamo.explain(module)(x=x)
    assert explanation.graph_count == 1
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_compiled_dictionary_outputs_match_eager():
    module = build(hndl.resolve(BRANCHED, **BRANCHED_CONTRACT), device="cpu")
    x = torch.randn(4, 8)
    compiled = torch.compile(module, backend="eager", fullgraph=True)
    result = compiled(x=x)
    assert list(result) == ["output"]
    torch.testing.assert_close(result["output"], module(x=x)["output"])


def test_a_contract_violation_still_fails_under_compile():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    compiled = torch.compile(model, backend="eager")
    with pytest.raises(hndl.HNDLError) as error:
        compiled(torch.randn(3, 127))
    assert error.value.code == "E_RUNTIME"
    assert error.value.message.startswith("input 'x': expected shape [B=3, 128], got [3, 127]")


def test_registered_state_changed_after_compiling_is_reported():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 128)
    compiled = torch.compile(model, backend="eager")
    compiled(x)
    model.nodes.n_n2.register_buffer("ghost", torch.zeros(1))
    with pytest.raises(hndl.HNDLError) as error:
        compiled(x)
    assert error.value.message == (
        "registered state of linear 'n2' no longer matches the build: buffer 'nodes.n_n2.ghost' was added"
    )


def test_under_fullgraph_a_failed_check_names_hndl_in_the_dynamo_error():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    compiled(torch.randn(3, 128))
    with pytest.raises(Exception) as error:
        compiled(torch.randn(3, 127))
    assert "HNDL: a contract or registered-state check failed while tracing" in str(error.value)


def test_a_state_check_marked_by_a_hook_is_traced_once_then_dropped():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 128)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    expected = model(x)
    head = model.nodes.n_n2
    head.weight = torch.nn.Parameter(head.weight.detach().clone())  # legitimate: same name and shape
    assert model._state_dirty
    torch.testing.assert_close(compiled(x), expected)
    assert not model._state_dirty
    torch.testing.assert_close(compiled(x), expected)


def test_the_positional_fast_path_compiles_too():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 128)
    expected = model(x)
    compiled = torch.compile(lambda t: model.forward(t), backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), expected)


def test_modules_of_one_architecture_share_one_compiled_graph():
    """Beyond dynamo's recompile limit (8): a code object per module would leave the ninth uncompiled."""
    counters.clear()
    x = torch.randn(3, 128)
    for _ in range(12):
        model = network(MLP, device="cpu", **MLP_CONTRACT)
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), model(x))
    assert counters["stats"]["unique_graphs"] == 1


def _plus_one(module, args, output):
    return output + 1


def test_hooks_present_when_compiled_run_in_the_compiled_model():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    x = torch.randn(3, 128)
    model.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    model.register_forward_hook(_plus_one)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model.forward(x * 2) + 1)


def test_hooks_added_after_compiling_follow_torchs_policy_for_nn_modules():
    """Like a torch.nn container: not guarded by default, guarded when torch is told to."""
    x = torch.randn(3, 128)

    def runs_a_late_hook(module) -> bool:
        compiled = torch.compile(module, backend="eager")
        before = compiled(x)
        module.register_forward_hook(_plus_one)
        return not torch.equal(compiled(x), before)

    torch._dynamo.reset()
    sequential = runs_a_late_hook(nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10)))
    torch._dynamo.reset()
    assert runs_a_late_hook(network(MLP, device="cpu", **MLP_CONTRACT)) == sequential
    torch._dynamo.reset()
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        assert runs_a_late_hook(network(MLP, device="cpu", **MLP_CONTRACT))


def test_a_forward_patched_onto_the_instance_is_compiled_too():
    model = network(MLP, device="cpu", **MLP_CONTRACT)
    original = model.forward
    model.forward = lambda *args: original(*args) * 0
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    assert torch.count_nonzero(compiled(torch.randn(3, 128))) == 0


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non-strict"])
def test_torch_export_captures_the_network(strict):
    model = network(MLP, device="cpu", **MLP_CONTRACT).eval()
    x = torch.randn(3, 128)
    exported = torch.export.export(model, (x,), strict=strict)
    torch.testing.assert_close(exported.module()(x), model(x))
