"""The §7 network constructors end to end: print, forward, backward, equivalence, contracts."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, ops
from hndl.torch import build, network, network_file, network_from_callable, parameter_counts

MLP = """
linear(64)
relu()
linear()
"""
CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
SPEC_TABLE = [
    "Network: [B, 128] -> [B, 10]  dtype=float32",
    "index  name  operation  input shape  output shape",
    "0      n0    linear     [B, 128]     [B, 64]",
    "1      n1    relu       [B, 64]      [B, 64]",
    "2      n2    linear     [B, 64]      [B, 10]",
]


def classifier(x):
    ops.linear(64)
    ops.relu()
    ops.linear()


def handwritten(model):
    reference = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    reference.load_state_dict({
        "0.weight": model.nodes.n_n0.weight, "0.bias": model.nodes.n_n0.bias,
        "2.weight": model.nodes.n_n2.weight, "2.bias": model.nodes.n_n2.bias,
    })
    return reference


def test_spec_mlp_prints_its_table_and_runs(capsys):
    model = network(MLP, device="cpu", **CONTRACT)
    print(model)
    assert [line.rstrip() for line in capsys.readouterr().out.strip().splitlines()] == SPEC_TABLE
    assert repr(model) == str(model)
    assert model(torch.randn(3, 128)).shape == (3, 10)
    assert model.training


def test_forward_and_gradients_match_handwritten_pytorch():
    model = network(MLP, device="cpu", **CONTRACT)
    reference = handwritten(model)
    x = torch.randn(5, 128, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, expected = model(x), reference(x_ref)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(model.nodes.n_n0.weight.grad, reference[0].weight.grad)
    torch.testing.assert_close(model.nodes.n_n2.bias.grad, reference[2].bias.grad)


def test_optimizer_step_matches_handwritten():
    model = network(MLP, device="cpu", **CONTRACT)
    reference = handwritten(model)
    x = torch.randn(4, 128)
    for module in (model, reference):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        module(x).sum().backward()
        optimizer.step()
    torch.testing.assert_close(model.nodes.n_n0.weight, reference[0].weight)


def test_state_keys_register_once_under_nodes():
    model = network(MLP, device="cpu", **CONTRACT)
    assert list(model.state_dict()) == ["nodes.n_n0.weight", "nodes.n_n0.bias", "nodes.n_n2.weight", "nodes.n_n2.bias"]


def test_callable_and_file_frontends_build_the_same_network(tmp_path):
    path = tmp_path / "mlp.hndl"
    path.write_text(MLP, encoding="utf-8")
    torch.manual_seed(1)
    from_config = network(MLP, device="cpu", **CONTRACT)
    torch.manual_seed(1)
    from_callable = network_from_callable(classifier, device="cpu", **CONTRACT)
    torch.manual_seed(1)
    from_file = network_file(path, device="cpu", **CONTRACT)
    assert str(from_config) == str(from_callable) == str(from_file)
    x = torch.randn(2, 128)
    torch.testing.assert_close(from_config(x), from_callable(x))
    torch.testing.assert_close(from_config(x), from_file(x))
    assert from_callable.plan.frontend["kind"] == "python_callable@1"
    assert from_callable.plan.frontend["qualname"] == "classifier"
    assert from_file.plan.frontend["file"] == str(path)


def test_build_returns_a_dictionary_keyed_by_output_names():
    plan = hndl.resolve(MLP, **CONTRACT)
    module = build(plan, device="cpu")
    result = module(x=torch.randn(2, 128))
    assert list(result) == ["output"] and result["output"].shape == (2, 10)
    assert module.plan is plan


def test_runtime_contract_violations_fail_clearly():
    model = network(MLP, device="cpu", **CONTRACT)
    with pytest.raises(HNDLError) as error:
        model(torch.randn(3, 127))
    assert error.value.code == "E_RUNTIME" and "input 'x'" in error.value.message
    with pytest.raises(HNDLError) as error:
        model(torch.randn(3, 128, dtype=torch.float64))
    assert error.value.code == "E_RUNTIME" and "float64" in error.value.message
    module = build(model.plan, device="cpu")
    with pytest.raises(HNDLError) as error:
        module(y=torch.randn(3, 128))
    assert error.value.code == "E_BINDING"
    with pytest.raises(HNDLError) as error:
        module()
    assert error.value.code == "E_BINDING"
    with pytest.raises(HNDLError) as error:
        model(torch.randn(3, 128), x=torch.randn(3, 128))
    assert error.value.code == "E_BINDING"


def test_an_exception_inside_a_node_keeps_its_type_and_gains_a_note():
    model = network(MLP, device="cpu", **CONTRACT)
    model.nodes.n_n2.weight.data = torch.randn(10, 3)  # break the layer behind HNDL's back
    with pytest.raises(RuntimeError) as error:
        model(torch.randn(2, 128))
    assert type(error.value) is RuntimeError
    assert any("node 'n2'" in note for note in error.value.__notes__)


@pytest.mark.parametrize("device", ["tpu", "cpu:1", 3])
def test_only_cpu_and_cuda_devices_are_accepted(device):  # and meta (issue 28: tests/torch/test_meta_device.py)
    with pytest.raises(HNDLError) as error:
        network(MLP, device=device, **CONTRACT)
    assert error.value.code == "E_SCHEMA"


def test_unavailable_cuda_fails_without_falling_back():
    if torch.cuda.is_available():
        model = network(MLP, device="cuda", **CONTRACT)
        assert model.nodes.n_n0.weight.is_cuda
    else:
        with pytest.raises(HNDLError) as error:
            network(MLP, device="cuda", **CONTRACT)
        assert error.value.code == "E_RUNTIME"


def test_default_initialization_follows_the_caller_rng():
    torch.manual_seed(7)
    first = network(MLP, device="cpu", **CONTRACT)
    torch.manual_seed(7)
    second = network(MLP, device="cpu", **CONTRACT)
    torch.testing.assert_close(first.nodes.n_n0.weight, second.nodes.n_n0.weight)
    assert first.build_receipt["seed_mode"] == "caller"


def test_explicit_seed_isolates_and_restores_the_caller_rng():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    first = network(MLP, device="cpu", initialization_seed=3, **CONTRACT)
    assert torch.equal(torch.get_rng_state(), before)
    second = network(MLP, device="cpu", initialization_seed=3, **CONTRACT)
    torch.testing.assert_close(first.nodes.n_n2.weight, second.nodes.n_n2.weight)
    receipt = first.build_receipt
    assert receipt["seed_mode"] == "isolated" and receipt["initialization_seed"] == 3
    assert receipt["torch_version"] == torch.__version__ and receipt["device"] == "cpu"
    assert receipt["dtype"] == "float32"
    assert receipt["state_bytes"] == sum(p.numel() * 4 for p in first.parameters())


def test_parameter_counts_come_from_the_meta_device():
    plan = hndl.resolve(MLP, **CONTRACT)
    assert parameter_counts(plan) == {"n0": 128 * 64 + 64, "n1": 0, "n2": 64 * 10 + 10}


def test_init_and_trainable_metadata_reach_the_built_module():
    source = """
linear(64, trainable=False)
relu()
linear(init={"weight": 0, "bias": 0.5}, trainable={"bias": False})
"""
    model = network(source, device="cpu", **CONTRACT)
    assert not model.nodes.n_n0.weight.requires_grad and not model.nodes.n_n0.bias.requires_grad
    assert torch.all(model.nodes.n_n2.weight == 0) and torch.all(model.nodes.n_n2.bias == 0.5)
    assert model.nodes.n_n2.weight.requires_grad and not model.nodes.n_n2.bias.requires_grad
    assert model.plan.node("n2").initialization["overrides"] == {"bias": 0.5, "weight": 0.0}


def test_scheme_initializers_are_identical_in_both_frontends():
    source = 'linear(init={"weight": xavier_uniform(gain=2.0)})'

    def fn(x):
        ops.linear(init={"weight": hndl.xavier_uniform(gain=2.0)})

    contract = {"input_shape": ("B", 8), "output_shape": ("B", 4)}
    from_config = hndl.resolve(source, **contract).nodes[0]
    from_callable = hndl.resolve_callable(fn, **contract).nodes[0]
    assert from_config.initialization == from_callable.initialization
    assert from_config.initialization["kind"] == "torch_default@2"
    built = network(source, device="cpu", initialization_seed=0, **contract)
    torch.manual_seed(0)
    expected = nn.Linear(8, 4)
    nn.init.xavier_uniform_(expected.weight, gain=2.0)
    torch.testing.assert_close(built.nodes.n_n0.weight, expected.weight)


def test_reduced_precision_plans_build_in_their_dtype():
    for dtype, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        model = network(MLP, device="cpu", dtype=dtype, **CONTRACT)
        assert model.nodes.n_n0.weight.dtype == torch_dtype
        assert model(torch.randn(2, 128, dtype=torch_dtype)).dtype == torch_dtype


def _pending_cuda_seeds():
    tracker = torch.cuda._lazy_seed_tracker
    return [id(call) for call in tracker.get_calls()] + [id(call) for call in torch.cuda._queued_calls]


def test_an_explicit_seed_touches_no_rng_it_does_not_restore():
    if torch.cuda.is_initialized():
        before = torch.cuda.get_rng_state()
        network(MLP, device="cpu", initialization_seed=11, **CONTRACT)
        assert torch.equal(torch.cuda.get_rng_state(), before)
        return
    pending = _pending_cuda_seeds()
    network(MLP, device="cpu", initialization_seed=11, **CONTRACT)
    assert _pending_cuda_seeds() == pending  # no CUDA seed queued behind the caller's back


def test_printing_and_describing_allocate_nothing_and_draw_no_randomness():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise AssertionError(f"inspection ran {func}")

    model = network(MLP, device="cpu", **CONTRACT)
    before = torch.get_rng_state()
    with Refuse():
        text = repr(model) + str(model) + model.plan.describe() + repr(model.plan)
    assert "n2    linear" in text
    assert torch.equal(torch.get_rng_state(), before)


def test_forward_draws_no_randomness_outside_dropout():
    generator = """
linear()
relu()
reshape(64, 4, 4)
deconv(32, policy="up2")
leaky_relu(0.2)
conv(3, kernel_size=3, padding=1)
tanh()
"""
    model = network(generator, input_shape=("B", 16), output_shape=("B", 3, 8, 8), device="cpu")
    z = torch.randn(4, 16)
    for mode in (model.train, model.eval):
        mode()
        before = torch.get_rng_state()
        model(z).sum()
        assert torch.equal(torch.get_rng_state(), before)


# -- calling conventions: hooks, patched forward, keyword-only GraphModule -----------------------
def test_hooks_on_the_model_run_as_on_any_torch_module():
    model = network(MLP, device="cpu", **CONTRACT)
    x = torch.randn(2, 128)
    plain = model(x)
    seen = []
    pre = model.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    post = model.register_forward_hook(lambda module, args, output: output + 1)
    backward = model.register_full_backward_hook(lambda module, grad_in, grad_out: seen.append(module))
    x.requires_grad_(True)
    hooked = model(x)
    hooked.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(hooked, model.forward(x * 2) + 1)
    assert seen == [model]
    for handle in (pre, post, backward):
        handle.remove()
    torch.testing.assert_close(model(x), plain)


def test_global_module_hooks_see_the_model():
    model = network(MLP, device="cpu", **CONTRACT)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: seen.append(module))
    try:
        model(torch.randn(2, 128))
    finally:
        handle.remove()
    assert seen[-1] is model and model.nodes.n_n0 in seen


def test_a_forward_patched_onto_the_instance_is_called():
    model = network(MLP, device="cpu", **CONTRACT)
    x = torch.randn(2, 128)
    original = model.forward
    model.forward = lambda *args, **kwargs: original(*args, **kwargs) * 0
    assert torch.count_nonzero(model(x)) == 0
    del model.forward
    assert torch.count_nonzero(model(x)) > 0


def test_a_graph_module_takes_keyword_inputs_only():
    module = build(hndl.resolve(MLP, **CONTRACT), device="cpu")
    with pytest.raises(HNDLError) as error:
        module(torch.randn(2, 128))
    assert error.value.code == "E_BINDING"
    assert "takes its inputs by keyword (x=...)" in error.value.message
    with pytest.raises(HNDLError) as error:
        module()
    assert error.value.code == "E_BINDING"


# -- initialization_seed: the accepted range (issue 15, item 8) ------------------------------------------
def _seeded_entry_points(tmp_path):
    """Every public entry point that takes initialization_seed, as a function of the seed."""
    from hndl.torch import restore

    path = tmp_path / "mlp.hndl"
    path.write_text(MLP)
    plan = hndl.resolve(MLP, **CONTRACT)
    return {
        "network": lambda seed: network(MLP, device="cpu", initialization_seed=seed, **CONTRACT),
        "network_file": lambda seed: network_file(path, device="cpu", initialization_seed=seed, **CONTRACT),
        "network_from_callable": lambda seed: network_from_callable(
            classifier, device="cpu", initialization_seed=seed, **CONTRACT),
        "build": lambda seed: build(plan, device="cpu", initialization_seed=seed),
        "restore": lambda seed: restore(plan.to_json(), device="cpu", initialization_seed=seed),
    }


@pytest.mark.parametrize("seed", [2**64, 2**64 + 5, -1, -(2**63), 10**100, True, 1.0, "3"])
def test_initialization_seed_outside_0_to_2_64_is_e_argument_at_every_entry_point(seed, tmp_path):
    for name, call in _seeded_entry_points(tmp_path).items():
        with pytest.raises(HNDLError) as error:
            call(seed)
        assert error.value.code == "E_ARGUMENT", name
        assert error.value.location.field == "initialization_seed"
        assert "0 <= seed < 2**64" in error.value.message
        assert any("2**64 - 1" in remedy for remedy in error.value.remedies)


def test_the_whole_seed_range_is_accepted_and_reproducible(tmp_path):
    points = _seeded_entry_points(tmp_path)
    for seed in (0, 2**63, 2**64 - 1):
        for name, call in points.items():
            first, second = call(seed), call(seed)
            assert first.build_receipt["initialization_seed"] == seed, name
            torch.testing.assert_close(first.nodes.n_n0.weight, second.nodes.n_n0.weight)
    assert not torch.equal(points["build"](2**64 - 1).nodes.n_n0.weight, points["build"](0).nodes.n_n0.weight)


@pytest.mark.parametrize("seed", [2**64, 10**5000], ids=["2**64", "10**5000"])
def test_preflight_names_the_seed_range_too(seed):
    from hndl.torch import preflight

    with pytest.raises(HNDLError) as error:
        preflight(hndl.resolve(MLP, **CONTRACT), seed=seed)
    assert error.value.code == "E_SCHEMA" and "0 <= seed < 2**64" in error.value.message
    assert preflight(hndl.resolve(MLP, **CONTRACT), seed=2**64 - 1)["seed"] == 2**64 - 1
