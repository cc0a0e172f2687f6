"""Tools that restructure a model (issue 28 item 1): the sealed network refuses, ``unsealed`` is the step.

A built ``Network`` is sealed: every structural edit through it is an ``HNDLError`` (``E_RUNTIME``)
whose remedy names ``hndl.torch.unsealed(model)``; re-assigning the module already registered is
not an edit. ``unsealed(model)`` is a plain ``nn.Module`` over the same layers (same tensors,
state-dict keys, inputs and outputs) that peft's LoRA, activation checkpointing,
``convert_sync_batchnorm`` and ``fuse_modules`` restructure exactly as they restructure the
handwritten twin each test builds beside it. docs/backend.md's "Works with" table names these tests.
"""

from __future__ import annotations

import copy
import inspect
import pickle

import pytest
import torch
from torch import nn

import hndl.torch
from hndl import HNDLError
from hndl.torch import network, unsealed
from hndl.torch.plain import PlainNetwork

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
CONV_NET = """
conv(8, kernel_size=3, padding=1)
relu()
flatten()
linear(32)
relu()
linear()
"""
MLP = "linear(64)\nrelu()\nlinear(10)"


def classifier() -> nn.Module:
    return network(CLASSIFIER, input_shape=("B", 3, 8, 8), output_shape=("B", 10), device="cpu",
                   initialization_seed=0)


def conv_net() -> nn.Module:
    return network(CONV_NET, input_shape=("B", 3, 4, 4), output_shape=("B", 10), device="cpu",
                   initialization_seed=0)


def mlp() -> nn.Module:
    return network(MLP, input_shape=("B", 128), output_shape=("B", 10), device="cpu", initialization_seed=0)


class Twin(nn.Module):
    """A handwritten model: its layers in a ``nodes`` dict under the network's names, run in order."""

    def __init__(self, layers: dict[str, nn.Module]) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.nodes.values():
            x = layer(x)
        return x


def twin_classifier(model: nn.Module) -> Twin:
    twin = Twin({
        "n_n0": nn.Conv2d(3, 8, 3, padding=1), "n_n1": nn.BatchNorm2d(8), "n_n2": nn.ReLU(),
        "n_n3": nn.MaxPool2d(2), "n_n4": nn.Flatten(), "n_n5": nn.Linear(128, 32), "n_n6": nn.ReLU(),
        "n_n7": nn.Linear(32, 10),
    })
    twin.load_state_dict(model.state_dict())
    return twin


def twin_conv_net(model: nn.Module) -> Twin:
    twin = Twin({
        "n_n0": nn.Conv2d(3, 8, 3, padding=1), "n_n1": nn.ReLU(), "n_n2": nn.Flatten(),
        "n_n3": nn.Linear(128, 32), "n_n4": nn.ReLU(), "n_n5": nn.Linear(32, 10),
    })
    twin.load_state_dict(model.state_dict())
    return twin


def images(batch: int = 4, size: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def assert_names_unsealed(error: pytest.ExceptionInfo) -> None:
    assert isinstance(error.value, HNDLError) and error.value.code == "E_RUNTIME"
    assert any("hndl.torch.unsealed(model)" in remedy for remedy in error.value.remedies)


# -- the plain module --------------------------------------------------------------------------------
def test_unsealed_shares_the_layers_and_gives_the_same_keys_values_and_gradients():
    model = classifier()
    plain = unsealed(model)
    assert isinstance(plain, PlainNetwork) and type(plain.nodes) is nn.ModuleDict
    assert list(plain.state_dict()) == list(model.state_dict())
    assert all(a is b for a, b in zip(plain.parameters(), model.parameters()))
    assert all(a is b for a, b in zip(plain.buffers(), model.buffers()))
    assert plain["n5"] is model["n5"] and plain.source_plan is model.plan and not hasattr(plain, "plan")
    x = images()
    for mode in ("train", "eval"):
        getattr(model, mode)()
        getattr(plain, mode)()
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected, got = model(x1), plain(x2)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(plain(x=x), expected)  # by keyword too, like the network
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(x2.grad, x1.grad)
    assert model.plan is not None and model.training is False  # the network is left as it was


def test_unsealed_keeps_a_multi_input_multi_output_calling_convention():
    model = network(
        "left = linear(a, 8)\ntotal = add(left, b)",
        input_shape={"a": ("B", 4), "b": ("B", 8)}, output_shape={"total": ("B", 8), "left": ("B", 8)},
        device="cpu", initialization_seed=0,
    )
    plain = unsealed(model)
    a, b = torch.randn(2, 4), torch.randn(2, 8)
    expected = model(a, b)
    for got in (plain(a, b), plain(a, b=b), plain(b=b, a=a)):
        assert list(got) == ["total", "left"]
        for name in expected:
            torch.testing.assert_close(got[name], expected[name])
    with pytest.raises(HNDLError) as error:
        plain(a)
    assert error.value.code == "E_BINDING" and "missing b" in error.value.message
    with pytest.raises(TypeError, match="multiple values for argument 'a'"):  # as for any module
        plain(a, a=a, b=b)
    assert list(inspect.signature(type(plain).forward).parameters) == ["self", "a", "b"]


def test_unsealed_of_a_graph_module_keeps_its_keyword_inputs_and_dictionary_output():
    graph = hndl.torch.build(mlp().plan, device="cpu", initialization_seed=0)
    plain = unsealed(graph)
    x = torch.randn(2, 128)
    got, expected = plain(x=x), graph(x=x)
    assert list(got) == list(expected) == ["output"]
    torch.testing.assert_close(got["output"], expected["output"])
    with pytest.raises(TypeError, match="positional"):  # keyword-only, as the GraphModule takes them
        plain(x)
    with pytest.raises(HNDLError) as error:
        plain()
    assert error.value.code == "E_BINDING" and "missing x" in error.value.message


def test_unsealed_edits_are_free_and_never_reach_the_network():
    model = classifier().eval()
    x = images()
    expected = model(x)
    plain = unsealed(model).eval()
    plain.nodes["n_n2"] = nn.Tanh()
    plain.nodes.n_n6 = nn.Sequential(nn.ReLU(), nn.Dropout(0.0))
    assert torch.equal(plain(x), plain(x)) and not torch.allclose(plain(x), expected)
    torch.testing.assert_close(model(x), expected)  # the network still runs its own layers
    assert type(model["n2"]) is nn.ReLU
    del plain.nodes["n_n6"]
    with pytest.raises(HNDLError) as error:
        plain(x)
    assert error.value.code == "E_RUNTIME" and "nodes.n_n6 was removed" in error.value.message
    plain.nodes["n_n6"] = nn.Identity()
    plain.load_state_dict(model.state_dict())  # the same keys both ways
    model.load_state_dict(plain.state_dict())
    copied = copy.deepcopy(plain)
    assert copied.nodes.n_n5.weight is not plain.nodes.n_n5.weight
    torch.testing.assert_close(pickle.loads(pickle.dumps(plain))(x), plain(x))
    with pytest.raises(HNDLError) as error:
        unsealed(nn.Linear(2, 2))
    assert error.value.code == "E_RUNTIME"


def test_unsealed_of_a_meta_network_allocates_nothing_and_runs_shapes_only():
    model = network(MLP, input_shape=("B", 128), output_shape=("B", 10), device="meta")
    plain = unsealed(model)
    assert all(tensor.is_meta for tensor in plain.state_dict().values())
    assert plain(torch.empty(3, 128, device="meta")).shape == (3, 10)


def test_unsealed_traces_with_fx_and_torch_export_like_the_network():
    model = classifier().eval()
    plain = unsealed(model)
    x = images()
    traced = torch.fx.symbolic_trace(plain)
    def calls(graph_module: torch.fx.GraphModule) -> list:
        return [node.target for node in graph_module.graph.nodes if node.op == "call_module"]

    assert calls(traced) == calls(torch.fx.symbolic_trace(model))  # the torch layers, as nodes.n_<id>
    assert "nodes.n_n0" in calls(traced)
    torch.testing.assert_close(traced(x), model(x))
    exported = torch.export.export(plain, (x,)).module()
    torch.testing.assert_close(exported(x), model(x))
    for clone in (copy.deepcopy(plain), pickle.loads(pickle.dumps(plain))):
        assert type(clone) is type(plain)  # the class whose forward names the inputs
        torch.testing.assert_close(torch.fx.symbolic_trace(clone)(x), model(x))


def test_unsealed_of_a_copy_has_independent_weights():
    model = classifier()
    plain = unsealed(copy.deepcopy(model))
    with torch.no_grad():
        plain["n5"].weight.zero_()
    assert model["n5"].weight.abs().sum() > 0


# -- the sealed network ------------------------------------------------------------------------------
def test_every_structural_edit_of_the_sealed_network_is_an_hndl_error_naming_unsealed():
    model = mlp()
    x = torch.randn(2, 128)
    model(x)
    model(x)  # a remembered signature: the fast path runs next
    forbidden = [
        lambda: model.__setitem__("n0", nn.Linear(128, 64)),
        lambda: model.__setitem__(0, nn.Linear(128, 64)),
        lambda: model.__delitem__(0),
        lambda: model.append(nn.Linear(10, 10)),
        lambda: model.pop(0),
        lambda: setattr(model, "extra", nn.Linear(2, 2)),
        lambda: setattr(model, "nodes", nn.ModuleDict()),
        lambda: setattr(model, "plan", None),
        lambda: delattr(model, "nodes"),
        lambda: model.add_module("nodes", nn.ModuleDict()),
        lambda: model.register_buffer("count", torch.zeros(1)),
        lambda: model.nodes.__setitem__("n_n0", nn.Linear(128, 64)),
        lambda: setattr(model.nodes, "n_n0", nn.Linear(128, 64)),
        lambda: model.nodes.add_module("n_n0", nn.Linear(128, 64)),
        lambda: model.nodes.update({"n_n0": nn.Linear(128, 64)}),
        lambda: model.nodes.pop("n_n1"),
        lambda: model._modules.__setitem__("nodes", nn.ModuleDict({"n_n0": nn.Linear(128, 10)})),
        lambda: model._modules.__setitem__("extra", nn.Linear(2, 2)),
        lambda: model._modules.pop("nodes"),
        lambda: model._modules.__delitem__("nodes"),
        lambda: model._modules.update(nodes=nn.ModuleDict()),
        lambda: model._modules.clear(),
    ]
    for attempt in forbidden:
        with pytest.raises(HNDLError) as error:
            attempt()
        assert_names_unsealed(error)
        assert isinstance(error.value, TypeError)  # as these edits always were
        assert pickle.loads(pickle.dumps(error.value)).remedies == error.value.remedies
    # What the model reports is what runs: the same container, the same layers, the same values.
    nodes = model._modules["nodes"]
    assert model.nodes is nodes and list(model._modules) == ["nodes"]
    assert [name for name, _ in model.named_parameters()] == [
        "nodes.n_n0.weight", "nodes.n_n0.bias", "nodes.n_n2.weight", "nodes.n_n2.bias"]
    expected = nodes.n_n2(nodes.n_n1(nodes.n_n0(x)))
    torch.testing.assert_close(model(x), expected)
    clone = copy.deepcopy(model)
    with pytest.raises(HNDLError) as error:
        clone._modules["nodes"] = nn.ModuleDict()
    assert_names_unsealed(error)
    restored = pickle.loads(pickle.dumps(model))
    with pytest.raises(HNDLError):
        restored._modules["nodes"] = nn.ModuleDict()
    torch.testing.assert_close(restored(x), expected)


def test_a_graph_module_reports_its_nodes_container_replaced_behind_its_back():
    graph = hndl.torch.build(mlp().plan, device="cpu", initialization_seed=0)
    x = torch.randn(2, 128)
    graph(x=x)
    graph(x=x)  # a remembered signature: the fast path runs next
    clone = copy.deepcopy(graph)
    graph._modules["nodes"] = nn.ModuleDict({"n_n0": nn.Linear(128, 10)})  # no torch hook runs for this
    with pytest.raises(HNDLError) as error:  # never the old modules while parameters() reports the new
        graph(x=x)
    assert error.value.code == "E_RUNTIME" and "submodule 'nodes' was replaced" in error.value.message
    clone(x=x)
    clone(x=x)
    clone._modules["nodes"] = nn.ModuleDict()  # a copy watches its own dict
    with pytest.raises(HNDLError):
        clone(x=x)


def test_putting_back_the_registered_module_is_not_a_structural_edit():
    model = mlp()
    x = torch.randn(2, 128)
    expected = model(x)
    layer = model["n0"]
    model.nodes = model.nodes
    model.add_module("nodes", model.nodes)
    model.register_module("nodes", model.nodes)
    model._modules["nodes"] = model.nodes
    model["n0"] = layer
    model[0] = layer
    model.nodes["n_n0"] = layer
    model.nodes.n_n0 = layer
    model.nodes.add_module("n_n0", layer)
    model.nodes.update({"n_n0": layer, "n_n1": model["n1"]})
    model.nodes.update(model.nodes)
    assert model["n0"] is layer and list(model.state_dict()) == ["nodes.n_n0.weight", "nodes.n_n0.bias",
                                                                  "nodes.n_n2.weight", "nodes.n_n2.bias"]
    torch.testing.assert_close(model(x), expected)


# -- peft LoRA ---------------------------------------------------------------------------------------
def test_peft_lora_trains_and_merges_on_the_unsealed_network_like_on_its_handwritten_twin():
    from peft import LoraConfig, get_peft_model

    model = classifier()
    twin = twin_classifier(model)
    x, target = images(6), torch.randn(6, 10, generator=torch.Generator().manual_seed(3))
    before = model(x).detach()
    with pytest.raises(HNDLError) as error:  # the sealed network itself refuses, naming the step
        get_peft_model(copy.deepcopy(model), LoraConfig(target_modules=["n_n5", "n_n7"], r=4))
    assert_names_unsealed(error)

    tuned = []
    for base in (unsealed(model), twin):
        torch.manual_seed(0)  # LoRA's A matrices are drawn: the same draws for both
        tuned.append(get_peft_model(base, LoraConfig(target_modules=["n_n5", "n_n7"], r=4, lora_alpha=8)))
    ours, theirs = tuned
    torch.testing.assert_close(ours(x), before)  # B starts at zero: equal outputs at init
    torch.testing.assert_close(theirs(x), before)
    assert [n for n, p in ours.named_parameters() if p.requires_grad] == \
        [n for n, p in theirs.named_parameters() if p.requires_grad]
    for peft_model in tuned:
        optimizer = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=0.1)
        nn.functional.mse_loss(peft_model(x), target).backward()
        optimizer.step()
    trained = ours(x).detach()
    assert not torch.allclose(trained, before)
    torch.testing.assert_close(trained, theirs(x))
    merged, merged_twin = ours.merge_and_unload(), theirs.merge_and_unload()
    assert isinstance(merged, PlainNetwork) and type(merged["n5"]) is nn.Linear
    assert list(merged.state_dict()) == list(model.state_dict())
    torch.testing.assert_close(merged(x), trained)
    torch.testing.assert_close(merged(x), merged_twin(x))
    # The layers were shared: the merged weights are the network's, which still runs sealed.
    torch.testing.assert_close(model(x), trained)


# -- activation checkpointing ------------------------------------------------------------------------
def test_activation_checkpointing_wraps_the_unsealed_layers_with_equal_forward_and_backward():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper,
        apply_activation_checkpointing,
    )

    def check_fn(module: nn.Module) -> bool:
        return isinstance(module, (nn.Conv2d, nn.Linear))

    model = classifier()
    twin = twin_classifier(model)
    # On the sealed network: torch reassigns every child; with nothing to wrap that changes nothing.
    apply_activation_checkpointing(model, check_fn=lambda module: False)
    with pytest.raises(HNDLError) as error:
        apply_activation_checkpointing(model, check_fn=check_fn)
    assert_names_unsealed(error)
    assert type(model["n0"]) is nn.Conv2d

    plain = unsealed(copy.deepcopy(model))
    for module in (plain, twin):
        apply_activation_checkpointing(module, check_fn=check_fn)
    assert isinstance(plain["n0"], CheckpointWrapper) and isinstance(plain["n7"], CheckpointWrapper)
    assert list(plain.state_dict()) == list(model.state_dict())  # the wrapper strips its own prefix
    x = images()
    outputs, gradients = [], []
    for module in (model, plain, twin):
        out = module(x)
        out.square().mean().backward()
        outputs.append(out.detach())
        gradients.append([p.grad for p in module.parameters()])
    for out, grads in zip(outputs[1:], gradients[1:]):
        torch.testing.assert_close(out, outputs[0])
        for got, want in zip(grads, gradients[0]):
            torch.testing.assert_close(got, want)


# -- SyncBatchNorm -----------------------------------------------------------------------------------
def test_convert_sync_batchnorm_works_on_a_network_without_batch_norm_and_unsealed_with_it():
    network_ = mlp()
    x = torch.randn(3, 128)
    expected = network_(x)
    # A DDP script's unconditional first line: nothing to convert, so nothing changes.
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(network_)
    assert converted is network_
    torch.testing.assert_close(network_(x), expected)

    model = classifier()
    with pytest.raises(HNDLError) as error:  # a batch norm to convert: that is a structural edit
        nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert_names_unsealed(error)
    twin = twin_classifier(model)
    plain = nn.SyncBatchNorm.convert_sync_batchnorm(unsealed(copy.deepcopy(model)))
    twin = nn.SyncBatchNorm.convert_sync_batchnorm(twin)
    assert type(plain["n1"]) is nn.SyncBatchNorm and type(twin.nodes.n_n1) is nn.SyncBatchNorm
    assert list(plain.state_dict()) == list(model.state_dict())
    images_ = images()
    for mode in ("train", "eval"):  # no process group: torch's SyncBatchNorm computes local batch norm
        for module in (model, plain, twin):
            getattr(module, mode)()
        expected = model(images_)
        torch.testing.assert_close(plain(images_), expected)
        torch.testing.assert_close(twin(images_), expected)
    key = "nodes.n_n1.running_mean"  # the training-mode call updated both running statistics alike
    torch.testing.assert_close(plain.state_dict()[key], model.state_dict()[key])


# -- fusion ------------------------------------------------------------------------------------------
def test_fuse_modules_fuses_conv_relu_and_linear_relu_of_the_unsealed_network_like_its_twin():
    import torch.ao.nn.intrinsic as nni
    from torch.ao.quantization import fuse_modules

    model = conv_net().eval()
    twin = twin_conv_net(model).eval()
    groups = [["nodes.n_n0", "nodes.n_n1"], ["nodes.n_n3", "nodes.n_n4"]]
    with pytest.raises(HNDLError) as error:
        fuse_modules(model, groups, inplace=True)
    assert_names_unsealed(error)
    plain = fuse_modules(unsealed(model).eval(), groups)
    fused_twin = fuse_modules(twin, groups)
    assert type(plain["n0"]) is nni.ConvReLU2d and type(plain["n3"]) is nni.LinearReLU
    assert type(plain["n1"]) is nn.Identity and type(fused_twin.nodes.n_n1) is nn.Identity
    x = images(size=4)
    expected = model(x)
    torch.testing.assert_close(plain(x), expected)
    torch.testing.assert_close(fused_twin(x), expected)


# -- layers inside a composite node ------------------------------------------------------------------
def test_a_batch_norm_inside_a_composite_node_converts_unsealed_and_is_reported_by_the_sealed_network():
    model = network("residual_block(8)", input_shape=("B", 8, 6, 6), output_shape=("B", 8, 6, 6), device="cpu",
                    initialization_seed=0)
    x = torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(2))
    plain = nn.SyncBatchNorm.convert_sync_batchnorm(unsealed(copy.deepcopy(model)))
    assert type(plain["n0"].bn1) is nn.SyncBatchNorm and list(plain.state_dict()) == list(model.state_dict())
    for mode in ("train", "eval"):
        expected = getattr(model, mode)()(x)
        torch.testing.assert_close(getattr(plain, mode)()(x), expected)
    # On the sealed network the conversion reaches inside node n0's own module: the network's
    # registered-state check reports it at the next call instead of running a layer its plan lacks.
    nn.SyncBatchNorm.convert_sync_batchnorm(model)
    with pytest.raises(HNDLError) as error:
        model(x)
    assert error.value.code == "E_RUNTIME"
    assert "submodule 'nodes.n_n0.bn1' was replaced with SyncBatchNorm" in error.value.message


def test_peft_targets_layers_inside_a_composite_node_of_the_unsealed_network():
    from peft import LoraConfig, get_peft_model

    model = network("linear(48)\nfeed_forward(2)\nlinear()", input_shape=("B", 8, 12), output_shape=("B", 8, 10),
                    device="cpu", initialization_seed=0)
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(4))
    expected = model(x)
    tuned = get_peft_model(unsealed(copy.deepcopy(model)), LoraConfig(target_modules=["fc1", "fc2"], r=2))
    assert sorted(n for n, p in tuned.named_parameters() if p.requires_grad) == [
        f"base_model.model.nodes.n_n1.{layer}.lora_{side}.default.weight"
        for layer in ("fc1", "fc2") for side in ("A", "B")]
    torch.testing.assert_close(tuned(x), expected)
    torch.testing.assert_close(model(x), expected)  # unsealed from a copy: the network is untouched
