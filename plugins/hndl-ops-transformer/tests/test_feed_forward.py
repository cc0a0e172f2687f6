"""feed_forward@3: declaration, the hidden width rule (expansion * D, or hidden), inference, numerics
against the written-out reference and a handwritten nn.Sequential (forward and backward) for every
activation, the activations against torch.nn.functional, GPT-2's MLP (gelu_new), timm's Mlp,
transformers' LlamaMLP (SwiGLU), T5's gated-gelu and CLIP's quick_gelu MLP with copied weights,
float64 gradcheck and gradgradcheck, and every error code it raises."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.feed_forward import FeedForward


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(FeedForward)
    assert spec.alias == "feed_forward" and spec.qualified == "feed_forward@3"
    assert spec.category == "feed-forward"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("expansion",)
    assert spec.args["expansion"].default == 4 and spec.args["expansion"].min == 1
    assert spec.args["bias"].default is True
    assert spec.args["activation"].default == "gelu"
    assert spec.args["activation"].choices == ("gelu", "gelu_tanh", "relu", "silu", "quick_gelu")
    assert spec.args["hidden"].default is None and spec.args["gated"].default is False
    assert not spec.args["activation"].positional and not spec.args["bias"].positional
    assert not spec.args["hidden"].positional and not spec.args["gated"].positional
    assert all(arg.help for arg in spec.args.values())


@pytest.mark.parametrize("source, hidden", [("feed_forward()", 40), ("feed_forward(2)", 20),
                                            ("feed_forward(expansion=1)", 10)])
def test_hidden_width_is_expansion_times_the_input_width(source, hidden):
    plan = hndl.resolve(source, input_shape=("B", 3, 10), output_shape=("B", 3, 10))
    assert plan.nodes[0].args["expansion"] == hidden // 10
    _, layer = _module(source, ("B", 3, 10))
    assert tuple(layer.fc1.weight.shape) == (hidden, 10) and tuple(layer.fc2.weight.shape) == (10, hidden)


def test_default_expansion_is_recorded_with_its_provenance():
    node = hndl.resolve("feed_forward()", input_shape=("B", 3, 10), output_shape=("B", 3, 10)).nodes[0]
    assert node.args == {"expansion": 4, "hidden": None, "gated": False, "activation": "gelu", "bias": True}
    assert set(node.provenance.values()) == {"default"}


def test_unfixed_width_is_ambiguous_not_guessed():
    error = _fails("linear()\nfeed_forward()\nlinear(3)", ("B", 5, 2), ("B", 5, 3))
    assert error.code == "E_AMBIGUOUS"


def test_width_from_the_output_contract_reaches_the_producer():
    plan = hndl.resolve("linear()\nfeed_forward()", input_shape=("B", 5, 2), output_shape=("B", 5, 6))
    assert plan.nodes[0].args["out_features"] == 6
    assert plan.nodes[1].input_shapes["x"] == ("B", 5, 6)


def test_bias_false_drops_both_biases():
    _, layer = _module("feed_forward(bias=False)", ("B", 3, 4))
    assert layer.fc1.bias is None and layer.fc2.bias is None
    assert [name for name, _ in layer.named_parameters()] == ["fc1.weight", "fc2.weight"]


TORCH_ACTIVATIONS = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "relu": nn.ReLU(),
                     "silu": nn.SiLU()}


@pytest.mark.parametrize("activation", sorted(TORCH_ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_backward_match_the_reference_and_a_handwritten_mlp(bias, activation):
    torch.manual_seed(0)
    model, layer = _module(f"feed_forward(3, activation={activation!r}, bias={bias})", ("B", 4, 6))
    handwritten = nn.Sequential(nn.Linear(6, 18, bias=bias), TORCH_ACTIVATIONS[activation],
                                nn.Linear(18, 6, bias=bias))
    handwritten.load_state_dict({key.replace("fc1", "0").replace("fc2", "2"): value
                                 for key, value in layer.state_dict().items()})
    reference = spec_of(FeedForward).reference(layer)
    x = torch.randn(2, 4, 6, requires_grad=True)
    upstream = torch.randn(2, 4, 6)
    ours = model(x)
    torch.testing.assert_close(ours, reference(x))
    torch.testing.assert_close(ours, handwritten(x))
    our_grads = torch.autograd.grad(ours, [x, *layer.parameters()], upstream)
    reference_grads = torch.autograd.grad(reference(x), [x, *layer.parameters()], upstream)
    hand_grads = torch.autograd.grad(handwritten(x), [x, *handwritten.parameters()], upstream)
    for a, b, c in zip(our_grads, reference_grads, hand_grads):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)


FUNCTIONAL = {"gelu": lambda x: F.gelu(x, approximate="none"), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
              "relu": F.relu, "silu": F.silu, "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x)}


@pytest.mark.parametrize("activation", sorted(FUNCTIONAL))
def test_each_activation_is_the_torch_function_of_that_name(activation):
    model, layer = _module(f"feed_forward(1, activation={activation!r}, bias=False)", ("B", 1, 1))
    with torch.no_grad():
        layer.fc1.weight.fill_(1.0)
        layer.fc2.weight.fill_(1.0)
    x = torch.linspace(-3, 3, 13).reshape(13, 1, 1)
    torch.testing.assert_close(model(x), FUNCTIONAL[activation](x))
    for other in set(FUNCTIONAL) - {activation}:
        assert not torch.allclose(model(x), FUNCTIONAL[other](x), rtol=0, atol=1e-5)


def test_the_default_activation_is_the_exact_gelu():
    model, layer = _module("feed_forward(1, bias=False)", ("B", 1, 1))
    assert layer.activation == "gelu"
    with torch.no_grad():
        layer.fc1.weight.fill_(1.0)
        layer.fc2.weight.fill_(1.0)
    x = torch.linspace(-3, 3, 7).reshape(7, 1, 1)
    torch.testing.assert_close(model(x), F.gelu(x, approximate="none"))
    assert not torch.allclose(model(x), F.gelu(x, approximate="tanh"), rtol=0, atol=1e-5)


def test_matches_gpt2s_mlp_with_copied_conv1d_weights():
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    torch.manual_seed(6)
    config = GPT2Config(n_embd=8, n_head=2, activation_function="gelu_new", resid_pdrop=0.0)
    gpt2 = GPT2MLP(4 * 8, config).eval()
    model, layer = _module("feed_forward(activation='gelu_tanh')", ("B", 5, 8))
    with torch.no_grad():  # Conv1D stores [in, out]: our Linear weights are its transposes
        layer.fc1.weight.copy_(gpt2.c_fc.weight.t())
        layer.fc1.bias.copy_(gpt2.c_fc.bias)
        layer.fc2.weight.copy_(gpt2.c_proj.weight.t())
        layer.fc2.bias.copy_(gpt2.c_proj.bias)
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(model(x), gpt2(x))


def test_timms_mlp_state_dict_loads_directly():
    from timm.layers import Mlp

    torch.manual_seed(7)
    mlp = Mlp(8, hidden_features=32).eval()  # exact GELU, fc1 / fc2 as ours
    model, layer = _module("feed_forward()", ("B", 5, 8))
    layer.load_state_dict(mlp.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(model(x), mlp(x))


def test_positions_are_mapped_independently():
    torch.manual_seed(1)
    model, _ = _module("feed_forward()", ("B", 5, 4))
    x = torch.randn(2, 5, 4)
    changed = x.clone()
    changed[:, 3] += 1.0
    before, after = model(x), model(changed)
    torch.testing.assert_close(after[:, [0, 1, 2, 4]], before[:, [0, 1, 2, 4]], rtol=0, atol=0)
    assert not torch.allclose(after[:, 3], before[:, 3])


@pytest.mark.parametrize("activation", sorted(FUNCTIONAL))
def test_float64_gradcheck_and_gradgradcheck(activation):
    torch.manual_seed(2)
    _, layer = _module(f"feed_forward(2, activation={activation!r})", ("B", 3, 3))
    layer = layer.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def expand(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(expand, inputs)
    assert torch.autograd.gradgradcheck(expand, inputs)


@pytest.mark.parametrize("source", ["feed_forward(0)", "feed_forward(-1)", "feed_forward(1.5)",
                                    "feed_forward(True)", "feed_forward(bias=1)", "feed_forward(hidden=0)",
                                    "feed_forward(2, hidden=64)", "feed_forward(gated=1)",
                                    "feed_forward(activation='swish')", "feed_forward(activation='GELU')",
                                    "feed_forward(activation=1)", "feed_forward(2, 'relu')"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_direct_construction_checks_the_activation():
    with pytest.raises(HNDLError) as error:
        FeedForward(activation="tanh", D=4)
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == "activation"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("feed_forward()", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_output_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("feed_forward()", ("B", 4, 8), ("B", 4, 6)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("feed_forward()", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"


# == version 3: hidden, gated, quick_gelu ==========================================================================
def test_hidden_sets_the_width_directly():
    plan = hndl.resolve("feed_forward(hidden=13)", input_shape=("B", 3, 10), output_shape=("B", 3, 10))
    assert plan.nodes[0].args["hidden"] == 13 and plan.nodes[0].provenance["hidden"] == "explicit"
    _, layer = _module("feed_forward(hidden=13)", ("B", 3, 10))
    assert tuple(layer.fc1.weight.shape) == (13, 10) and tuple(layer.fc2.weight.shape) == (10, 13)


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_gated_network_matches_the_reference_and_a_handwritten_glu(activation, bias):
    torch.manual_seed(20)
    model, layer = _module(f"feed_forward(hidden=11, gated=True, activation={activation!r}, bias={bias})", ("B", 4, 6))
    shapes = {name: tuple(p.shape) for name, p in layer.named_parameters()}
    expected_shapes = {"gate_proj.weight": (11, 6), "up_proj.weight": (11, 6), "down_proj.weight": (6, 11)}
    if bias:
        expected_shapes.update({"gate_proj.bias": (11,), "up_proj.bias": (11,), "down_proj.bias": (6,)})
    assert shapes == expected_shapes
    x = torch.randn(2, 4, 6, requires_grad=True)
    upstream = torch.randn(2, 4, 6)
    ours = model(x)
    handwritten = layer.down_proj(FUNCTIONAL[activation](layer.gate_proj(x)) * layer.up_proj(x))
    reference = spec_of(FeedForward).reference(layer)(x)
    torch.testing.assert_close(ours, handwritten)
    torch.testing.assert_close(ours, reference)
    params = [x, *layer.parameters()]
    for a, b in zip(torch.autograd.grad(ours, params, upstream), torch.autograd.grad(reference, params, upstream)):
        torch.testing.assert_close(a, b)


def test_matches_transformers_llama_mlp_with_copied_weights():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(21)
    model, layer = _module("feed_forward(hidden=43, gated=True, activation='silu', bias=False)", ("B", 5, 16))
    theirs = LlamaMLP(LlamaConfig(hidden_size=16, intermediate_size=43, num_attention_heads=4, num_key_value_heads=4,
                                  hidden_act="silu", mlp_bias=False, vocab_size=8))
    theirs.load_state_dict(layer.state_dict())  # gate_proj, up_proj, down_proj one to one
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(model(x), theirs(x))


@pytest.mark.parametrize("projection", ["relu", "gated-gelu"])
def test_matches_transformers_t5_feed_forward_with_copied_weights(projection):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5DenseActDense, T5DenseGatedActDense

    torch.manual_seed(22)
    config = T5Config(d_model=16, d_ff=24, feed_forward_proj=projection, dropout_rate=0.0)
    if projection == "relu":
        theirs = T5DenseActDense(config).eval()
        model, layer = _module("feed_forward(hidden=24, activation='relu', bias=False)", ("B", 5, 16))
        theirs.load_state_dict({"wi.weight": layer.fc1.weight, "wo.weight": layer.fc2.weight})
    else:
        theirs = T5DenseGatedActDense(config).eval()
        model, layer = _module("feed_forward(hidden=24, gated=True, activation='gelu_tanh', bias=False)", ("B", 5, 16))
        theirs.load_state_dict({"wi_0.weight": layer.gate_proj.weight, "wi_1.weight": layer.up_proj.weight,
                                "wo.weight": layer.down_proj.weight})
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(model(x), theirs(x))


def test_quick_gelu_matches_transformers_clip_mlp():
    from transformers import CLIPTextConfig
    from transformers.models.clip.modeling_clip import CLIPMLP

    torch.manual_seed(23)
    model, layer = _module("feed_forward(hidden=40, activation='quick_gelu')", ("B", 5, 16))
    theirs = CLIPMLP(CLIPTextConfig(hidden_size=16, intermediate_size=40, hidden_act="quick_gelu"))
    theirs.load_state_dict(layer.state_dict())  # fc1, fc2 one to one
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(model(x), theirs(x))


def test_version_three_defaults_compute_what_version_two_computed():
    from hndl_ops_transformer.feed_forward_v2 import FeedForwardV2

    torch.manual_seed(24)
    old, new = FeedForwardV2(expansion=2, activation="relu", D=6), FeedForward(expansion=2, activation="relu", D=6)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(new(x), old(x), rtol=0, atol=0)


@pytest.mark.parametrize("activation", ["silu", "quick_gelu"])
def test_gated_float64_gradcheck_and_gradgradcheck(activation):
    torch.manual_seed(25)
    _, layer = _module(f"feed_forward(hidden=5, gated=True, activation={activation!r})", ("B", 3, 3))
    layer = layer.double()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())

    def expand(x, *values):
        return functional_call(layer, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(expand, inputs)
    assert torch.autograd.gradgradcheck(expand, inputs)


def test_hidden_beside_a_non_default_expansion_is_an_argument_error_naming_hidden():
    error = _fails("feed_forward(2, hidden=64)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_ARGUMENT" and error.location.field == "hidden" and error.remedies
    with pytest.raises(HNDLError) as direct:
        FeedForward(expansion=3, hidden=5, D=4)
    assert direct.value.code == "E_ARGUMENT" and direct.value.location.field == "hidden"
