"""A built network under the PyTorch tools researchers apply to a model, each against a handwritten twin.

Every test builds the README's generator or a small conv classifier, applies one real tool (fx,
torchvision's feature extraction, torch.export, dtype moves, autocast with GradScaler,
parametrizations and pruning, torch.ao and torchao quantization, jit.trace / jit.script, the
parser worker at interpreter exit) and checks it behaves as on the handwritten module, or fails
with an HNDLError that names what to use instead. docs/backend.md's "Works with" table names
these tests; ``test_the_works_with_table_names_these_tests_and_the_versions_installed`` keeps
the two in step.
"""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.export import Dim, export
from torch.fx import symbolic_trace
from torch.nn.utils import parametrizations, parametrize, prune

import hndl
from hndl import HNDLError
from hndl.torch import network
from hndl.torch.network import Network

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRECTORIES = (str(ROOT / "hndl"), str(ROOT / "plugins"))

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""

CLASSIFIER = """
conv(8, kernel_size=3, padding=1)
batch_norm()
relu()
max_pool(kernel_size=2)
flatten()
linear(32)
relu()
linear()
"""


def classifier() -> nn.Module:
    return network(CLASSIFIER, input_shape=("B", 3, 8, 8), output_shape=("B", 10), device="cpu",
                   initialization_seed=0)


def generator() -> nn.Module:
    return network(GENERATOR, input_shape=("B", 16), output_shape=("B", 3, 32, 32), device="cpu",
                   initialization_seed=0)


def handwritten_classifier(model: nn.Module) -> nn.Sequential:
    """The classifier written by hand, holding a copy of ``model``'s state."""
    twin = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 10),
    )
    copy_state(model, twin)
    twin.train(model.training)
    return twin


def copy_state(source: nn.Module, target: nn.Module) -> None:
    """Copy state entry by entry, in order (both registries list it in the same layer order)."""
    theirs = target.state_dict()
    ours = source.state_dict()
    assert len(ours) == len(theirs)
    target.load_state_dict({key: value for key, value in zip(theirs, ours.values())})


def images(batch: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def hndl_warnings(caught) -> list[str]:
    return [f"{item.filename}:{item.lineno}: {item.message}" for item in caught
            if str(item.filename).startswith(PACKAGE_DIRECTORIES)]


# -- fx ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("build, shape", [(classifier, (4, 3, 8, 8)), (generator, (4, 16))],
                         ids=["classifier", "generator"])
def test_fx_symbolic_trace_records_the_nodes_with_equal_values_and_gradients(build, shape):
    model = build()
    traced = symbolic_trace(model)
    placeholders = [node.target for node in traced.graph.nodes if node.op == "placeholder"]
    assert placeholders == ["x"]
    called = [node.target for node in traced.graph.nodes if node.op == "call_module"]
    assert "nodes.n_n0" in called and all(target.startswith("nodes.n_") for target in called)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    expected = model(x)
    got = traced(x)
    torch.testing.assert_close(got, expected)
    weight = model["n0"].weight
    (expected_x, expected_w) = torch.autograd.grad(expected.square().sum(), (x, weight))
    (got_x, got_w) = torch.autograd.grad(got.square().sum(), (x, weight))
    torch.testing.assert_close(got_x, expected_x)
    torch.testing.assert_close(got_w, expected_w)


def test_create_feature_extractor_takes_node_ids_as_nodes_n_id():
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

    model = classifier().eval()
    train_names, eval_names = get_graph_node_names(model)
    assert {"nodes.n_n0", "nodes.n_n2", "nodes.n_n5", "nodes.n_n7"} <= set(eval_names)
    extractor = create_feature_extractor(model, return_nodes={"nodes.n_n2": "features", "nodes.n_n4": "flat",
                                                              "nodes.n_n7": "logits"})
    seen = {}
    for node_id in ("n2", "n4"):
        model[node_id].register_forward_hook(lambda module, args, out, node_id=node_id: seen.__setitem__(node_id, out))
    x = images()
    logits = model(x)
    out = extractor(x)
    assert list(out) == ["features", "flat", "logits"]
    torch.testing.assert_close(out["features"], seen["n2"])
    torch.testing.assert_close(out["flat"], seen["n4"])
    torch.testing.assert_close(out["logits"], logits)


def test_fx_mode_quantization_prepares_and_converts_a_built_network():
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    model = classifier().eval()
    x = images(16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"), (x,))
        for seed in range(4):
            prepared(images(16, seed))
        quantized = convert_fx(prepared)
    assert "quantize_per_tensor" in quantized.code
    expected = model(x)
    torch.testing.assert_close(quantized(x), expected, atol=0.1 * expected.abs().max().item(), rtol=0)


# -- torch.export ---------------------------------------------------------------------------------
@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_export_with_a_dynamic_batch_runs_at_several_batch_sizes(strict):
    model = classifier().eval()
    program = export(model, (images(4),), dynamic_shapes={"x": {0: Dim("batch")}}, strict=strict)
    exported = program.module()
    for batch in (2, 5, 9):
        x = images(batch, seed=batch)
        torch.testing.assert_close(exported(x), model(x))


def test_export_of_a_two_input_network_binds_dynamic_shapes_by_input_name():
    model = network("a = linear(x, 8)\nb = linear(y, 8)\nadd(a, b)",
                    input_shape={"x": ("B", 4), "y": ("B", 6)}, output_shape=("B", 8), device="cpu")
    batch = Dim("batch")
    x, y = torch.randn(3, 4), torch.randn(3, 6)
    program = export(model, (x, y), dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    x, y = torch.randn(7, 4), torch.randn(7, 6)
    torch.testing.assert_close(program.module()(x, y), model(x, y))
    torch.testing.assert_close(model(y=y, x=x), model(x, y))


def test_a_graph_module_from_build_traces_and_exports_with_keyword_inputs():
    plan = hndl.resolve("linear(8)\nrelu()\nlinear()", input_shape=("B", 4), output_shape=("B", 2))
    graph = hndl.torch.build(plan, device="cpu")
    x = torch.randn(3, 4)
    traced = symbolic_trace(graph)  # forward(*args, **inputs): the traced graph takes keywords too
    assert [node.target for node in traced.graph.nodes if node.op == "call_module"] == ["nodes.n_n0", "nodes.n_n1", "nodes.n_n2"]
    torch.testing.assert_close(traced(x=x)["output"], graph(x=x)["output"])
    program = export(graph, (), {"x": x}, dynamic_shapes={"x": {0: Dim("batch")}})
    x = torch.randn(6, 4)
    torch.testing.assert_close(program.module()(x=x)["output"], graph(x=x)["output"])
    with pytest.raises(HNDLError) as error:
        graph(x)
    assert error.value.code == "E_BINDING"


def test_whole_model_pickles_keep_the_named_forward(tmp_path):
    model = classifier()
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    assert type(loaded) is type(model) and isinstance(loaded, Network)
    assert list(inspect.signature(type(loaded).forward).parameters) == ["self", "x"]
    x = images()
    torch.testing.assert_close(loaded.eval()(x), model.eval()(x))


# -- dtype moves ----------------------------------------------------------------------------------
MOVES = {
    "double": (lambda model: model.double(), torch.float64),
    "half": (lambda model: model.half(), torch.float16),
    "bfloat16": (lambda model: model.bfloat16(), torch.bfloat16),
    "to-bfloat16": (lambda model: model.to(torch.bfloat16), torch.bfloat16),
    "to-device-and-dtype": (lambda model: model.to("cpu", torch.float64), torch.float64),
    "float-after-double": (lambda model: model.double().float(), torch.float32),
}


@pytest.mark.parametrize("move", MOVES, ids=list(MOVES))
def test_a_dtype_move_moves_the_contracts_of_floating_ports(move):
    cast, dtype = MOVES[move]
    model = classifier().eval()
    digest = model.plan.semantic_digest
    twin = handwritten_classifier(model)
    model, twin = cast(model), cast(twin)
    x = images().to(dtype)
    out = model(x)
    assert out.dtype is dtype
    torch.testing.assert_close(out, twin(x))
    assert model.plan.dtype == "float32" and model.plan.semantic_digest == digest  # the plan that was built
    if dtype is not torch.float32:
        with pytest.raises(HNDLError) as error:
            model(images())
        assert error.value.code == "E_RUNTIME"
        assert error.value.message.startswith(f"input 'x': expected dtype {str(dtype)[6:]}, got float32")


def test_integer_ports_stay_integer_after_a_floating_cast():
    model = network("embedding(50, 8)\nflatten()\nlinear(4)", input_shape=("B", 6), output_shape=("B", 4),
                    input_dtype="int64", device="cpu").double()
    tokens = torch.randint(0, 50, (3, 6))
    assert model(tokens).dtype is torch.float64
    with pytest.raises(HNDLError) as error:
        model(tokens.double())
    assert error.value.message.startswith("input 'x': expected dtype int64, got float64")


def test_gradcheck_and_gradgradcheck_run_on_a_network_moved_to_float64():
    model = network("linear(5)\ntanh()\nlinear(3)\ngelu()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
                    device="cpu", initialization_seed=0).double()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(model, (x,))
    assert torch.autograd.gradgradcheck(model, (x,))


def test_a_moved_state_dict_restores_through_the_plan_after_the_same_move():
    model = classifier().double()
    state = model.state_dict()
    text = model.plan.to_json()
    with pytest.raises(HNDLError) as error:  # restore never casts silently
        hndl.torch.restore(text, state, device="cpu")
    assert error.value.code == "E_INTEGRITY" and "float64" in error.value.message
    rebuilt = hndl.torch.restore(text, device="cpu").double()
    rebuilt.load_state_dict(state)
    x = images().double()
    torch.testing.assert_close(rebuilt(x), model(x))  # restore gives the network form: called like the model


# -- autocast ---------------------------------------------------------------------------------------
def test_autocast_on_cpu_runs_in_bfloat16_like_the_handwritten_model():
    model = classifier().eval()
    twin = handwritten_classifier(model)
    x = images()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = model(x), twin(x)
        assert out.dtype is torch.bfloat16
        torch.testing.assert_close(out, expected)
        with pytest.raises(HNDLError) as error:  # shapes are still checked
            model(torch.randn(4, 3, 9, 9))
    assert error.value.message.startswith("input 'x': expected shape [B=4, 3, 8, 8]")


def test_under_autocast_a_non_floating_port_must_still_match_exactly():
    model = network("embedding(50, 8)\nflatten()\nlinear(4)", input_shape=("B", 6), output_shape=("B", 4),
                    input_dtype="int64", device="cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(torch.randint(0, 50, (3, 6))).dtype is torch.bfloat16
        with pytest.raises(HNDLError) as error:
            model(torch.randint(0, 50, (3, 6), dtype=torch.int32))
    assert error.value.message.startswith("input 'x': expected dtype int64, got int32")


def test_a_compiled_network_follows_autocast_in_and_out_without_graph_breaks():
    model = classifier().eval()
    twin = handwritten_classifier(model)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = images()
    assert compiled(x).dtype is torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(x)
        assert out.dtype is torch.bfloat16
        torch.testing.assert_close(out, twin(x))
    torch.testing.assert_close(compiled(x), twin(x))


def _amp_step(model, device, dtype, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device)
    with torch.autocast(device, dtype=dtype):
        loss = nn.functional.cross_entropy(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach(), [parameter.detach().clone() for parameter in model.parameters()]


AMP = [pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
       pytest.param("cuda", torch.float16, id="cuda-float16",
                    marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
       pytest.param("cuda", torch.bfloat16, id="cuda-bfloat16",
                    marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.mark.parametrize("device, dtype", AMP)
def test_a_training_step_with_autocast_and_grad_scaler_equals_the_handwritten_step(device, dtype):
    model = classifier().to(device)
    twin = handwritten_classifier(model).to(device)
    x, y = images(8).to(device), torch.arange(8, device=device) % 10
    loss, after = _amp_step(model, device, dtype, x, y)
    expected_loss, expected = _amp_step(twin, device, dtype, x, y)
    torch.testing.assert_close(loss, expected_loss)
    for got, want in zip(after, expected):
        torch.testing.assert_close(got, want)


# -- parametrizations and pruning -------------------------------------------------------------------
EDITS = {
    "spectral_norm": lambda layer: parametrizations.spectral_norm(layer),
    "weight_norm": lambda layer: parametrizations.weight_norm(layer),
    "orthogonal": lambda layer: parametrizations.orthogonal(layer),
    "l1_unstructured": lambda layer: prune.l1_unstructured(layer, "weight", amount=0.5),
    "legacy_spectral_norm": lambda layer: torch.nn.utils.spectral_norm(layer),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_a_parametrized_or_pruned_node_runs_trains_and_round_trips_its_state(edit):
    model = classifier()
    twin = handwritten_classifier(model)
    x, y = images(8), torch.arange(8) % 10
    model(x)  # a validated signature before the edit: the edit must still be seen
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.manual_seed(3)
        EDITS[edit](model["n5"])
        torch.manual_seed(3)
        EDITS[edit](twin[5])
    assert list(model["n5"].state_dict()) == list(twin[5].state_dict())
    for network_, optimizer in ((model, None), (twin, None)):
        optimizer = torch.optim.SGD(network_.parameters(), lr=0.1)
        nn.functional.cross_entropy(network_(x), y).backward()
        optimizer.step()
    torch.testing.assert_close(model(x), twin(x))
    state = model.state_dict()
    fresh = classifier()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        EDITS[edit](fresh["n5"])
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh(x), model(x))


def test_removing_a_parametrization_or_a_pruning_restores_the_declared_parameter():
    model = classifier()
    x = images()
    parametrizations.spectral_norm(model["n5"])
    model(x)
    parametrize.remove_parametrizations(model["n5"], "weight")
    prune.l1_unstructured(model["n7"], "weight", amount=0.3)
    model(x)
    prune.remove(model["n7"], "weight")
    assert type(model["n5"]) is nn.Linear and isinstance(model["n7"].weight, nn.Parameter)
    model(x)


DISCRIMINATOR = """
conv(16, kernel_size=4, stride=2, padding=1)
leaky_relu(0.2)
conv(32, kernel_size=4, stride=2, padding=1)
leaky_relu(0.2)
conv(64, kernel_size=4, stride=2, padding=1)
leaky_relu(0.2)
flatten()
linear(1)
"""


def test_an_sn_gan_discriminator_trains_one_step_like_its_handwritten_twin():
    model = network(DISCRIMINATOR, input_shape=("B", 3, 32, 32), output_shape=("B", 1), device="cpu",
                    initialization_seed=0)
    twin = nn.Sequential(
        nn.Conv2d(3, 16, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(16, 32, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(32, 64, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(1024, 1),
    )
    copy_state(model, twin)
    for network_ in (model, twin):
        torch.manual_seed(11)
        for layer in network_.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                parametrizations.spectral_norm(layer)
    real = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    for network_ in (model, twin):
        optimizer = torch.optim.Adam(network_.parameters(), lr=2e-4, betas=(0.0, 0.9))
        loss = nn.functional.softplus(-network_(real)).mean()
        loss.backward()
        optimizer.step()
    for (name, got), (_, want) in zip(model.state_dict().items(), twin.state_dict().items()):
        torch.testing.assert_close(got, want, msg=lambda message, name=name: f"{name}: {message}")
    torch.testing.assert_close(model(real), twin(real))


def test_structural_replacement_stays_rejected_and_names_what_to_use_instead():
    model = classifier()
    with pytest.raises(TypeError, match="parametrization .* or a forward hook"):
        model["n5"] = nn.Linear(128, 32)
    model(images())
    model.nodes._modules["n_n5"] = nn.Linear(128, 32)  # behind the container's back
    with pytest.raises(HNDLError) as error:
        model(images())
    assert error.value.code == "E_RUNTIME"
    assert "submodule 'nodes.n_n5' was replaced with another Linear" in error.value.message
    assert "register a parametrization (torch.nn.utils.parametrize) or a forward hook" in str(error.value)


# -- quantization -----------------------------------------------------------------------------------
@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
def test_quantize_dynamic_quantizes_the_linear_layers(inplace):
    import torch.ao.nn.quantized.dynamic as nnqd

    model = classifier().eval()
    x = images(8)
    expected = model(x)  # a validated signature: an in-place conversion must still be seen
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=inplace)
        assert (quantized is model) is inplace
        assert type(quantized["n5"]) is nnqd.Linear and type(quantized["n7"]) is nnqd.Linear
        got = quantized(x)
    assert not torch.equal(got, expected)  # the quantized layers ran
    torch.testing.assert_close(got, expected, atol=0.05 * expected.abs().max().item(), rtol=0)


def test_torchao_quantize_replaces_the_linear_weights():
    from torchao.quantization import Int8WeightOnlyConfig, quantize_  # a dev dependency (pyproject.toml)

    model = classifier().eval()
    x = images(8)
    expected = model(x)
    quantize_(model, Int8WeightOnlyConfig())
    assert type(model["n5"].weight).__module__.startswith("torchao")
    got = model(x)
    assert not torch.equal(got, expected)
    torch.testing.assert_close(got, expected, atol=0.05 * expected.abs().max().item(), rtol=0)


def test_quantization_layers_are_the_torch_layers_themselves():
    model = classifier()
    assert [type(model[node_id]) for node_id in ("n0", "n2", "n3", "n5")] == [nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.Linear]


# -- TorchScript -----------------------------------------------------------------------------------
@pytest.mark.parametrize("build, shape", [(classifier, (4, 3, 8, 8)), (generator, (2, 16))],
                         ids=["classifier", "generator"])
def test_jit_trace_records_without_hndl_warnings(build, shape):
    model = build().eval()
    x = torch.randn(*shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, x)
    assert hndl_warnings(caught) == []
    y = torch.randn(*shape)
    torch.testing.assert_close(traced(y), model(y))


def test_jit_script_is_an_hndl_error_that_points_at_torch_export():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(HNDLError) as error:
            torch.jit.script(classifier())
    assert error.value.code == "E_RUNTIME"
    assert "torch.export.export" in str(error.value)


# -- the parser worker at exit ------------------------------------------------------------------------
def test_the_parser_worker_stops_cleanly_at_interpreter_exit():
    code = ("import hndl\n"
            "hndl.resolve('linear()\\nrelu()', input_shape=('B', 3), output_shape=('B', 3))\n"
            "from hndl.frontends.config import worker\n"
            "print(worker._worker.process.pid)\n")
    done = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    worker = int(done.stdout.split()[-1])
    assert not Path(f"/proc/{worker}").exists()  # stopped and reaped, not left running or a zombie


# -- state, functional transforms and memory formats --------------------------------------------------
def test_safetensors_round_trips_the_state_of_a_built_network(tmp_path):
    from safetensors.torch import load_file, save_file

    model = classifier()
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    fresh = network(CLASSIFIER, input_shape=("B", 3, 8, 8), output_shape=("B", 10), device="cpu", initialization_seed=1)
    fresh.load_state_dict(load_file(tmp_path / "model.safetensors"))
    x = images()
    torch.testing.assert_close(fresh.eval()(x), model.eval()(x))


def test_functional_call_and_vmap_of_grad_see_the_network_as_a_function():
    from torch.func import functional_call, grad, vmap

    model = network("linear(8)\ntanh()\nlinear(1)", input_shape=("B", 4), output_shape=("B", 1), device="cpu",
                    initialization_seed=0)
    twin = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    copy_state(model, twin)
    parameters = dict(model.named_parameters())
    theirs = dict(twin.named_parameters())

    def loss(params, module, x):
        return functional_call(module, params, (x.unsqueeze(0),)).square().sum()

    x = torch.randn(5, 4)
    got = vmap(grad(loss), in_dims=(None, None, 0))(parameters, model, x)
    expected = vmap(grad(loss), in_dims=(None, None, 0))(theirs, twin, x)
    for (_, value), (_, want) in zip(got.items(), expected.items()):
        torch.testing.assert_close(value, want)


def test_channels_last_moves_the_weights_and_keeps_the_values():
    model = classifier().eval()
    expected = model(images())
    model.to(memory_format=torch.channels_last)
    assert model["n0"].weight.is_contiguous(memory_format=torch.channels_last)
    x = images().to(memory_format=torch.channels_last)
    torch.testing.assert_close(model(x), expected)


# -- the docs' table ---------------------------------------------------------------------------------
def works_with_rows() -> list[list[str]]:
    text = (ROOT / "docs" / "backend.md").read_text(encoding="utf-8")
    section = text.split("## Works with", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_works_with_table_names_these_tests_and_the_versions_installed():
    rows = works_with_rows()
    assert len(rows) >= 12
    for tool, version, named, _limits in rows:
        for pinned in version.split(", "):  # "onnx 1.23.2, onnxruntime 1.32.0": every package the row tests with
            package, _, number = pinned.partition(" ")
            assert importlib.metadata.version(package) == number, f"{tool}: tested with {pinned}"
        names = re.findall(r"`(test_\w+)`", named)
        assert names, f"{tool}: the row names no test"
        # The row's module: "(test_tools.py)" in this folder, "(tests/reliability)" or a path; none, any module here.
        where = re.search(r"\(([\w/.]+)\)\s*$", named)
        if where is None:
            modules = sorted(Path(__file__).parent.glob("test_*.py"))
        elif where.group(1) == "tests/reliability":
            modules = [ROOT / "tests" / "reliability" / "test_distributed.py"]
        else:
            modules = [ROOT / where.group(1) if "/" in where.group(1) else Path(__file__).parent / where.group(1)]
        assert all(module.is_file() for module in modules), f"{tool}: no test module {modules}"
        tests = {test for module in modules
                 for test in re.findall(r"^def (test_\w+)", module.read_text(encoding="utf-8"), re.MULTILINE)}
        for test in names:
            assert test in tests, f"{tool}: no test {test} in {', '.join(str(m.relative_to(ROOT)) for m in modules)}"
