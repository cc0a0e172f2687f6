"""moe@1: declaration, inference, routing semantics (top-k selection, softmax over the selected
logits, each expert run once on exactly its tokens), numerics against the dense written-out
reference (forward, input, router and expert gradients), determinism, float64 gradcheck and
gradgradcheck, and every error code it raises."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.feed_forward import FeedForward
from hndl_ops_transformer.moe import MoE


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _expert(expert, x):
    return expert.fc2(F.gelu(expert.fc1(x)))


def test_declaration():
    spec = spec_of(MoE)
    assert spec.alias == "moe" and spec.qualified == "moe@1"
    assert spec.category == "feed-forward"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("experts", "top_k")
    assert spec.args["experts"].required and spec.args["top_k"].required
    assert spec.args["expansion"].default == 4 and spec.args["bias"].default is True
    assert all(arg.help for arg in spec.args.values())


def test_structure_and_inferred_width():
    plan = hndl.resolve("linear()\nmoe(3, 2, expansion=2)", input_shape=("B", 4, 5), output_shape=("B", 4, 6))
    assert plan.nodes[0].args["out_features"] == 6
    assert plan.nodes[1].args == {"experts": 3, "top_k": 2, "expansion": 2, "bias": True}
    _, layer = _module("moe(3, 2, expansion=2)", ("B", 4, 6))
    assert tuple(layer.router.weight.shape) == (3, 6) and layer.router.bias is None
    assert len(layer.experts) == 3 and all(isinstance(expert, FeedForward) for expert in layer.experts)
    assert all(tuple(expert.fc1.weight.shape) == (12, 6) for expert in layer.experts)


@pytest.mark.parametrize("experts, top_k", [(4, 1), (4, 2), (4, 4), (1, 1)])
def test_forward_and_backward_match_the_dense_reference(experts, top_k):
    torch.manual_seed(experts * 10 + top_k)
    model, layer = _module(f"moe({experts}, {top_k}, expansion=2)", ("B", 5, 6))
    reference = spec_of(MoE).reference(layer)
    x = torch.randn(3, 5, 6, requires_grad=True)
    upstream = torch.randn(3, 5, 6)
    ours = model(x)
    theirs = reference(x)
    torch.testing.assert_close(ours, theirs)
    params = list(layer.parameters())
    our_grads = torch.autograd.grad(ours, [x, *params], upstream)
    their_grads = torch.autograd.grad(theirs, [x, *params], upstream, allow_unused=True)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, torch.zeros_like(a) if b is None else b)


def test_each_token_mixes_its_top_k_experts_with_a_softmax_over_their_logits():
    torch.manual_seed(3)
    model, layer = _module("moe(4, 2)", ("B", 3, 4))
    x = torch.randn(2, 3, 4)
    out = model(x)
    for b in range(2):
        for t in range(3):
            token = x[b, t]
            logits = layer.router(token)
            chosen = torch.argsort(logits, descending=True)[:2]
            weights = torch.softmax(logits[chosen], dim=0)
            expected = sum(w * _expert(layer.experts[int(e)], token) for w, e in zip(weights, chosen))
            torch.testing.assert_close(out[b, t], expected)


def test_top_1_routes_each_token_to_its_argmax_expert_alone():
    torch.manual_seed(4)
    model, layer = _module("moe(3, 1)", ("B", 4, 4))
    x = torch.randn(2, 4, 4)
    choice = layer.router(x).argmax(dim=-1)
    expected = torch.stack([_expert(layer.experts[int(e)], x[b, t]) for b, t, e in
                            ((b, t, choice[b, t]) for b in range(2) for t in range(4))]).reshape(2, 4, 4)
    torch.testing.assert_close(model(x), expected)


def test_top_k_equal_to_experts_is_the_dense_softmax_mixture():
    torch.manual_seed(5)
    model, layer = _module("moe(3, 3)", ("B", 2, 4))
    x = torch.randn(2, 2, 4)
    gate = torch.softmax(layer.router(x), dim=-1)
    expected = sum(gate[..., e:e + 1] * _expert(expert, x) for e, expert in enumerate(layer.experts))
    torch.testing.assert_close(model(x), expected)


def test_every_expert_runs_once_on_exactly_the_tokens_routed_to_it():
    torch.manual_seed(6)
    model, layer = _module("moe(4, 2)", ("B", 8, 4))
    seen = {}
    for number, expert in enumerate(layer.experts):
        expert.register_forward_hook(lambda module, args, out, number=number:
                                     seen.setdefault(number, []).append(args[0].shape[0]))
    x = torch.randn(3, 8, 4)
    model(x)
    routed = torch.topk(layer.router(x.reshape(-1, 4)), 2, dim=-1).indices
    assert seen == {e: [int((routed == e).sum())] for e in range(4)}
    assert sum(count for (count,) in seen.values()) == 3 * 8 * 2


def test_router_learns_with_top_k_two_but_receives_no_gradient_at_top_1():
    torch.manual_seed(7)
    x = torch.randn(2, 5, 4)
    model, layer = _module("moe(3, 2)", ("B", 5, 4))
    (grad,) = torch.autograd.grad(model(x).pow(2).sum(), [layer.router.weight])
    assert torch.count_nonzero(grad) > 0
    model, layer = _module("moe(3, 1)", ("B", 5, 4))
    (grad,) = torch.autograd.grad(model(x).pow(2).sum(), [layer.router.weight], allow_unused=True)
    assert grad is None or torch.count_nonzero(grad) == 0


def test_forward_is_deterministic_and_draws_no_randomness():
    model, _ = _module("moe(4, 2)", ("B", 6, 8))
    x = torch.randn(2, 6, 8)
    state = torch.get_rng_state()
    model.train()
    first, second = model(x), model(x)
    model.eval()
    assert torch.equal(first, second) and torch.equal(first, model(x))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("top_k", [1, 2])
def test_float64_gradcheck_and_gradgradcheck(top_k):
    torch.manual_seed(8)
    _, layer = _module(f"moe(3, {top_k}, expansion=1)", ("B", 3, 3))
    layer = layer.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def run(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs, fast_mode=True)  # every second derivative, projected
    assert torch.autograd.gradgradcheck(layer, (inputs[0],))  # element by element for the input


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_compute_dtypes(dtype):
    torch.manual_seed(9)
    model = network("moe(4, 2)", input_shape=("B", 5, 8), output_shape=("B", 5, 8), device="cpu", dtype=dtype)
    layer = model.nodes.n_n0
    assert all(p.dtype == getattr(torch, dtype) for p in layer.parameters())
    x = torch.randn(2, 5, 8).to(getattr(torch, dtype))
    out = model(x)
    assert out.dtype == getattr(torch, dtype)
    expected = spec_of(MoE).reference(layer.float())(x.float())
    torch.testing.assert_close(out.float(), expected, rtol=5e-2, atol=5e-2)


# -- errors -------------------------------------------------------------------------------------------------
def test_top_k_above_experts_is_an_argument_error():
    error = _fails("moe(2, 3)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_ARGUMENT" and error.location.node == "n0" and error.location.field == "top_k"
    with pytest.raises(HNDLError) as direct:
        MoE(experts=2, top_k=3, D=8)
    assert direct.value.code == "E_ARGUMENT"


@pytest.mark.parametrize("source", ["moe()", "moe(4)", "moe(0, 1)", "moe(4, 0)", "moe(4, -1)", "moe(4.0, 2)",
                                    "moe(4, 2, expansion=0)", "moe(4, 2, bias=0)", "moe(4, 2, noise=0.1)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("moe(2, 1)", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_output_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("moe(2, 1)", ("B", 4, 8), ("B", 4, 6)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("moe(2, 1)", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"


def test_more_experts_than_the_module_bound_allows_is_a_resource_error_before_real_construction():
    # moe(n) creates 3 + 3 * n modules: itself, the router, the expert list and each expert's three
    from hndl.torch import build, parameter_counts

    plan = hndl.resolve("moe(200, 1, expansion=1)", input_shape=("B", 4, 8), output_shape=("B", 4, 8))
    for call in (lambda limits: build(plan, device="cpu", limits=limits),
                 lambda limits: parameter_counts(plan, limits=limits),
                 lambda limits: network("moe(200, 1, expansion=1)", input_shape=("B", 4, 8),
                                        output_shape=("B", 4, 8), device="cpu", limits=limits)):
        with pytest.raises(HNDLError) as error:
            call({"max_node_modules": 602})
        assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0"
        assert "more than 602 torch modules" in error.value.message
        assert "limits['max_node_modules']" in error.value.message
    assert len(build(plan, device="cpu", limits={"max_node_modules": 603}).nodes.n_n0.experts) == 200
