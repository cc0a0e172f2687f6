"""Providers: a .pth state dict loads only into a registry-registered architecture, with its sha256
verified; layer= and readout= select what the node returns."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.torch import build, dry_run, parameter_counts

IMAGE = ("B", 3, 8, 8)


def _resolve(source, registry, input_shape=IMAGE, output_shape=("B", 5), **kwargs):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry, **kwargs)


def _fails(call):
    with pytest.raises(HNDLError) as error:
        call()
    return error.value


def _images(batch=3):
    return torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(3))


def test_the_state_dict_fills_the_registered_architecture(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha), registry)
    node = plan.nodes[0]
    assert node.args["revision"] == "sha256:" + sha and node.provenance["revision"] == "inferred"
    model = build(plan, device="cpu", registry=registry)
    x = _images()
    torch.testing.assert_close(model(x=x)["output"], net_reference(x))
    assert not any(p.requires_grad for p in model.parameters())
    model.train()
    assert not model.nodes.n_n0.model.training


def test_sha256_is_verified_at_resolution(registry, net_pth, kit):
    path, sha = net_pth
    wrong = ("0" if sha[0] != "0" else "1") + sha[1:]
    error = _fails(lambda: _resolve(kit.net_source(path, wrong), registry))
    assert error.code == "E_PRETRAINED" and sha in error.message


def test_sha256_is_verified_again_just_before_loading(registry, net_pth, kit, tmp_path):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha), registry)
    torch.save({key: value + 1 for key, value in torch.load(path).items()}, path)
    error = _fails(lambda: build(plan, device="cpu", registry=registry))
    assert error.code == "E_PRETRAINED" and "sha256" in error.message.lower()


def test_a_provider_must_be_registered_on_the_registry_in_use(net_pth, kit, registry):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha), Registry.builtins()))  # another registry
    assert error.code == "E_PRETRAINED" and "'net'" in error.message
    plan = _resolve(kit.net_source(path, sha), registry)
    error = _fails(lambda: build(plan, device="cpu", registry=Registry.builtins()))
    assert error.code == "E_PRETRAINED"


def test_loading_is_strict(tmp_path, registry, net_reference, kit):
    state = net_reference.state_dict()
    state.pop("fc.bias")
    path = tmp_path / "partial.pth"
    torch.save(state, path)
    plan = _resolve(kit.net_source(path, kit.sha256_of(path)), registry)
    error = _fails(lambda: build(plan, device="cpu", registry=registry))
    assert error.code == "E_PRETRAINED" and "fc.bias" in error.message


def test_no_object_is_unpickled(tmp_path, registry, kit):
    path = tmp_path / "object.pth"
    torch.save({"weights": kit.Net()}, path)  # a pickled module, not a state dict
    plan = _resolve(kit.net_source(path, kit.sha256_of(path)), registry)
    error = _fails(lambda: build(plan, device="cpu", registry=registry))
    assert error.code == "E_PRETRAINED" and "weights-only" in error.message


def test_a_provider_needs_a_floating_input(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha), registry, input_dtype="int64"))
    assert error.code == "E_DTYPE"


def test_the_meta_trace_validates_the_declared_input(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha), registry, input_shape=("B", 4, 8, 8)))
    assert error.code == "E_CONSTRAINT" and "[B, 4, 8, 8]" in error.message


def test_provider_resolution_allocates_nothing(registry, net_pth, kit):
    from hndl_pretrained import tracing

    path, sha = net_pth
    tracing._TRACES.clear()
    with kit.NoEffects() as recorder:
        plan = _resolve(kit.net_source(path, sha, ', layer="conv2"'), registry, output_shape=("B", 6, 4, 4))
    assert recorder.operations > 0 and plan.nodes[0].output_shapes == {"out": ("B", 6, 4, 4)}


def test_the_parameter_probe_keeps_off_the_file(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha), registry)
    path.unlink()
    assert parameter_counts(plan, registry=registry) == {"n0": sum(p.numel() for p in net_reference.parameters())}


def test_a_dry_run_constructs_a_provider_under_the_registry_it_names(registry, net_pth, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha), registry)
    assert dry_run(plan, registry=registry, batch=3) == {"n0": {"out": (3, 5)}}


def test_output_and_component_do_not_apply_to_providers(registry, net_pth, kit):
    path, sha = net_pth
    assert _fails(lambda: _resolve(kit.net_source(path, sha, ', output="pooled"'), registry)).code == "E_PRETRAINED"
    assert _fails(lambda: _resolve(kit.net_source(path, sha, ', component="vision"'), registry)).code == "E_PRETRAINED"


# -- layer= ----------------------------------------------------------------------------------------------------------
def test_layer_returns_the_submodule_output_equal_to_a_manual_hook(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha, ', layer="conv2"'), registry, output_shape=("B", 6, 4, 4))
    model = build(plan, device="cpu", registry=registry)
    x = _images()
    seen = []
    handle = net_reference.conv2.register_forward_hook(lambda module, args, output: seen.append(output.clone()))
    net_reference(x)
    handle.remove()
    torch.testing.assert_close(model(x=x)["output"], seen[0])


def test_an_unknown_layer_lists_the_submodules(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha, ', layer="conv9"'), registry))
    assert error.code == "E_PRETRAINED" and "conv9" in error.message
    assert "conv1, act1, conv2, act2, pool, flatten, fc" in error.message


@pytest.mark.parametrize("extra", [', layer="encoder"', ', layers=("encoder",)', ', readout="pooled"'])
def test_layer_layers_and_readout_are_rejected_on_transformers_and_timm(gpt2_dir, resnet_dir, extra):
    def call(directory):  # layers= returns a tuple, so it is unpacked
        return (f'(a,) = pretrained("{directory}"{extra})\nout = a' if "layers" in extra
                else f'pretrained("{directory}"{extra})')

    error = _fails(lambda: hndl.resolve(call(gpt2_dir), input_shape=("B", 8), output_shape=("B", 8, 32),
                                        input_dtype="int64"))
    assert error.code == "E_PRETRAINED" and "provider" in error.message
    error = _fails(lambda: hndl.resolve(call(resnet_dir), input_shape=("B", 3, 64, 64), output_shape=("B", 512)))
    assert error.code == "E_PRETRAINED"


# -- readout= ---------------------------------------------------------------------------------------------------------
def test_a_readout_returns_exactly_its_tensor(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha, ', readout="pooled"'), registry, output_shape=("B", 6))
    assert plan.nodes[0].output_shapes == {"out": ("B", 6)}
    model = build(plan, device="cpu", registry=registry)
    x = _images()
    fn = registry.readouts("net")["pooled"]
    torch.testing.assert_close(model(x=x)["output"], fn(net_reference, x))


def test_a_readout_survives_a_round_trip(registry, net_pth, kit):
    path, sha = net_pth
    plan = _resolve(kit.net_source(path, sha, ', readout="pooled"'), registry, output_shape=("B", 6))
    restored = hndl.ResolvedPlan.from_json(plan.to_json(), registry=registry)
    assert restored == plan and restored.nodes[0].args["readout"] == "pooled"


def test_an_unknown_readout_lists_the_offered_ones(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha, ', readout="logits"'), registry))
    assert error.code == "E_PRETRAINED" and "pair, pooled" in error.message


def test_a_readout_returning_several_tensors_fails(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha, ', readout="pair"'), registry))
    assert error.code == "E_PRETRAINED" and "not one tensor" in error.message


def test_readout_and_layer_conflict(registry, net_pth, kit):
    path, sha = net_pth
    error = _fails(lambda: _resolve(kit.net_source(path, sha, ', readout="pooled", layer="conv1"'), registry))
    assert error.code == "E_PRETRAINED" and "mutually exclusive" in error.message


def test_a_builder_must_return_a_module(net_pth, kit):
    path, sha = net_pth
    registry = Registry.builtins()
    registry.pretrained_provider("net", lambda: "not a module")
    error = _fails(lambda: _resolve(kit.net_source(path, sha), registry))
    assert error.code == "E_PRETRAINED" and "nn.Module" in error.message


def test_the_model_output_must_be_one_tensor(tmp_path, kit):
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x), x

    registry = Registry.builtins()
    registry.pretrained_provider("pair", Pair)
    path = tmp_path / "pair.pth"
    torch.save(Pair().state_dict(), path)
    error = _fails(lambda: _resolve(f'pretrained("{path}", provider="pair", sha256="{kit.sha256_of(path)}")', registry,
                                    input_shape=("B", 4), output_shape=("B", 4)))
    assert error.code == "E_PRETRAINED" and "not one tensor" in error.message
