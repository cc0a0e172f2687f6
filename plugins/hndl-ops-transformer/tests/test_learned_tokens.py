"""learned_tokens@1: declaration, T_out = T + count inferred in both directions and D through,
the [1, count, D] parameter and its timm-style initialization (and init= overrides), numerics
against the reference and against timm's VisionTransformer._pos_embed (class and register tokens),
the batch expanded without copying, batch 1, float64 gradcheck and gradgradcheck, and every error
code it raises."""

import pytest
import torch
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.learned_tokens import LearnedTokens


def _module(source, input_shape, output_shape):
    model = network(source, input_shape=input_shape, output_shape=output_shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


# -- declaration ------------------------------------------------------------------------------------
def test_declaration():
    spec = spec_of(LearnedTokens)
    assert spec.alias == "learned_tokens" and spec.qualified == "learned_tokens@1"
    assert spec.category == "embedding"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("count",)
    assert spec.args["count"].default == 1 and spec.args["count"].min == 1
    assert spec.args["placement"].default == "prepend" and spec.args["placement"].choices == ("prepend", "append")
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "x[B, T, D] -> out[B, T_out, D]"


def test_the_parameter_is_one_row_of_count_tokens():
    _, layer = _module("learned_tokens(3)", ("B", 5, 8), ("B", 8, 8))
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == [("tokens", (1, 3, 8))]
    assert layer.tokens.requires_grad and list(layer.state_dict()) == ["tokens"]


def test_initialized_like_timms_class_token():
    torch.manual_seed(0)
    _, layer = _module("learned_tokens(64)", ("B", 4, 64), ("B", 68, 64))
    assert 0.8e-6 < layer.tokens.std().item() < 1.2e-6  # nn.init.normal_(cls_token, std=1e-6)
    assert abs(layer.tokens.mean().item()) < 1e-7


def test_the_initialization_is_overridden_through_init():
    torch.manual_seed(1)
    source = "learned_tokens(64, init={'tokens': truncated_normal(std=0.02)})"
    plan = hndl.resolve(source, input_shape=("B", 4, 64), output_shape=("B", 68, 64))
    assert plan.nodes[0].initialization["overrides"]["tokens"]["kind"] == "truncated_normal"
    _, layer = _module(source, ("B", 4, 64), ("B", 68, 64))
    assert 0.015 < layer.tokens.std().item() < 0.025
    _, constant = _module("learned_tokens(2, init={'tokens': 0.5})", ("B", 4, 3), ("B", 6, 3))
    assert torch.equal(constant.tokens, torch.full((1, 2, 3), 0.5))


# -- inference ----------------------------------------------------------------------------------------
def test_arguments_and_defaults_are_recorded():
    node = hndl.resolve("learned_tokens()", input_shape=("B", 7, 12), output_shape=("B", 8, 12)).nodes[0]
    assert node.args == {"count": 1, "placement": "prepend"}
    assert node.provenance == {"count": "default", "placement": "default"}
    assert node.input_shapes["x"] == ("B", 7, 12) and node.output_shapes["out"] == ("B", 8, 12)


def test_output_length_is_inferred_forward_from_the_input():
    plan = hndl.resolve("learned_tokens(3)\nflatten()", input_shape=("B", 5, 4), output_shape=("B", 32))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 4)


def test_input_length_is_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("reshape()\nlearned_tokens(2, placement='append')", input_shape=("B", 48),
                        output_shape=("B", 8, 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 6, 8)  # T = 8 - 2, then 48 / 6 = 8 = D
    assert plan.nodes[1].input_shapes["x"] == ("B", 6, 8)


def test_width_passes_through_in_both_directions():
    backward = hndl.resolve("linear()\nlearned_tokens()", input_shape=("B", 5, 3), output_shape=("B", 6, 8))
    assert backward.nodes[0].args["out_features"] == 8
    forward = hndl.resolve("learned_tokens()\nlinear(4)", input_shape=("B", 5, 3), output_shape=("B", 6, 4))
    assert forward.nodes[1].args["in_features"] == 3


def test_unfixed_length_and_width_are_ambiguous_not_guessed():
    assert _fails("reshape()\nlearned_tokens()\nflatten()", ("B", 48), ("B", 56)).code == "E_AMBIGUOUS"


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("placement", ["prepend", "append"])
def test_forward_and_backward_match_the_reference(placement):
    torch.manual_seed(2)
    model, layer = _module(f"learned_tokens(3, placement={placement!r})", ("B", 4, 5), ("B", 7, 5))
    with torch.no_grad():
        layer.tokens.normal_()
    reference = spec_of(LearnedTokens).reference(layer)
    x = torch.randn(2, 4, 5, requires_grad=True)
    upstream = torch.randn(2, 7, 5)
    ours = model(x)
    torch.testing.assert_close(ours, reference(x), rtol=0, atol=0)
    tokens, sequence = (slice(0, 3), slice(3, 7)) if placement == "prepend" else (slice(4, 7), slice(0, 4))
    assert torch.equal(ours[:, sequence], x) and torch.equal(ours[:, tokens], layer.tokens.expand(2, 3, 5))
    grad_x, grad_tokens = torch.autograd.grad(ours, [x, layer.tokens], upstream)
    assert torch.equal(grad_x, upstream[:, sequence])
    torch.testing.assert_close(grad_tokens, upstream[:, tokens].sum(0, keepdim=True))


def test_matches_timm_class_and_register_tokens():
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(3)
    vit = VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, reg_tokens=2,
                            num_classes=0).eval()
    assert tuple(vit.cls_token.shape) == (1, 1, 16) and tuple(vit.pos_embed.shape) == (1, 7, 16)
    model = network("learned_tokens(3)\npositional_embedding()", input_shape=("B", 4, 16),
                    output_shape=("B", 7, 16), device="cpu").eval()
    with torch.no_grad():
        vit.cls_token.normal_()
        vit.reg_token.normal_()
        model.nodes.n_n0.tokens.copy_(torch.cat((vit.cls_token, vit.reg_token), dim=1))
        model.nodes.n_n1.weight.copy_(vit.pos_embed[0])
    patches = torch.randn(3, 4, 16)
    torch.testing.assert_close(model(patches), vit._pos_embed(patches))


def test_the_batch_is_expanded_not_copied():
    _, layer = _module("learned_tokens(2)", ("B", 3, 4), ("B", 5, 4))

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    x = torch.randn(6, 3, 4)
    with Calls() as calls:
        out = layer(x)
    assert calls.ops == ["aten.expand", "aten.cat"]  # a view of the parameter, then the one output copy
    expanded = layer.tokens.expand(6, -1, -1)
    assert expanded.data_ptr() == layer.tokens.data_ptr() and expanded.stride(0) == 0
    assert tuple(out.shape) == (6, 5, 4)


def test_batch_of_one():
    model, layer = _module("learned_tokens(2)", ("B", 3, 4), ("B", 5, 4))
    x = torch.randn(1, 3, 4)
    out = model(x)
    assert tuple(out.shape) == (1, 5, 4)
    torch.testing.assert_close(out, spec_of(LearnedTokens).reference(layer)(x))


def test_the_input_is_not_modified():
    model, _ = _module("learned_tokens()", ("B", 3, 2), ("B", 4, 2))
    x = torch.randn(2, 3, 2)
    copy = x.clone()
    model(x)
    assert torch.equal(x, copy)


@pytest.mark.parametrize("placement", ["prepend", "append"])
def test_float64_gradcheck_and_gradgradcheck(placement):
    torch.manual_seed(4)
    _, layer = _module(f"learned_tokens(2, placement={placement!r})", ("B", 3, 2), ("B", 5, 2))
    layer = layer.double()
    tokens = torch.randn(1, 2, 2, dtype=torch.float64, requires_grad=True)

    def run(x, values):
        return functional_call(layer, {"tokens": values}, (x,))

    inputs = (torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True), tokens)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs)


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["learned_tokens(0)", "learned_tokens(-1)", "learned_tokens(1.5)",
                                    "learned_tokens(True)", "learned_tokens(placement='middle')",
                                    "learned_tokens(placement=1)", "learned_tokens(1, 'append')",
                                    "learned_tokens(tokens=2)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 5, 8)).code == "E_ARGUMENT"


def test_direct_construction_checks_the_placement():
    with pytest.raises(HNDLError) as error:
        LearnedTokens(placement="middle", D=4)
    assert error.value.code == "E_ARGUMENT"


def test_output_length_contradicting_the_count_is_a_constraint_error():
    error = _fails("learned_tokens(2)", ("B", 4, 8), ("B", 5, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    assert "count=2" in error.message and "6" in error.message and "5" in error.message


def test_an_output_with_no_room_for_the_sequence_is_a_constraint_error():
    error = _fails("reshape()\nlearned_tokens(4)", ("B", 32), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


def test_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("learned_tokens()", ("B", 4, 8), ("B", 5, 6)).code == "E_CONSTRAINT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("learned_tokens()", ("B", 8), ("B", 9)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("learned_tokens()", ("B", 4, 8), ("B", 5, 8), input_dtype="int64").code == "E_DTYPE"


def test_a_different_sequence_length_at_runtime_is_a_runtime_error():
    model, _ = _module("learned_tokens()", ("B", 4, 8), ("B", 5, 8))
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 3, 8))
    assert error.value.code == "E_RUNTIME"
