"""layers=: one port per submodule from a single pass that stops after the last of them, cloned
captures that in-place activations cannot corrupt, first and second derivatives, and every failure."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.torch import build

IMAGE = ("B", 3, 8, 8)


def _fails(call):
    with pytest.raises(HNDLError) as error:
        call()
    return error.value


def _images(batch=3, grad=False):
    x = torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    return x.requires_grad_() if grad else x


def _layers(kit, path, sha, names, outputs, output_shape, registry):
    call = kit.net_source(path, sha, f", layers={tuple(names)!r}")
    source = f"{', '.join(outputs)}, = {call}\nout = {outputs[-1]}"
    return hndl.resolve(source, input_shape=IMAGE, output_shape=output_shape, registry=registry)


def _manual(reference, names, x):
    """Each named submodule's output by an ordinary forward hook, out of place (cloned immediately)."""
    seen = {}

    def recorder(name):
        def hook(module, args, output):
            seen.setdefault(name, output.clone())  # returns None: the model's own values are untouched

        return hook

    handles = [getattr(reference, name).register_forward_hook(recorder(name)) for name in names]
    reference(x.clone())
    for handle in handles:
        handle.remove()
    return [seen[name] for name in names]


NAMES = ("conv1", "act1", "conv2")


def test_one_port_per_entry_at_native_shapes(registry, net_pth, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, NAMES, ("a", "b", "c"), ("B", 6, 4, 4), registry)
    node = plan.nodes[0]
    assert node.outputs == ("out0", "out1", "out2")
    assert node.output_shapes == {"out0": ("B", 4, 8, 8), "out1": ("B", 4, 8, 8), "out2": ("B", 6, 4, 4)}


def test_values_equal_manual_hooks_despite_in_place_activations(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, NAMES, ("a", "b", "c"), ("B", 6, 4, 4), registry)
    model = build(plan, device="cpu", registry=registry)
    node = model.nodes.n_n0
    x = _images()
    produced = node(x)
    assert isinstance(produced, tuple) and len(produced) == 3
    for ours, theirs in zip(produced, _manual(net_reference, NAMES, x)):
        torch.testing.assert_close(ours, theirs)
    assert (produced[0] < -1).any()  # conv1's capture kept values tanh_ overwrote in place afterwards


def test_the_pass_stops_after_the_last_requested_submodule(registry, net_pth, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, ("conv2", "conv1"), ("a", "b"), ("B", 4, 8, 8), registry)
    model = build(plan, device="cpu", registry=registry)
    inner = model.nodes.n_n0.model
    calls = []
    hooks = [getattr(inner, name).register_forward_hook(lambda *args, name=name: calls.append(name))
             for name in ("conv1", "act1", "conv2", "act2", "pool", "fc")]
    a, b = model.nodes.n_n0(_images())
    for hook in hooks:
        hook.remove()
    assert calls == ["conv1", "act1", "conv2"]  # nothing after conv2 ran
    assert a.shape == (3, 6, 4, 4) and b.shape == (3, 4, 8, 8)  # in the order written


def test_first_and_second_derivatives_reach_the_input(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, NAMES, ("a", "b", "c"), ("B", 6, 4, 4), registry)
    node = build(plan, device="cpu", registry=registry).nodes.n_n0
    reference = kit.Net()
    reference.load_state_dict(net_reference.state_dict())
    x = _images(grad=True)
    y = x.detach().clone().requires_grad_()
    # Out-of-place reference values of the same three points.
    conv1 = reference.conv1(y)
    act1 = torch.tanh(conv1)
    conv2 = reference.conv2(act1)
    for ours, theirs in zip(node(x), (conv1, act1, conv2)):
        (grad,) = torch.autograd.grad((ours ** 2).sum(), x, create_graph=True)
        (expected,) = torch.autograd.grad((theirs ** 2).sum(), y, create_graph=True)
        torch.testing.assert_close(grad, expected)
        (second,) = torch.autograd.grad(grad.pow(2).sum(), x, retain_graph=True)
        (expected_second,) = torch.autograd.grad(expected.pow(2).sum(), y, retain_graph=True)
        torch.testing.assert_close(second, expected_second)
        assert second.abs().sum() > 0


def test_a_one_entry_layers_still_returns_a_tuple(registry, net_pth, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, ("conv2",), ("a",), ("B", 6, 4, 4), registry)
    assert plan.nodes[0].outputs == ("out0",)
    node = build(plan, device="cpu", registry=registry).nodes.n_n0
    (value,) = node(_images())
    assert value.shape == (3, 6, 4, 4)


def test_empty_layers_keeps_the_single_port_and_its_digest(registry, net_pth, kit):
    path, sha = net_pth
    without = hndl.resolve(kit.net_source(path, sha), input_shape=IMAGE, output_shape=("B", 5), registry=registry)
    empty = hndl.resolve(kit.net_source(path, sha, ", layers=()"), input_shape=IMAGE, output_shape=("B", 5),
                         registry=registry)
    assert empty.nodes[0].outputs == ("out",)
    assert empty.semantic_digest == without.semantic_digest


def test_a_layers_plan_round_trips(registry, net_pth, kit):
    path, sha = net_pth
    plan = _layers(kit, path, sha, NAMES, ("a", "b", "c"), ("B", 6, 4, 4), registry)
    restored = hndl.ResolvedPlan.from_json(plan.to_json(), registry=registry)
    assert restored == plan and restored.nodes[0].outputs == ("out0", "out1", "out2")


def test_a_single_layer_stops_at_its_first_run(registry, tmp_path, kit):
    path = tmp_path / "twice.pth"
    reference = kit.Twice()
    torch.save(reference.state_dict(), path)
    source = f'pretrained("{path}", provider="twice", sha256="{kit.sha256_of(path)}", layer="block")'
    plan = hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    x = torch.randn(2, 4)
    out = build(plan, device="cpu", registry=registry)(x=x)["output"]
    torch.testing.assert_close(out, reference.block(x))  # the pass stopped before the second run


@pytest.mark.parametrize("layers, words", [
    (("conv1", "conv1"), "more than once"),
    (("conv1", ""), "empty entry"),
    (("conv1", "nope"), "conv1, act1, conv2"),
])
def test_duplicate_empty_and_unknown_entries_fail(registry, net_pth, kit, layers, words):
    path, sha = net_pth
    error = _fails(lambda: _layers(kit, path, sha, layers, ("a", "b"), ("B", 4, 8, 8), registry))
    assert error.code == "E_PRETRAINED" and words in error.message


@pytest.mark.parametrize("extra", [', layer="conv1"', ', readout="pooled"'])
def test_layers_conflicts_with_layer_and_readout(registry, net_pth, kit, extra):
    path, sha = net_pth
    source = "a, b = " + kit.net_source(path, sha, f', layers=("conv1", "conv2"){extra}') + "\nout = b"
    error = _fails(lambda: hndl.resolve(source, input_shape=IMAGE, output_shape=("B", 6, 4, 4), registry=registry))
    assert error.code == "E_PRETRAINED" and "mutually exclusive" in error.message


def test_a_submodule_that_runs_twice_fails(registry, tmp_path, kit):
    path = tmp_path / "twice.pth"
    torch.save(kit.Twice().state_dict(), path)
    source = (f'a, b = pretrained("{path}", provider="twice", sha256="{kit.sha256_of(path)}", '
              'layers=("block", "head"))\nout = b')
    error = _fails(lambda: hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 2), registry=registry))
    assert error.code == "E_PRETRAINED" and "more than once" in error.message


def test_layers_through_the_batch_axis(registry, net_pth, net_reference, kit):
    path, sha = net_pth
    source = ("both = concat(x, x, axis=0)\n"
              "a, b = " + kit.net_source(path, sha, ', layers=("act1", "conv2")').replace(
                  'pretrained("', 'pretrained(both, "') + "\n"
              "left, right = chunk(b, 2, dim=0)\nout = add(left, right)")
    plan = hndl.resolve(source, input_shape=IMAGE, output_shape=("B", 6, 4, 4), registry=registry)
    node = next(node for node in plan.nodes if node.alias == "pretrained")
    assert node.input_shapes == {"x": ("2*B", 3, 8, 8)}
    assert node.output_shapes == {"out0": ("2*B", 4, 8, 8), "out1": ("2*B", 6, 4, 4)}
    model = build(plan, device="cpu", registry=registry)
    for batch in (1, 3):
        x = torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(batch)).requires_grad_()
        out = model(x=x)["output"]
        (conv2,) = _manual(net_reference, ("conv2",), x.detach())
        torch.testing.assert_close(out, 2 * conv2)
        (grad,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(grad.pow(2).sum(), x)
        assert torch.isfinite(second).all() and second.abs().sum() > 0
