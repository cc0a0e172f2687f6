"""stochastic_depth@1 (treated like §6 "Randomness in dropout"): identity in eval and at p = 0,
whole-example ("row") and whole-batch dropping with 1 / (1 - p) rescaling under a seed, p = 1,
equality with torchvision.ops.stochastic_depth under the same seed, the forward-time RNG owned
by the host, a plan that never depends on the RNG, gradcheck/gradgradcheck in float64 with
the mask held fixed, the harness, and every error code."""

import pytest
import torch
from torchvision.ops import StochasticDepth as TorchvisionStochasticDepth, stochastic_depth

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.persist import from_json
from hndl.testing import check_operator
from hndl.torch import build, network
from hndl_ops_vision.stochastic_depth import StochasticDepth


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _model(source, shape):
    return network(source, input_shape=shape, output_shape=shape, device="cpu")


def test_declaration_documents_the_forward_time_randomness():
    spec = spec_of(StochasticDepth)
    assert spec.alias == "stochastic_depth" and spec.qualified == "stochastic_depth@1"
    assert spec.category == "regularization"
    assert spec.positional_args == ("p", "mode")
    p = spec.args["p"]
    assert p.required and p.min == 0 and p.max == 1 and not p.exclusive_min and not p.exclusive_max
    assert spec.args["mode"].default == "row" and spec.args["mode"].choices == ("row", "batch")
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    for phrase in ("forward-time random operator", "global", "Bernoulli", "1 / (1 - p)", "identity",
                   "torch.manual_seed", "digests", "Out-of-place", "torchvision.ops.stochastic_depth", "p = 1"):
        assert phrase in spec.docstring, phrase


def test_the_harness():
    check_operator(StochasticDepth)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_identity_in_eval_mode_and_no_draw(mode):
    model = _model(f'stochastic_depth(0.5, "{mode}")', ("B", 3, 4, 4))
    model.eval()
    x = torch.randn(5, 3, 4, 4)
    before = torch.get_rng_state()
    assert torch.equal(model(x), x)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_p_zero_is_the_identity_in_training_and_draws_nothing(mode):
    model = _model(f'stochastic_depth(0, "{mode}")', ("B", 6))
    assert model.training
    x = torch.randn(4, 6)
    before = torch.get_rng_state()
    assert torch.equal(model(x), x)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_p_one_drops_everything_without_rescaling(mode):
    model = _model(f'stochastic_depth(1.0, "{mode}")', ("B", 3, 2, 2))
    x = torch.randn(4, 3, 2, 2)
    out = model(x)
    assert torch.equal(out, torch.zeros_like(x)) and torch.isfinite(out).all()
    torch.manual_seed(5)
    expected = stochastic_depth(x, 1.0, mode, training=True)
    torch.manual_seed(5)
    assert torch.equal(model(x), expected)
    model.eval()
    assert torch.equal(model(x), x)


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
def test_row_mode_drops_whole_examples_with_probability_p(p):
    torch.manual_seed(1234)
    model = _model(f"stochastic_depth({p})", ("B", 3, 2, 2))
    x = torch.rand(20_000, 3, 2, 2) + 0.5  # strictly positive, so a zero means "dropped"
    out = model(x)
    dropped = (out == 0).flatten(1)
    assert (dropped.all(dim=1) | ~dropped.any(dim=1)).all()  # an example is dropped whole or kept whole
    rows = dropped.all(dim=1)
    assert abs(rows.float().mean().item() - p) < 0.015
    torch.testing.assert_close(out[~rows], x[~rows] / (1 - p))
    # the expectation is preserved: four standard errors of the mean of 20 000 rescaled rows
    assert abs(out.mean().item() - x.mean().item()) < 4 * (p / (1 - p) / 20_000) ** 0.5


def test_batch_mode_keeps_or_drops_the_whole_batch():
    torch.manual_seed(7)
    p = 0.3
    model = _model(f'stochastic_depth({p}, "batch")', ("B", 5, 4))
    x = torch.rand(3, 5, 4) + 0.5
    dropped = 0
    for _ in range(2000):
        out = model(x)
        if (out == 0).all():
            dropped += 1
        else:
            torch.testing.assert_close(out, x / (1 - p))
    assert abs(dropped / 2000 - p) < 0.04


@pytest.mark.parametrize("mode", ["row", "batch"])
@pytest.mark.parametrize("shape", [(8, 5), (8, 3, 4), (8, 2, 3, 3)])
@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_equals_torchvision_under_the_same_seed(mode, shape, p):
    model = _model(f'stochastic_depth({p}, "{mode}")', ("B", *shape[1:]))
    module = model.nodes.n_n0
    x = torch.randn(*shape)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        out = model(x)
        after_ours = torch.get_rng_state()
        torch.manual_seed(seed)
        expected = stochastic_depth(x, p, mode, training=True)
        assert torch.equal(torch.get_rng_state(), after_ours)  # the same draws, so later streams agree too
        torch.manual_seed(seed)
        referenced = spec_of(StochasticDepth).reference(module)(x)
        torch.manual_seed(seed)
        by_module = TorchvisionStochasticDepth(p, mode)(x)
        assert torch.equal(out, expected) and torch.equal(out, referenced) and torch.equal(out, by_module)


def test_two_training_passes_differ_and_manual_seed_reproduces():
    model = _model("stochastic_depth(0.5)", ("B", 3))
    x = torch.randn(64, 3)
    assert not torch.equal(model(x), model(x))
    torch.manual_seed(3)
    first = model(x)
    torch.manual_seed(3)
    assert torch.equal(model(x), first)


def test_forward_advances_the_global_rng_stream():
    model = _model("stochastic_depth(0.5)", ("B", 3))
    before = torch.get_rng_state()
    model(torch.ones(2, 3))
    assert not torch.equal(torch.get_rng_state(), before)


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(0)
    model = _model("stochastic_depth(0.4)", ("B", 6))
    x = (torch.rand(32, 6) + 0.5).requires_grad_(True)
    out = model(x)
    upstream = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    torch.testing.assert_close(grad, upstream * (out != 0).float() / 0.6)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_gradcheck_and_gradgradcheck_in_float64_with_a_fixed_mask(mode):
    module = _model(f'stochastic_depth(0.5, "{mode}")', ("B", 2, 3)).nodes.n_n0

    def seeded(x):
        with torch.random.fork_rng():
            torch.manual_seed(1)  # the same mask on every call gradcheck makes
            return module(x)

    x = torch.randn(6, 2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(seeded, (x,))
    assert torch.autograd.gradgradcheck(seeded, (x,))
    module.eval()
    assert torch.autograd.gradcheck(module, (x,))


def test_out_of_place_never_mutates_the_input():
    module = _model("stochastic_depth(0.5)", ("B", 4)).nodes.n_n0
    x = torch.randn(16, 4)
    copy = x.clone()
    torch.manual_seed(2)
    module(x)
    assert torch.equal(x, copy)


def test_inside_a_residual_branch_shapes_infer_both_ways():
    source = "h = conv(x, kernel_size=3, padding=1)\nd = stochastic_depth(h, 0.2)\nadd(x, d)"
    plan = hndl.resolve(source, input_shape=("B", 4, 6, 6), output_shape=("B", 4, 6, 6))
    assert plan.nodes[0].args["out_channels"] == 4 and plan.nodes[0].provenance["out_channels"] == "inferred"
    plan = hndl.resolve("linear()\nstochastic_depth(0.1)", input_shape=("B", 5, 8), output_shape=("B", 5, 16))
    assert plan.nodes[0].args["out_features"] == 16
    assert plan.nodes[1].args == {"p": 0.1, "mode": "row"} and plan.nodes[1].provenance["mode"] == "default"


def test_plan_and_digests_never_depend_on_the_rng():
    source = "linear(8)\nstochastic_depth(0.3)\nlinear()"
    contract = {"input_shape": ("B", 4), "output_shape": ("B", 2)}
    texts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        torch.rand(17)
        before = torch.get_rng_state()
        plan = hndl.resolve(source, **contract)
        assert torch.equal(torch.get_rng_state(), before)  # resolution draws nothing
        texts.append(plan.to_json())
        model = build(plan, device="cpu")
        model(x=torch.randn(4, 4))  # a forward draws a mask ...
        assert plan.to_json() == texts[-1]  # ... and the plan is unchanged
    assert texts[0] == texts[1]
    assert from_json(texts[0]).semantic_digest == hndl.resolve(source, **contract).semantic_digest


def test_building_draws_nothing_and_holds_no_state():
    before = torch.get_rng_state()
    model = _model("stochastic_depth(0.5)", ("B", 4))
    assert torch.equal(torch.get_rng_state(), before)
    assert list(model.parameters()) == [] and list(model.buffers()) == []


@pytest.mark.parametrize("source", ["stochastic_depth()", "stochastic_depth(-0.1)", "stochastic_depth(1.5)",
                                    'stochastic_depth("0.5")', "stochastic_depth(True)",
                                    'stochastic_depth(0.1, "element")', "stochastic_depth(0.1, 1)",
                                    'stochastic_depth(0.1, "row", 2)', "stochastic_depth(p=None)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4), ("B", 4)).code == "E_ARGUMENT"


def test_a_shape_change_is_a_constraint_error():
    assert _fails("stochastic_depth(0.1)", ("B", 4, 3, 3), ("B", 4, 3, 2)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("stochastic_depth(0.1)", ("B", 4), ("B", 4), input_dtype="int64").code == "E_DTYPE"


def test_runtime_shape_mismatch_is_a_runtime_error():
    model = _model("stochastic_depth(0.1)", ("B", 4))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 5))
    assert error.value.code == "E_RUNTIME"
