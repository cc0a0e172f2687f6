"""transformer_block@3: declaration, one node with one module, inference, numerics against the
written-out reference and against a handwritten block built from torch.nn.LayerNorm,
torch.nn.MultiheadAttention and an MLP (forward, input and parameter gradients) for pre- and
post-norm and every activation, separate attention/MLP biases, the real layers with copied weights
(transformers' GPT2Block, timm's ViT Block, transformers' BertLayer), causal masking, float64
gradcheck and gradgradcheck, and every error code it raises; then version 3's options: RMSNorm,
grouped rotary attention and the gated MLP against transformers' LlamaDecoderLayer (internal table
and the rope port), T5's encoder block with its position bias on the attn_bias port, CLIP's
quick_gelu layer, and their error codes."""

from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.func import functional_call

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import network
from hndl_ops_transformer.attention import Attention
from hndl_ops_transformer.feed_forward import FeedForward
from hndl_ops_transformer.transformer_block import TransformerBlock


TORCH_ACTIVATIONS = {"gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "relu": nn.ReLU,
                     "silu": nn.SiLU}


class HandwrittenBlock(nn.Module):
    """The same layer from stock torch.nn modules; its state_dict keys match ours."""

    def __init__(self, width, heads, *, causal=False, expansion=4, eps=1e-5, bias=True, attention_bias=None,
                 mlp_bias=None, activation="gelu", norm="pre"):
        super().__init__()
        self.causal, self.post = causal, norm == "post"
        attention_bias = bias if attention_bias is None else attention_bias
        mlp_bias = bias if mlp_bias is None else mlp_bias
        self.norm1 = nn.LayerNorm(width, eps=eps)
        self.attention = nn.MultiheadAttention(width, heads, bias=attention_bias, batch_first=True)
        self.norm2 = nn.LayerNorm(width, eps=eps)
        self.feed_forward = nn.Sequential(OrderedDict(
            fc1=nn.Linear(width, expansion * width, bias=mlp_bias), act=TORCH_ACTIVATIONS[activation](),
            fc2=nn.Linear(expansion * width, width, bias=mlp_bias)))

    def attend(self, h):
        length = h.shape[1]
        mask = torch.ones(length, length, dtype=torch.bool).triu(1) if self.causal else None
        return self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]

    def forward(self, x):
        if self.post:
            x = self.norm1(x + self.attend(x))
            return self.norm2(x + self.feed_forward(x))
        x = x + self.attend(self.norm1(x))
        return x + self.feed_forward(self.norm2(x))


def _module(source, shape):
    model = network(source, input_shape=shape, output_shape=shape, device="cpu")
    return model, model.nodes.n_n0


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _perturb(module, scale=0.1):
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn_like(parameter))


# -- declaration and structure ---------------------------------------------------------------------------
def test_declaration():
    spec = spec_of(TransformerBlock)
    assert spec.alias == "transformer_block" and spec.qualified == "transformer_block@3"
    assert spec.category == "block"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("heads",)
    assert spec.args["heads"].required
    assert {name: arg.default for name, arg in spec.args.items() if name != "heads"} == {
        "kv_heads": None, "head_dim": None, "causal": False, "scale": None, "rope_theta": None, "rope_dims": None,
        "qkv": "fused", "expansion": 4, "hidden": None, "gated": False, "activation": "gelu", "norm": "pre",
        "normalization": "layer_norm", "eps": 1e-5, "bias": True, "attention_bias": None, "mlp_bias": None,
        "query_bias": None, "key_bias": None, "value_bias": None, "out_bias": None}
    assert spec.args["activation"].choices == ("gelu", "gelu_tanh", "relu", "silu", "quick_gelu")
    assert spec.args["norm"].choices == ("pre", "post")
    assert spec.args["normalization"].choices == ("layer_norm", "rms_norm")
    assert str(spec.shape) == "x[B, T, D], attn_bias?[B, H, T, T], rope?[B, 2, T, R] -> out[B, T, D]"
    assert all(arg.help for arg in spec.args.values())


def test_one_node_with_one_module_holding_plain_submodules():
    plan = hndl.resolve("transformer_block(2, causal=True, expansion=3, eps=1e-6)",
                        input_shape=("B", 4, 8), output_shape=("B", 4, 8))
    assert [node.alias for node in plan.nodes] == ["transformer_block"]
    assert {name: value for name, value in plan.nodes[0].args.items() if value is not None} == {
        "heads": 2, "causal": True, "qkv": "fused", "expansion": 3, "gated": False, "activation": "gelu",
        "norm": "pre", "normalization": "layer_norm", "eps": 1e-6, "bias": True}
    model, block = _module("transformer_block(2, causal=True, expansion=3, eps=1e-6)", ("B", 4, 8))
    assert list(dict(model.nodes.named_children())) == ["n_n0"]
    assert isinstance(block.norm1, nn.LayerNorm) and block.norm1.eps == 1e-6
    assert isinstance(block.attention, Attention) and block.attention.causal and block.attention.heads == 2
    assert isinstance(block.feed_forward, FeedForward)
    assert tuple(block.feed_forward.fc1.weight.shape) == (24, 8)
    assert set(block.state_dict()) == set(HandwrittenBlock(8, 2).state_dict())


def test_width_is_inferred_backward_through_the_block():
    plan = hndl.resolve("linear()\ntransformer_block(2)", input_shape=("B", 5, 3), output_shape=("B", 5, 8))
    assert plan.nodes[0].args["out_features"] == 8


# -- numerics ------------------------------------------------------------------------------------------------
def _matches_reference_and_handwritten(source, width, heads, **handwritten_options):
    """Forward, input and parameter gradients of the node against the reference and HandwrittenBlock."""
    model, block = _module(source, ("B", 6, width))
    _perturb(block)
    handwritten = HandwrittenBlock(width, heads, **handwritten_options)
    handwritten.load_state_dict(block.state_dict())
    reference = spec_of(TransformerBlock).reference(block)
    x = torch.randn(3, 6, width, requires_grad=True)
    upstream = torch.randn(3, 6, width)
    ours = model(x)
    torch.testing.assert_close(ours, reference(x))
    torch.testing.assert_close(ours, handwritten(x))
    our_grads = torch.autograd.grad(ours, [x, *block.parameters()], upstream)
    reference_grads = torch.autograd.grad(reference(x), [x, *block.parameters()], upstream)
    hand_grads = torch.autograd.grad(handwritten(x), [x, *handwritten.parameters()], upstream)
    assert len(our_grads) == len(hand_grads)
    for a, b, c in zip(our_grads, reference_grads, hand_grads):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)
    return block


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_and_backward_match_the_reference_and_a_handwritten_block(causal, bias):
    torch.manual_seed(0)
    _matches_reference_and_handwritten(f"transformer_block(4, causal={causal}, expansion=2, eps=1e-6, bias={bias})",
                                       16, 4, causal=causal, expansion=2, eps=1e-6, bias=bias)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("activation", sorted(TORCH_ACTIVATIONS))
def test_every_norm_placement_and_activation_match_a_handwritten_block(norm, activation):
    torch.manual_seed(1)
    block = _matches_reference_and_handwritten(
        f"transformer_block(2, causal=True, expansion=2, activation={activation!r}, norm={norm!r})",
        8, 2, causal=True, expansion=2, activation=activation, norm=norm)
    assert block.norm == norm and block.feed_forward.activation == activation


@pytest.mark.parametrize("bias, attention_bias, mlp_bias, attention_has, mlp_has", [
    (True, None, False, True, False), (True, False, None, False, True),
    (False, True, None, True, False), (False, None, True, False, True), (True, False, False, False, False)])
def test_attention_and_mlp_biases_are_chosen_separately(bias, attention_bias, mlp_bias, attention_has, mlp_has):
    torch.manual_seed(2)
    source = f"transformer_block(2, bias={bias}, attention_bias={attention_bias}, mlp_bias={mlp_bias})"
    block = _matches_reference_and_handwritten(source, 8, 2, bias=bias, attention_bias=attention_bias,
                                               mlp_bias=mlp_bias)
    assert (block.attention.in_proj_bias is not None) == attention_has
    assert (block.attention.out_proj.bias is not None) == attention_has
    assert (block.feed_forward.fc1.bias is not None) == mlp_has and (block.feed_forward.fc2.bias is not None) == mlp_has


def test_post_norm_ends_with_a_layer_norm():
    torch.manual_seed(3)
    model, block = _module("transformer_block(2, norm='post')", ("B", 5, 8))
    out = model(3 * torch.randn(2, 5, 8) + 1)
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), rtol=0, atol=1e-5)  # norm2 at its init
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, 5), rtol=0, atol=1e-3)
    pre, _ = _module("transformer_block(2)", ("B", 5, 8))
    assert not torch.allclose(pre(out).mean(-1), torch.zeros(2, 5), atol=1e-3)


# -- the real layers, weights copied in ------------------------------------------------------------------------
def _perturbed(module, scale=0.2):
    with torch.no_grad():  # LayerNorms start at ones / zeros and biases at zero: move them off
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return module


def _tensor(output):
    return output[0] if isinstance(output, tuple) else output


def _same_output_and_input_gradient(model, theirs, x):
    x = x.clone().requires_grad_()
    ours, expected = model(x), _tensor(theirs(x))
    torch.testing.assert_close(ours, expected)
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(torch.autograd.grad(ours, x, upstream)[0],
                               torch.autograd.grad(expected, x, upstream)[0])


def test_matches_transformers_gpt2_block():
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    torch.manual_seed(4)
    width, length = 16, 7
    config = GPT2Config(n_embd=width, n_head=4, n_layer=1, n_positions=length, activation_function="gelu_new",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5)
    config._attn_implementation = "eager"
    gpt2 = _perturbed(GPT2Block(config, layer_idx=0)).eval()
    model, block = _module("transformer_block(4, causal=True, activation='gelu_tanh')", ("B", length, width))
    with torch.no_grad():
        for ours, theirs in ((block.norm1, gpt2.ln_1), (block.norm2, gpt2.ln_2)):
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
        # Conv1D keeps [in, out] weights (ours are their transposes); c_attn holds q | k | v side by side.
        for part in range(3):
            rows = slice(part * width, (part + 1) * width)
            block.attention.in_proj_weight[rows].copy_(gpt2.attn.c_attn.weight[:, rows].t())
            block.attention.in_proj_bias[rows].copy_(gpt2.attn.c_attn.bias[rows])
        for ours, theirs in ((block.attention.out_proj, gpt2.attn.c_proj), (block.feed_forward.fc1, gpt2.mlp.c_fc),
                             (block.feed_forward.fc2, gpt2.mlp.c_proj)):
            ours.weight.copy_(theirs.weight.t())
            ours.bias.copy_(theirs.bias)
    # GPT2Model builds the causal mask above its blocks; a lone block gets it as an additive mask.
    mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
    _same_output_and_input_gradient(model, lambda x: gpt2(x, attention_mask=mask), torch.randn(2, length, width))


def test_matches_timm_vision_transformer_block():
    from functools import partial

    from timm.models.vision_transformer import Block

    torch.manual_seed(5)
    vit = _perturbed(Block(16, 4, qkv_bias=True, norm_layer=partial(nn.LayerNorm, eps=1e-6))).eval()
    model, block = _module("transformer_block(4, eps=1e-6)", ("B", 5, 16))
    renamed = {"attn.qkv.weight": "attention.in_proj_weight", "attn.qkv.bias": "attention.in_proj_bias",
               "attn.proj.": "attention.out_proj.", "mlp.": "feed_forward."}

    def ours(key):
        for theirs, name in renamed.items():
            key = key.replace(theirs, name)
        return key

    block.load_state_dict({ours(key): value for key, value in vit.state_dict().items()})  # same layout, no transposes
    _same_output_and_input_gradient(model, vit, torch.randn(3, 5, 16))


def test_matches_transformers_bert_layer_post_norm():
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(6)
    config = BertConfig(hidden_size=16, num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                        layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    bert = _perturbed(BertLayer(config)).eval()
    model, block = _module("transformer_block(4, norm='post', eps=1e-12)", ("B", 6, 16))
    attention = bert.attention
    with torch.no_grad():
        # BERT keeps query, key and value as three Linear layers: stacked, they are in_proj.
        block.attention.in_proj_weight.copy_(torch.cat([attention.self.query.weight, attention.self.key.weight,
                                                        attention.self.value.weight]))
        block.attention.in_proj_bias.copy_(torch.cat([attention.self.query.bias, attention.self.key.bias,
                                                      attention.self.value.bias]))
        for ours, theirs in ((block.attention.out_proj, attention.output.dense), (block.norm1, attention.output.LayerNorm),
                             (block.feed_forward.fc1, bert.intermediate.dense), (block.feed_forward.fc2, bert.output.dense),
                             (block.norm2, bert.output.LayerNorm)):
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
    _same_output_and_input_gradient(model, bert, torch.randn(2, 6, 16))


def test_both_residual_paths_are_present():
    model, block = _module("transformer_block(2)", ("B", 3, 4))
    x = torch.randn(2, 3, 4)
    with torch.no_grad():
        for parameter in block.attention.parameters():
            parameter.zero_()
        for parameter in block.feed_forward.parameters():
            parameter.zero_()
    torch.testing.assert_close(model(x), x, rtol=0, atol=0)  # identity when both branches are zero


def test_causal_block_never_lets_a_later_token_change_an_earlier_output():
    torch.manual_seed(1)
    model, block = _module("transformer_block(2, causal=True)", ("B", 6, 8))
    _perturb(block)
    x = torch.randn(2, 6, 8)
    for position in range(1, 6):
        changed = x.clone()
        changed[:, position] += 3 * torch.randn(2, 8)
        before, after = model(x), model(changed)
        torch.testing.assert_close(after[:, :position], before[:, :position], rtol=0, atol=1e-6)
        assert not torch.allclose(after[:, position], before[:, position])
    uncausal, other = _module("transformer_block(2)", ("B", 6, 8))
    other.load_state_dict(block.state_dict())
    changed = x.clone()
    changed[:, -1] += 3 * torch.randn(2, 8)  # not a constant shift, which layer_norm would remove
    assert not torch.allclose(uncausal(changed)[:, 0], uncausal(x)[:, 0])


def test_forward_is_deterministic_and_draws_no_randomness():
    model, _ = _module("transformer_block(2, causal=True)", ("B", 5, 8))
    x = torch.randn(2, 5, 8)
    state = torch.get_rng_state()
    model.train()
    first, second = model(x), model(x)
    model.eval()
    assert torch.equal(first, second) and torch.equal(first, model(x))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("causal, norm, activation", [(False, "pre", "gelu"), (True, "pre", "gelu_tanh"),
                                                      (True, "post", "silu")])
def test_float64_gradcheck_and_gradgradcheck(causal, norm, activation):
    torch.manual_seed(2)
    source = f"transformer_block(2, causal={causal}, expansion=1, norm={norm!r}, activation={activation!r})"
    _, block = _module(source, ("B", 3, 4))
    block = block.double()
    _perturb(block)
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in block.parameters())

    def run(x, *values):
        return functional_call(block, dict(zip(names, values)), (x,))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs, fast_mode=True)  # every second derivative, projected
    assert torch.autograd.gradgradcheck(block, (inputs[0],))  # element by element for the input


# -- errors -----------------------------------------------------------------------------------------------------
def test_heads_that_do_not_divide_the_width_is_a_constraint_error():
    error = _fails("transformer_block(3)", ("B", 4, 16), ("B", 4, 16))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"
    error = _fails("linear()\ntransformer_block(5)", ("B", 4, 3), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n1"


def test_direct_construction_checks_divisibility():
    with pytest.raises(HNDLError) as error:
        TransformerBlock(heads=3, D=8)
    assert error.value.code == "E_CONSTRAINT"


@pytest.mark.parametrize("options, field", [({"norm": "middle"}, "norm"), ({"activation": "tanh"}, "activation")])
def test_direct_construction_checks_the_choices(options, field):
    with pytest.raises(HNDLError) as error:
        TransformerBlock(heads=2, D=8, **options)
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == field


@pytest.mark.parametrize("source", ["transformer_block()", "transformer_block(0)", "transformer_block(2.0)",
                                    "transformer_block(2, eps=0)", "transformer_block(2, eps=-1e-5)",
                                    "transformer_block(2, expansion=0)", "transformer_block(2, causal='yes')",
                                    "transformer_block(2, 4)", "transformer_block(2, norm='middle')",
                                    "transformer_block(2, norm=True)", "transformer_block(2, activation='swish')",
                                    "transformer_block(2, attention_bias=1)", "transformer_block(2, mlp_bias='no')",
                                    "transformer_block(2, qkv_bias=False)"])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_rank_two_input_is_a_constraint_error():
    assert _fails("transformer_block(2)", ("B", 8), ("B", 8)).code == "E_CONSTRAINT"


def test_output_width_contradicting_the_input_is_a_constraint_error():
    assert _fails("transformer_block(2)", ("B", 4, 8), ("B", 5, 8)).code == "E_CONSTRAINT"


def test_integer_input_is_a_dtype_error():
    assert _fails("transformer_block(2)", ("B", 4, 8), ("B", 4, 8), input_dtype="int64").code == "E_DTYPE"


# == version 3: RMSNorm, grouped rotary attention, gated MLP, the bias and rope ports ============================
from transformers import LlamaConfig, T5Config  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Block  # noqa: E402

LLAMA = ("transformer_block({extra}4, kv_heads=2, causal=True, qkv='separate', bias=False, normalization='rms_norm', "
         "eps=1e-6, hidden=43, gated=True, activation='silu'{rope})")
LLAMA_NAMES = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "attention.": "self_attn.",
               "out_proj": "o_proj", "feed_forward.": "mlp."}


def _llama_names(name):
    for ours, theirs in LLAMA_NAMES.items():
        name = name.replace(ours, theirs)
    return name


def _llama_layer(block):
    config = LlamaConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, intermediate_size=43,
                         rms_norm_eps=1e-6, rope_theta=10000.0, vocab_size=8, num_hidden_layers=1)
    config._attn_implementation = "eager"
    theirs = LlamaDecoderLayer(config, layer_idx=0)
    theirs.load_state_dict({_llama_names(name): value for name, value in block.state_dict().items()})
    return theirs, LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("port", [False, True])
def test_matches_transformers_llama_decoder_layer(port):
    torch.manual_seed(30)
    if port:
        model = network("r = rotary_embedding(x)\n" + LLAMA.format(extra="x, ", rope=", rope=r"),
                        input_shape=("B", 7, 16), output_shape=("B", 7, 16), device="cpu")
        block = model.nodes.n_n1
    else:
        model, block = _module(LLAMA.format(extra="", rope=", rope_theta=10000.0"), ("B", 7, 16))
    assert isinstance(block.norm1, nn.RMSNorm) and block.norm1.eps == 1e-6 and block.feed_forward.gated
    _perturbed(block)
    theirs, rotary = _llama_layer(block)
    assert len(theirs.state_dict()) == len(block.state_dict())
    x = torch.randn(2, 7, 16, requires_grad=True)
    positions = torch.arange(7)[None].expand(2, 7)
    mask = torch.full((7, 7), float("-inf")).triu(1)[None, None].expand(2, 1, 7, 7)
    ours = model(x)
    expected = _tensor(theirs(x, attention_mask=mask, position_embeddings=rotary(x, positions)))
    torch.testing.assert_close(ours, expected)
    upstream = torch.randn_like(ours)
    names = [name for name, _ in block.named_parameters()]
    their_parameters = dict(theirs.named_parameters())
    our_grads = torch.autograd.grad(ours, [x, *block.parameters()], upstream)
    their_grads = torch.autograd.grad(expected, [x, *(their_parameters[_llama_names(name)] for name in names)],
                                      upstream)
    for a, b in zip(our_grads, their_grads):
        torch.testing.assert_close(a, b)
    rope = torch.stack(rotary(x, positions), dim=1) if port else None
    torch.testing.assert_close(spec_of(TransformerBlock).reference(block)(x, None, rope), expected)


@pytest.mark.parametrize("projection", ["relu", "gated-gelu"])
def test_matches_transformers_t5_encoder_block_with_the_position_bias_on_the_port(projection):
    torch.manual_seed(31)
    gated = projection == "gated-gelu"
    activation = "gelu_tanh" if gated else "relu"
    model = network(f"b = relative_position_bias(x, 4)\ntransformer_block(x, 4, head_dim=8, scale=1.0, qkv='separate', "
                    f"bias=False, normalization='rms_norm', eps=1e-6, hidden=24, gated={gated}, "
                    f"activation={activation!r}, attn_bias=b)", input_shape=("B", 6, 20), output_shape=("B", 6, 20),
                    device="cpu")
    block = model.nodes.n_n1
    _perturbed(block)
    config = T5Config(d_model=20, d_kv=8, num_heads=4, d_ff=24, feed_forward_proj=projection, dropout_rate=0.0,
                      layer_norm_epsilon=1e-6, vocab_size=8, num_layers=1)
    config._attn_implementation = "eager"
    theirs = T5Block(config, has_relative_attention_bias=False, layer_idx=0).eval()
    names = {"norm1.weight": "layer.0.layer_norm.weight", "attention.q_proj.weight": "layer.0.SelfAttention.q.weight",
             "attention.k_proj.weight": "layer.0.SelfAttention.k.weight",
             "attention.v_proj.weight": "layer.0.SelfAttention.v.weight",
             "attention.out_proj.weight": "layer.0.SelfAttention.o.weight", "norm2.weight": "layer.1.layer_norm.weight"}
    names.update({"feed_forward.gate_proj.weight": "layer.1.DenseReluDense.wi_0.weight",
                  "feed_forward.up_proj.weight": "layer.1.DenseReluDense.wi_1.weight",
                  "feed_forward.down_proj.weight": "layer.1.DenseReluDense.wo.weight"} if gated else
                 {"feed_forward.fc1.weight": "layer.1.DenseReluDense.wi.weight",
                  "feed_forward.fc2.weight": "layer.1.DenseReluDense.wo.weight"})
    assert set(block.state_dict()) == set(names) and set(theirs.state_dict()) == set(names.values())
    theirs.load_state_dict({names[name]: value for name, value in block.state_dict().items()})
    x = torch.randn(2, 6, 20, requires_grad=True)
    bias = torch.randn(2, 4, 6, 6, requires_grad=True)
    ours = block(x, bias)
    expected = theirs(x, position_bias=bias)[0]
    torch.testing.assert_close(ours, expected)
    upstream = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, [x, bias], upstream), torch.autograd.grad(expected, [x, bias], upstream)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(spec_of(TransformerBlock).reference(block)(x, bias), expected)


def test_matches_transformers_clip_encoder_layer_with_quick_gelu():
    from transformers import CLIPTextConfig
    from transformers.models.clip.modeling_clip import CLIPEncoderLayer

    torch.manual_seed(32)
    model, block = _module("transformer_block(4, activation='quick_gelu', qkv='separate')", ("B", 6, 16))
    _perturbed(block)
    config = CLIPTextConfig(hidden_size=16, num_attention_heads=4, intermediate_size=64, hidden_act="quick_gelu",
                            layer_norm_eps=1e-5)
    config._attn_implementation = "eager"
    theirs = CLIPEncoderLayer(config).eval()
    renames = {"norm1": "layer_norm1", "norm2": "layer_norm2", "attention.": "self_attn.", "out_proj": "out_proj",
               "feed_forward.": "mlp."}

    def rename(name):
        for ours, their in renames.items():
            name = name.replace(ours, their)
        return name

    theirs.load_state_dict({rename(name): value for name, value in block.state_dict().items()})
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(model(x), _tensor(theirs(x, None)))


def test_matches_transformers_whisper_encoder_layer_without_a_key_bias():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoderLayer

    torch.manual_seed(35)
    model, block = _module("transformer_block(4, key_bias=False, qkv='separate')", ("B", 6, 16))
    assert block.attention.k_proj.bias is None and block.attention.q_proj.bias is not None
    _perturbed(block)
    config = WhisperConfig(d_model=16, encoder_attention_heads=4, encoder_ffn_dim=64, activation_function="gelu",
                           dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    config._attn_implementation = "eager"
    theirs = WhisperEncoderLayer(config).eval()
    renames = {"norm1": "self_attn_layer_norm", "norm2": "final_layer_norm", "attention.": "self_attn.",
               "feed_forward.": ""}

    def rename(name):
        for ours, their in renames.items():
            name = name.replace(ours, their)
        return name

    assert {rename(name) for name in block.state_dict()} == set(theirs.state_dict())
    theirs.load_state_dict({rename(name): value for name, value in block.state_dict().items()})
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(model(x), _tensor(theirs(x, None)))


def test_rms_norm_blocks_hold_weight_only_norms():
    _, block = _module("transformer_block(2, normalization='rms_norm', norm='post', eps=1e-6)", ("B", 5, 8))
    assert isinstance(block.norm1, nn.RMSNorm) and isinstance(block.norm2, nn.RMSNorm)
    assert [name for name in block.state_dict() if name.startswith("norm")] == ["norm1.weight", "norm2.weight"]
    _perturbed(block)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(block(x), spec_of(TransformerBlock).reference(block)(x))


def test_version_three_defaults_compute_what_version_two_computed():
    from hndl_ops_transformer.transformer_block_v2 import TransformerBlockV2

    torch.manual_seed(33)
    old = TransformerBlockV2(heads=2, causal=True, activation="relu", norm="post", D=8)
    new = TransformerBlock(heads=2, causal=True, activation="relu", norm="post", D=8)
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(new(x), old(x), rtol=0, atol=0)


def test_float64_gradcheck_and_gradgradcheck_of_a_rotary_grouped_gated_rms_block_with_a_bias():
    torch.manual_seed(34)
    block = TransformerBlock(heads=2, kv_heads=1, causal=True, rope_theta=100.0, qkv="separate", hidden=5, gated=True,
                             activation="silu", normalization="rms_norm", bias=False, D=4).double()
    _perturbed(block)
    names = [name for name, _ in block.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in block.parameters())

    def run(x, bias, *values):
        return functional_call(block, dict(zip(names, values)), (x, bias))

    inputs = (torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True),
              torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True), *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs, fast_mode=True)


@pytest.mark.parametrize("source, field", [
    ("transformer_block(4, kv_heads=3)", "kv_heads"), ("transformer_block(4, key_bias=False)", "qkv"),
    ("transformer_block(4, attention_bias=False, query_bias=True)", "qkv"),
    ("transformer_block(4, expansion=2, hidden=8)", "hidden"),
    ("transformer_block(4, rope_theta=1e4, rope_dims=3)", "rope_dims"),
])
def test_inconsistent_version_three_arguments_are_argument_errors_naming_the_field(source, field):
    error = _fails(source, ("B", 4, 16), ("B", 4, 16))
    assert error.code == "E_ARGUMENT" and error.location.field == field


@pytest.mark.parametrize("source", ["transformer_block(2, normalization='batch_norm')", "transformer_block(2, scale=0)",
                                    "transformer_block(2, qkv='split')", "transformer_block(2, hidden=0)",
                                    "transformer_block(2, activation='swiglu')", "transformer_block(2, rope_dims=4)"])
def test_invalid_version_three_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 4, 8), ("B", 4, 8)).code == "E_ARGUMENT"


def test_port_errors():
    error = _fails("r = rotary_embedding(x)\ntransformer_block(x, 2, rope_theta=1e4, rope=r)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_ARGUMENT"
    error = _fails("b = relative_position_bias(x, 4)\ntransformer_block(x, 2, attn_bias=b)", ("B", 4, 8), ("B", 4, 8))
    assert error.code == "E_CONSTRAINT"


def test_direct_construction_checks_normalization():
    with pytest.raises(HNDLError) as error:
        TransformerBlock(heads=2, normalization="batch_norm", D=8)
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == "normalization"
