"""Nodes that are a torch layer build as that torch class (issue 28 item 2), each tool beside a handwritten twin.

PyTorch's restructuring and analysis tools look layers up by exact type: conv-bn(-relu) fusion
(``torch.ao.quantization.fuse_modules``, ``torch.fx.experimental.optimization.fuse``), the
quantization mappings, ``nn.SyncBatchNorm.convert_sync_batchnorm`` and
``torch.optim.swa_utils.update_bn`` (which sets ``momentum=None``, torch's cumulative average).
``batch_norm`` and ``batch_norm1d`` had their own forward (for a one-value-per-channel HNDLError),
so fusion failed (``did not find fuser method for: (Conv2d, ...BatchNorm, ReLU)``), fx fusion left
every batch norm unfused and ``update_bn`` raised a TypeError. They are now torch's own
``nn.BatchNorm2d`` / ``nn.BatchNorm1d``; the HNDLError moved to the declaration's ``runtime_check``,
which the runtime runs once per input signature before the node (tested here with an operator of
its own). docs/backend.md's "Works with" table names these tests.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, operator
from hndl.registry import Registry
from hndl.torch import dry_run, network, unsealed
from hndl.torch.plain_layers import torch_layer

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
SIGNAL = """
conv1d(6, kernel_size=3, padding=1)
batch_norm1d()
relu()
conv1d(4, kernel_size=1)
batch_norm1d(momentum=0.3)
"""

#: Declared classes that subclass a torch layer but keep a forward of their own, and why. (channel_shuffle
#: is not a subclass of ``nn.ChannelShuffle`` at all: see its test below.)
OWN_FORWARD = {
    "hardsigmoid": "torch's fused hardsigmoid has no second derivative; the node's hardtanh form has one",
    "channel_layer_norm": "a LayerNorm over the channel axis of [B, C, H, W]: it moves the channels last and back",
}


class Twin(nn.Module):
    """A handwritten model: its layers in a ``nodes`` dict under the network's names, run in order."""

    def __init__(self, layers: dict[str, nn.Module]) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.nodes.values():
            x = layer(x)
        return x


def classifier() -> tuple[nn.Module, Twin]:
    model = network(CLASSIFIER, input_shape=("B", 3, 8, 8), output_shape=("B", 10), device="cpu",
                    initialization_seed=0)
    twin = Twin({
        "n_n0": nn.Conv2d(3, 8, 3, padding=1), "n_n1": nn.BatchNorm2d(8), "n_n2": nn.ReLU(),
        "n_n3": nn.MaxPool2d(2), "n_n4": nn.Flatten(), "n_n5": nn.Linear(128, 32), "n_n6": nn.ReLU(),
        "n_n7": nn.Linear(32, 10),
    })
    twin.load_state_dict(model.state_dict())
    return model, twin


def signal() -> tuple[nn.Module, Twin]:
    model = network(SIGNAL, input_shape=("B", 2, 12), output_shape=("B", 4, 12), device="cpu",
                    initialization_seed=0)
    twin = Twin({
        "n_n0": nn.Conv1d(2, 6, 3, padding=1), "n_n1": nn.BatchNorm1d(6), "n_n2": nn.ReLU(),
        "n_n3": nn.Conv1d(6, 4, 1), "n_n4": nn.BatchNorm1d(4, momentum=0.3),
    })
    twin.load_state_dict(model.state_dict())
    return model, twin


def batches(shape: tuple[int, ...], count: int = 3, seed: int = 1) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator) * 2 + 1 for _ in range(count)]


def assert_same_state(got: nn.Module, want: nn.Module) -> None:
    got_state, want_state = got.state_dict(), want.state_dict()
    assert list(got_state) == list(want_state)
    for name, value in want_state.items():
        torch.testing.assert_close(got_state[name], value, msg=name)


# -- the classes ------------------------------------------------------------------------------------
def test_the_layers_of_a_network_are_the_torch_classes_of_the_twin():
    for build in (classifier, signal):
        model, twin = build()
        assert [type(layer) for layer in model.nodes.values()] == [type(layer) for layer in twin.nodes.values()]


def test_upsample_and_flatten_are_torch_layers_with_the_same_values():
    model = network("upsample(2)\nflatten()", input_shape=("B", 3, 4, 4), output_shape=("B", 192), device="cpu")
    assert type(model.nodes.n_n0) is nn.Upsample and type(model.nodes.n_n1) is nn.Flatten
    x = torch.randn(2, 3, 4, 4)
    twin = nn.Sequential(nn.Upsample(scale_factor=2), nn.Flatten())
    assert torch.equal(model(x), twin(x))


def test_every_declared_subclass_of_a_torch_layer_builds_as_it_or_keeps_a_recorded_forward():
    registry = Registry.builtins()
    for spec in registry:
        torch_bases = [base for base in spec.cls.__mro__[1:]
                       if base is not nn.Module and base.__module__.startswith("torch.nn.")]
        if not torch_bases or spec.alias.endswith("_v1"):
            continue  # an older version re-declares the current class (a subclass of a subclass)
        if spec.alias in OWN_FORWARD:
            assert "forward" in vars(spec.cls), spec.alias
            continue
        assert torch_layer(spec.cls) is torch_bases[0], f"{spec.alias} builds as {spec.cls}, not {torch_bases[0]}"


def test_channel_shuffle_keeps_a_form_the_classic_onnx_exporter_converts():
    import io
    import warnings

    from torch.onnx.errors import UnsupportedOperatorError

    model = network("channel_shuffle(3)", input_shape=("B", 6, 2, 2), output_shape=("B", 6, 2, 2), device="cpu")
    x = torch.randn(2, 6, 2, 2)
    assert torch.equal(model(x), nn.ChannelShuffle(3)(x))  # the same values as torch's layer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), io.BytesIO(), dynamo=False)
        with pytest.raises(UnsupportedOperatorError, match="channel_shuffle"):
            torch.onnx.export(nn.ChannelShuffle(3), (x,), io.BytesIO(), dynamo=False)


# -- fusion ------------------------------------------------------------------------------------------
def test_fuse_modules_folds_conv_batch_norm_relu_of_the_unsealed_network_like_the_twin():
    import torch.ao.nn.intrinsic as nni
    from torch.ao.quantization import fuse_modules

    model, twin = classifier()
    model.eval(), twin.eval()
    groups = [["nodes.n_n0", "nodes.n_n1", "nodes.n_n2"], ["nodes.n_n5", "nodes.n_n6"]]
    plain = fuse_modules(unsealed(copy.deepcopy(model)), groups)
    fused_twin = fuse_modules(twin, groups)
    assert [type(layer) for layer in plain.nodes.values()] == [type(layer) for layer in fused_twin.nodes.values()]
    assert type(plain["n0"]) is nni.ConvReLU2d and type(plain["n1"]) is nn.Identity
    x = batches((4, 3, 8, 8))[0]
    expected = model(x)
    torch.testing.assert_close(plain(x), expected)
    torch.testing.assert_close(fused_twin(x), expected)
    assert_same_state(plain, fused_twin)


def test_fuse_modules_qat_keeps_the_batch_norm_inside_the_fused_conv_like_the_twin():
    import torch.ao.nn.intrinsic as nni
    from torch.ao.quantization import fuse_modules_qat

    model, twin = signal()
    groups = [["nodes.n_n0", "nodes.n_n1", "nodes.n_n2"], ["nodes.n_n3", "nodes.n_n4"]]
    plain = fuse_modules_qat(unsealed(copy.deepcopy(model)), groups)
    fused_twin = fuse_modules_qat(twin, groups)
    assert type(plain["n0"]) is nni.ConvBnReLU1d and type(plain["n3"]) is nni.ConvBn1d
    assert type(fused_twin.nodes.n_n0) is nni.ConvBnReLU1d
    x = batches((3, 2, 12))[0]
    torch.testing.assert_close(plain(x), model(x))
    torch.testing.assert_close(fused_twin(x), plain(x))


def test_fx_fuse_folds_every_batch_norm_like_the_twin():
    from torch.fx.experimental.optimization import fuse

    for build, shape in ((classifier, (4, 3, 8, 8)), (signal, (3, 2, 12))):
        model, twin = build()
        model.eval(), twin.eval()
        fused, fused_twin = fuse(model), fuse(twin)
        assert not any(isinstance(layer, nn.modules.batchnorm._BatchNorm) for layer in fused.modules())
        assert not any(isinstance(layer, nn.modules.batchnorm._BatchNorm) for layer in fused_twin.modules())
        x = batches(shape)[0]
        torch.testing.assert_close(fused(x), model(x))
        torch.testing.assert_close(fused_twin(x), model(x))


# -- quantization mappings ---------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao's own deprecations
def test_eager_static_quantization_of_the_fused_unsealed_network_matches_the_twin():
    import torch.ao.nn.quantized as nnq
    from torch.ao.quantization import QuantWrapper, convert, fuse_modules, get_default_qconfig, prepare
    from torch.ao.quantization.quantization_mappings import get_default_static_quant_module_mappings

    model, twin = classifier()
    model.eval(), twin.eval()
    mappings = get_default_static_quant_module_mappings()
    for name in ("n0", "n1", "n5", "n7"):
        assert type(model[name]) in mappings
    groups = [["nodes.n_n0", "nodes.n_n1", "nodes.n_n2"], ["nodes.n_n5", "nodes.n_n6"]]
    quantized = []
    for module in (unsealed(copy.deepcopy(model)), twin):
        wrapped = QuantWrapper(fuse_modules(module, groups))
        wrapped.qconfig = get_default_qconfig("fbgemm")
        prepared = prepare(wrapped)
        for x in batches((4, 3, 8, 8)):
            prepared(x)
        quantized.append(convert(prepared))
    plain, quantized_twin = quantized
    assert type(plain.module["n0"]).__name__ == "ConvReLU2d" and type(plain.module["n7"]) is nnq.Linear
    x = batches((4, 3, 8, 8), seed=5)[0]
    torch.testing.assert_close(plain(x), quantized_twin(x))
    expected = model(x)
    torch.testing.assert_close(plain(x), expected, atol=0.1 * expected.abs().max().item(), rtol=0)


# -- SyncBatchNorm -----------------------------------------------------------------------------------
def test_convert_sync_batchnorm_converts_the_batch_norm1d_nodes_of_the_unsealed_network():
    model, twin = signal()
    plain = nn.SyncBatchNorm.convert_sync_batchnorm(unsealed(copy.deepcopy(model)))
    twin = nn.SyncBatchNorm.convert_sync_batchnorm(twin)
    assert type(plain["n1"]) is nn.SyncBatchNorm and type(plain["n4"]) is nn.SyncBatchNorm
    assert [type(layer) for layer in plain.nodes.values()] == [type(layer) for layer in twin.nodes.values()]
    assert plain["n4"].momentum == 0.3
    model.eval(), plain.eval(), twin.eval()  # without a process group SyncBatchNorm runs only in eval
    x = batches((3, 2, 12))[0]
    torch.testing.assert_close(plain(x), model(x))
    torch.testing.assert_close(twin(x), model(x))


# -- update_bn and momentum=None ---------------------------------------------------------------------
def test_update_bn_recomputes_the_running_statistics_of_the_twin():
    from torch.optim.swa_utils import AveragedModel, update_bn

    for build, shape in ((classifier, (4, 3, 8, 8)), (signal, (3, 2, 12))):
        model, twin = build()
        loader = batches(shape, count=4)
        update_bn(loader, model)
        update_bn(loader, twin)
        assert_same_state(model, twin)
        assert model.nodes.n_n1.momentum == twin.nodes.n_n1.momentum  # put back after the pass
        x = batches(shape, seed=7)[0]
        model.eval(), twin.eval()
        torch.testing.assert_close(model(x), twin(x))
    # The SWA recipe: an averaged copy of the network, its statistics recomputed.
    model, twin = classifier()
    averaged, averaged_twin = AveragedModel(model), AveragedModel(twin)
    loader = batches((4, 3, 8, 8), count=2)
    update_bn(loader, averaged)
    update_bn(loader, averaged_twin)
    torch.testing.assert_close(averaged.module.nodes.n_n1.running_var, averaged_twin.module.nodes.n_n1.running_var)


@pytest.mark.parametrize("build, shape", [(classifier, (4, 3, 8, 8)), (signal, (3, 2, 12))],
                         ids=["batch_norm", "batch_norm1d"])
def test_momentum_none_is_torch_cumulative_average(build, shape):
    model, twin = build()
    for module in (model, twin):
        module.nodes.n_n1.momentum = None
    for x in batches(shape, count=3):
        torch.testing.assert_close(model(x), twin(x))
    assert_same_state(model, twin)
    assert model.nodes.n_n1.num_batches_tracked.item() == 3


# -- the one-value-per-channel error ---------------------------------------------------------------
@pytest.mark.parametrize("source, shape", [("batch_norm()", (4, 1, 1)), ("batch_norm1d()", (4, 1))])
def test_one_value_per_channel_in_training_is_an_hndl_error_before_the_layer_runs(source, shape):
    model = network(source, input_shape=("B", *shape), output_shape=("B", *shape), device="cpu")
    layer = model.nodes.n_n0
    for _ in range(2):  # refused again: a failed signature is not remembered
        with pytest.raises(HNDLError) as error:
            model(torch.randn(1, *shape))
        assert error.value.code == "E_RUNTIME" and error.value.location.node == "n0"
        assert "more than one value per channel" in error.value.message and error.value.remedies
    assert layer.num_batches_tracked.item() == 0  # the layer never ran
    model(torch.randn(2, *shape))
    model.eval()
    assert model(torch.randn(1, *shape)).shape == (1, *shape)
    with pytest.raises(HNDLError) as error:
        dry_run(model.plan, batch=1)
    assert error.value.code == "E_RUNTIME" and "more than one value per channel" in error.value.message
    assert dry_run(model.plan, batch=2)["n0"] == {"out": (2, *shape)}
    # The unsealed module checks nothing: torch's own layer raises as a handwritten one does.
    plain = unsealed(model).train()
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        plain(torch.randn(1, *shape))


def test_a_compiled_network_raises_the_same_hndl_error_for_one_value_per_channel():
    model = network("batch_norm()", input_shape=("B", 4, 1, 1), output_shape=("B", 4, 1, 1), device="cpu")
    compiled = torch.compile(model, backend="eager")
    assert compiled(torch.randn(2, 4, 1, 1)).shape == (2, 4, 1, 1)
    with pytest.raises(HNDLError) as error:
        compiled(torch.randn(1, 4, 1, 1))
    assert error.value.code == "E_RUNTIME" and "more than one value per channel" in error.value.message
    assert model.nodes.n_n0.num_batches_tracked.item() == 1  # only the batch of two ran


# -- the runtime_check hook ----------------------------------------------------------------------------
CALLS: list = []


def _needs_two(module: nn.Module, shapes: dict) -> None:
    CALLS.append((module.training, dict(shapes)))
    if module.training and shapes["x"][0] < 2:
        raise HNDLError("E_RUNTIME", "probe in training mode needs two examples", remedies=("Give two.",))


def probe_registry() -> Registry:
    registry = Registry.builtins()

    @registry.operator("probe", summary="Pass x through; a runtime check wants two examples in training.",
                       shape="x[B, D], bias?[B, D] -> out[B, D]", category="shape", runtime_check=_needs_two)
    class Probe(nn.Module):
        """Returns x (plus bias when bound)."""

        def forward(self, x: torch.Tensor, bias=None) -> torch.Tensor:
            return x if bias is None else x + bias

    return registry


def test_the_runtime_check_runs_once_per_input_signature_with_the_bound_shapes():
    registry = probe_registry()
    model = network("linear(5)\nprobe()", input_shape=("B", 3), output_shape=("B", 5), device="cpu",
                    registry=registry)
    CALLS.clear()
    model(torch.randn(2, 3))
    model(torch.randn(2, 3))  # the remembered signature: no check
    assert CALLS == [(True, {"x": (2, 5)})]
    model(torch.randn(4, 3))
    model.eval()
    model(torch.randn(1, 3))
    assert CALLS[1:] == [(True, {"x": (4, 5)}), (False, {"x": (1, 5)})]
    model.train()
    with pytest.raises(HNDLError) as error:
        model(torch.randn(1, 3))
    assert error.value.code == "E_RUNTIME" and error.value.remedies == ("Give two.",)
    assert (error.value.location.node, error.value.location.line) == ("n1", 2)

    def entry(x, y):
        return registry.ops.probe(x, y)

    plan = hndl.resolve_callable(entry, input_shape={"x": ("B", 5), "y": ("B", 5)}, output_shape=("B", 5),
                                 registry=registry)
    CALLS.clear()
    dry_run(plan, registry=registry, batch=3)
    assert CALLS == [(True, {"x": (3, 5), "bias": (3, 5)})]


def test_a_runtime_check_that_is_not_callable_is_a_registry_error():
    with pytest.raises(HNDLError) as error:
        operator("probe2", summary="Nothing.", shape="x[B, D] -> out[B, D]", runtime_check="no")
    assert error.value.code == "E_REGISTRY" and error.value.location.field == "runtime_check"
