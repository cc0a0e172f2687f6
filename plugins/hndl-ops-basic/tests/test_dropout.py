"""dropout@1 (§6 "Randomness in dropout", §14 "Numerical validity"): mask statistics and
rescaling, identity in eval and at p = 0, forward-time RNG under the host's torch.manual_seed,
argument bounds, and a plan that never depends on the RNG."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.persist import from_json
from hndl.torch import build, network
from hndl_ops_basic.dropout import Dropout

SHAPE = ("B", 100_000)


def model_for(p, shape=SHAPE):
    return network(f"dropout({p})", input_shape=shape, output_shape=shape, device="cpu")


def test_declaration_documents_the_forward_time_randomness():
    spec = spec_of(Dropout)
    assert spec.alias == "dropout" and spec.qualified == "dropout@1"
    assert spec.args["p"].default == 0.5
    assert spec.args["p"].exclusive_max and not spec.args["p"].exclusive_min
    assert spec.category == "regularization"
    assert spec.examples and all(arg.help for arg in spec.args.values())
    doc = spec.docstring
    for phrase in ("one forward-time random operator", "global", "Bernoulli", "1 / (1 - p)",
                   "identity", "torch.manual_seed", "digests", "Out-of-place"):
        assert phrase in doc, phrase


def test_mask_statistics_and_rescaling_for_p_0_3():
    torch.manual_seed(1234)
    model = model_for(0.3)
    assert model.training  # a built module starts in training mode
    x = torch.rand(1, 100_000) + 0.5  # strictly positive, so a zero means "dropped"
    out = model(x)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - 0.3) < 0.01
    kept = ~dropped
    torch.testing.assert_close(out[kept], x[kept] / (1 - 0.3))
    # the expectation is preserved
    assert abs(out.mean().item() - x.mean().item()) < 0.01


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_statistics_and_exact_scale_on_sequences_for_several_p(p):
    torch.manual_seed(99)
    shape = ("B", 200, 500)
    model = model_for(p, shape)
    x = torch.rand(1, 200, 500) + 0.5  # strictly positive, so a zero means "dropped"
    out = model(x)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - p) < 0.01
    kept = ~dropped
    torch.testing.assert_close(out[kept] / x[kept], torch.full_like(x[kept], 1 / (1 - p)), rtol=1e-6, atol=0)
    model.eval()
    assert torch.equal(model(x), x)  # the identity in eval mode, whatever p


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(0)
    model = model_for(0.4, ("B", 64))
    x = (torch.rand(3, 64) + 0.5).requires_grad_(True)
    out = model(x)
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    mask = (out != 0).float()
    torch.testing.assert_close(grad, upstream * mask / 0.6)


def test_identity_in_eval_mode_and_no_draw():
    model = model_for(0.5, ("B", 16, 4))
    model.eval()
    x = torch.randn(3, 16, 4)
    before = torch.get_rng_state()
    out = model(x)
    assert torch.equal(torch.get_rng_state(), before)  # eval draws nothing
    assert torch.equal(out, x)


def test_p_zero_is_the_identity_in_training_mode():
    model = model_for(0.0, ("B", 32))
    assert model.training
    x = torch.randn(5, 32)
    assert torch.equal(model(x), x)


def test_two_training_passes_differ_and_manual_seed_reproduces():
    model = model_for(0.5, ("B", 1000))
    x = torch.randn(2, 1000)
    first, second = model(x), model(x)
    assert not torch.equal(first, second)
    torch.manual_seed(7)
    a = model(x)
    torch.manual_seed(7)
    b = model(x)
    assert torch.equal(a, b)


def test_forward_advances_the_global_rng_stream():
    model = model_for(0.5, ("B", 10))
    before = torch.get_rng_state()
    model(torch.ones(1, 10))
    assert not torch.equal(torch.get_rng_state(), before)


def test_matches_its_reference_and_handwritten_dropout_under_the_same_seed():
    model = model_for(0.2, ("B", 8, 8))
    module = model.nodes.n_n0
    x = torch.randn(4, 8, 8)
    torch.manual_seed(3)
    out = model(x)
    torch.manual_seed(3)
    expected = F.dropout(x, 0.2, training=True)
    torch.manual_seed(3)
    referenced = spec_of(Dropout).reference(module)(x)
    assert torch.equal(out, expected) and torch.equal(out, referenced)
    torch.manual_seed(3)
    assert torch.equal(torch.nn.Dropout(0.2)(x), out)


def test_out_of_place_never_mutates_the_input():
    model = network("h = linear(x, 6)\nd = dropout(h, 0.5)\nadd(h, d)", input_shape=("B", 4),
                    output_shape=("B", 6), device="cpu")
    x = torch.randn(5, 4)
    layer = model.nodes.n_n0
    torch.manual_seed(11)
    out = model(x)
    h = F.linear(x, layer.weight, layer.bias)
    torch.manual_seed(11)
    torch.testing.assert_close(out, h + F.dropout(h, 0.5, True))
    saved = torch.randn(5, 6)
    copy = saved.clone()
    model.nodes.n_n1(saved)
    assert torch.equal(saved, copy)


@pytest.mark.parametrize("source", ["dropout(1.0)", "dropout(1)", "dropout(-0.1)", "dropout(1.5)",
                                    'dropout("0.5")', "dropout(True)", "dropout(0.1, 0.2)"])
def test_out_of_bounds_and_wrong_types_are_argument_errors(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 4), output_shape=("B", 4))
    assert error.value.code == "E_ARGUMENT"


def test_default_p_and_provenance():
    plan = hndl.resolve("dropout()", input_shape=("B", 4), output_shape=("B", 4))
    assert plan.nodes[0].args["p"] == 0.5 and plan.nodes[0].provenance["p"] == "default"
    plan = hndl.resolve("dropout(p=0)", input_shape=("B", 4), output_shape=("B", 4))
    assert plan.nodes[0].args["p"] == 0.0 and isinstance(plan.nodes[0].args["p"], float)


def test_plan_and_digests_never_depend_on_the_rng():
    source = "linear(64)\nrelu()\ndropout(0.3)\nlinear()"
    contract = {"input_shape": ("B", 32), "output_shape": ("B", 10)}
    texts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        torch.rand(17)  # a different stream position as well
        before = torch.get_rng_state()
        plan = hndl.resolve(source, **contract)
        assert torch.equal(torch.get_rng_state(), before)  # resolution draws nothing
        texts.append(plan.to_json())
        model = build(plan, device="cpu")
        model(x=torch.randn(4, 32))  # a forward draws a mask ...
        assert plan.to_json() == texts[-1]  # ... and the plan is unchanged
    assert texts[0] == texts[1]
    restored = from_json(texts[0])
    assert restored.semantic_digest == hndl.resolve(source, **contract).semantic_digest


def test_building_a_dropout_node_draws_nothing():
    before = torch.get_rng_state()
    model = model_for(0.5, ("B", 4))
    assert torch.equal(torch.get_rng_state(), before)
    assert list(model.parameters()) == [] and list(model.buffers()) == []
