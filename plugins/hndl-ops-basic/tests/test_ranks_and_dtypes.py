"""Ranks and dtypes across the basic pack (§3): [B, T, D] sequences resolve and execute through
linear, the normalizations and the activations; float16 and bfloat16 plans of such a chain build,
run and round-trip through the plan JSON with an equal semantic digest; an integer contract
reaching a floating port fails with E_DTYPE, while token ids reach embedding."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl.torch import build, network

SEQUENCE = ("B", 5, 8)
CHAIN = """
linear(16)
layer_norm()
gelu()
linear(16)
rms_norm()
relu()
linear(12)
sigmoid()
linear()
tanh()
gelu("tanh")
softmax(dim=-1)
"""
CHAIN_CONTRACTS = dict(input_shape=SEQUENCE, output_shape=("B", 5, 4))
ACTIVATIONS = ["gelu()", 'gelu("tanh")', "relu()", "sigmoid()", "tanh()", "softmax(dim=-1)", "softmax(-2)",
               "leaky_relu(0.1)"]
FLOATING = ["linear(4)", "layer_norm()", "rms_norm()", *ACTIVATIONS]
HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _replay(model, x):
    """The chain written out with torch.nn.functional and the modules' own parameters."""
    n = model.nodes
    h = F.linear(x, n.n_n0.weight, n.n_n0.bias)
    h = F.gelu(F.layer_norm(h, (16,), n.n_n1.weight, n.n_n1.bias, 1e-5))
    h = F.linear(h, n.n_n3.weight, n.n_n3.bias)
    h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * n.n_n4.weight
    h = torch.sigmoid(F.linear(torch.relu(h), n.n_n6.weight, n.n_n6.bias))
    h = torch.tanh(F.linear(h, n.n_n8.weight, n.n_n8.bias))
    return torch.softmax(F.gelu(h, approximate="tanh"), dim=-1)


def test_a_sequence_chain_resolves_at_rank_three():
    plan = hndl.resolve(CHAIN, **CHAIN_CONTRACTS)
    assert [node.alias for node in plan.nodes] == [
        "linear", "layer_norm", "gelu", "linear", "rms_norm", "relu", "linear", "sigmoid", "linear", "tanh",
        "gelu", "softmax",
    ]
    for node in plan.nodes:
        for shape in (*node.input_shapes.values(), *node.output_shapes.values()):
            assert len(shape) == 3 and shape[:2] == ("B", 5)
    assert plan.nodes[8].args["out_features"] == 4 and plan.nodes[8].provenance["out_features"] == "inferred"
    assert plan.nodes[1].output_shapes["out"] == ("B", 5, 16)
    assert plan.nodes[4].input_shapes["x"] == ("B", 5, 16)


def test_a_sequence_chain_executes_position_by_position():
    model = network(CHAIN, device="cpu", **CHAIN_CONTRACTS)
    x = torch.randn(3, 5, 8, requires_grad=True)
    out = model(x)
    assert out.shape == (3, 5, 4)
    torch.testing.assert_close(out, _replay(model, x.detach()))
    torch.testing.assert_close(out.sum(-1), torch.ones(3, 5))
    # each position depends only on itself: perturbing position 2 leaves the others alone
    bumped = x.detach().clone()
    bumped[:, 2] += 1
    moved = model(bumped)
    unchanged = [0, 1, 3, 4]
    torch.testing.assert_close(moved[:, unchanged], out.detach()[:, unchanged])
    assert not torch.allclose(moved[:, 2], out.detach()[:, 2])
    out[..., 0].sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation_resolves_and_runs_on_sequences(activation):
    model = network(f"linear()\n{activation}", input_shape=SEQUENCE, output_shape=("B", 5, 6), device="cpu")
    assert model.plan.nodes[0].args["out_features"] == 6
    assert model.plan.nodes[1].input_shapes["x"] == ("B", 5, 6)
    out = model(torch.randn(2, 5, 8))
    assert out.shape == (2, 5, 6) and torch.isfinite(out).all()


@pytest.mark.parametrize("norm", ["layer_norm()", "rms_norm()"])
def test_normalizations_act_on_the_last_axis_of_sequences(norm):
    model = network(norm, input_shape=SEQUENCE, output_shape=SEQUENCE, device="cpu")
    x = torch.randn(2, 5, 8) * 3 + 1
    out = model(x)
    if norm == "layer_norm()":
        torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
        torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
    else:
        torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(2, 5), atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_chain_builds_runs_and_round_trips(dtype):
    torch_dtype = HALF[dtype]
    plan = hndl.resolve(CHAIN, dtype=dtype, **CHAIN_CONTRACTS)
    assert plan.dtype == dtype
    model = build(plan, device="cpu")
    assert all(p.dtype == torch_dtype for p in model.parameters())
    x = torch.randn(3, 5, 8)
    out = model(x=x.to(torch_dtype))["output"]
    assert out.dtype == torch_dtype and out.shape == (3, 5, 4) and torch.isfinite(out).all()
    # the same parameters in float32 give nearly the same answer
    full = build(hndl.resolve(CHAIN, **CHAIN_CONTRACTS), device="cpu")
    full.load_state_dict({name: value.float() for name, value in model.state_dict().items()})
    tolerance = 2e-2 if dtype == "float16" else 6e-2
    torch.testing.assert_close(out.float(), full(x=x)["output"], atol=tolerance, rtol=0)
    text = plan.to_json()
    restored = ResolvedPlan.from_json(text)
    assert restored.dtype == dtype
    assert restored.semantic_digest == plan.semantic_digest
    assert restored.to_json() == text
    rebuilt = build(restored, device="cpu")
    rebuilt.load_state_dict(model.state_dict())
    assert torch.equal(rebuilt(x=x.to(torch_dtype))["output"], out)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_network_runs_backward(dtype):
    model = network(CHAIN, device="cpu", dtype=dtype, **CHAIN_CONTRACTS)
    x = torch.randn(2, 5, 8, dtype=HALF[dtype], requires_grad=True)
    out = model(x)
    assert out.dtype == HALF[dtype]
    (out * torch.randn_like(out)).sum().backward()
    assert x.grad.dtype == HALF[dtype] and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_a_float32_tensor_into_a_half_plan_fails_at_runtime(dtype):
    model = network("layer_norm()", input_shape=SEQUENCE, output_shape=SEQUENCE, device="cpu", dtype=dtype)
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 5, 8))
    assert error.value.code == "E_RUNTIME"


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_token_ids_feed_a_half_plan_through_embedding(dtype):
    source = "embedding(100)\nlayer_norm()\ngelu()\nlinear(6, in_features=16)\nsoftmax(-1)"
    plan = hndl.resolve(source, input_shape=("B", 7), output_shape=("B", 7, 6), input_dtype="int64", dtype=dtype)
    assert plan.nodes[0].args["embedding_dim"] == 16  # from the consumer, as the inferred width rules say
    assert plan.inputs[0]["dtype"] == "int64"
    restored = ResolvedPlan.from_json(plan.to_json())
    assert restored.semantic_digest == plan.semantic_digest
    out = build(restored, device="cpu")(x=torch.randint(0, 100, (2, 7)))["output"]
    assert out.dtype == HALF[dtype] and out.shape == (2, 7, 6)


@pytest.mark.parametrize("first", FLOATING)
@pytest.mark.parametrize("input_dtype", ["int64", "int32", "bool"])
def test_an_integer_contract_reaching_a_floating_port_is_a_dtype_error(first, input_dtype):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(first, input_shape=SEQUENCE, output_shape=("B", 5, 4 if first == "linear(4)" else 8),
                     input_dtype=input_dtype)
    assert error.value.code == "E_DTYPE"
    assert error.value.location.node == "n0"


@pytest.mark.parametrize("dtype", ["float32", *sorted(HALF)])
def test_integer_ids_deep_in_a_graph_are_checked_once_per_edge(dtype):
    # the ids reach embedding legally, but the same integer input also reaches layer_norm
    with pytest.raises(HNDLError) as error:
        hndl.resolve("e = embedding(x, 10, 4)\nn = layer_norm(x)\nadd(e, n)", input_shape=("B", 4),
                     output_shape=("B", 4, 4), input_dtype="int64", dtype=dtype)
    assert error.value.code == "E_DTYPE" and error.value.location.node == "n1"


def test_rank_four_reaches_elementwise_activations_but_not_normalizations():
    image = ("B", 2, 3, 3)
    for activation in ACTIVATIONS:
        model = network(activation, input_shape=image, output_shape=image, device="cpu")
        assert model(torch.randn(2, 2, 3, 3)).shape == (2, 2, 3, 3)
    for norm in ("layer_norm()", "rms_norm()", "linear(3)"):
        with pytest.raises(HNDLError) as error:
            hndl.resolve(norm, input_shape=image, output_shape=image)
        assert error.value.code == "E_CONSTRAINT"


def test_float64_is_not_a_plan_dtype():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("gelu()", input_shape=("B", 4), output_shape=("B", 4), dtype="float64")
    assert error.value.code == "E_SCHEMA"
