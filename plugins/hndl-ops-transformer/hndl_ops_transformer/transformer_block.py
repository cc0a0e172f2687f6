"""transformer_block@2: one transformer layer (attention, then feed-forward), pre- or post-norm."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .attention import Attention
from .feed_forward import ACTIVATION_HELP, ACTIVATIONS, FeedForward
from .heads import heads_divide_width

NORM_PLACEMENTS = ("pre", "post")


def _layer_norm(x, norm):
    """Written-out layer normalization over the last axis with population variance."""
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def _reference(module):
    attend = spec_of(Attention).reference(module.attention)
    expand = spec_of(FeedForward).reference(module.feed_forward)

    def forward(x):
        if module.norm == "post":
            x = _layer_norm(x + attend(x), module.norm1)
            return _layer_norm(x + expand(x), module.norm2)
        x = x + attend(_layer_norm(x, module.norm1))
        return x + expand(_layer_norm(x, module.norm2))

    return forward


def _check_norm(norm: str) -> str:
    if norm not in NORM_PLACEMENTS:
        raise HNDLError("E_ARGUMENT", f"norm must be 'pre' or 'post', not {norm!r}", field="norm",
                        remedies=("Give norm='pre' (GPT-2, ViT) or norm='post' (BERT, the original transformer).",))
    return norm


@operator(
    "transformer_block",
    version=2,
    summary="Transformer layer: attention then feed_forward, each in a residual with a layer_norm before "
            "(pre-norm) or after (post-norm) it.",
    shape="x[B, T, D] -> out[B, T, D]",
    relation=heads_divide_width,
    shape_text="x and out are [B, T, D]; D must be divisible by heads.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT,
                     help="Number of attention heads; the width D must be divisible by it."),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future in the attention: position t attends only to positions 0..t "
                           "(GPT-2 and other decoders)."),
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT, positional=False,
                         help="Feed-forward hidden width as a multiple of D (expansion * D units)."),
        "activation": Arg(str, "gelu", choices=tuple(ACTIVATIONS), positional=False,
                          help="Feed-forward activation. " + ACTIVATION_HELP),
        "norm": Arg(str, "pre", choices=NORM_PLACEMENTS, positional=False,
                    help="Where the layer normalizations sit: 'pre' normalizes each branch's input "
                         "(x + f(norm(x)), GPT-2 and ViT); 'post' normalizes after each residual sum "
                         "(norm(x + f(x)), BERT and the original transformer)."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance in both layer normalizations for stability (GPT-2 1e-5, "
                        "ViT 1e-6, BERT 1e-12)."),
        "bias": Arg(bool, True, positional=False,
                    help="Whether the attention and feed-forward linear layers learn additive biases; "
                         "attention_bias and mlp_bias override it for one of the two."),
        "attention_bias": Arg(bool, None, positional=False,
                              help="Whether the attention's query/key/value and output projections learn "
                                   "biases; omitted, bias decides."),
        "mlp_bias": Arg(bool, None, positional=False,
                        help="Whether the feed-forward network's two linear layers learn biases; omitted, "
                             "bias decides."),
    },
    category="block",
    examples=(
        Example("transformer_block(4)", ("B", 16, 64), ("B", 16, 64),
                note="Four heads and a 256-unit feed-forward layer; D is read from the input."),
        Example("linear(32)\ntransformer_block(2, causal=True)\ntransformer_block(2, causal=True)\nlinear()",
                ("B", 12, 8), ("B", 12, 5),
                note="A two-layer causal stack between an input projection and a head."),
        Example("transformer_block(2, causal=True, activation='gelu_tanh')", ("B", 8, 16), ("B", 8, 16),
                note="A GPT-2 layer (GPT2Block with activation_function='gelu_new')."),
        Example("transformer_block(2, eps=1e-6)", ("B", 5, 16), ("B", 5, 16),
                note="A ViT layer (timm's vision_transformer.Block with qkv_bias=True)."),
        Example("transformer_block(2, norm='post', eps=1e-12)", ("B", 6, 16), ("B", 6, 16),
                note="A BERT layer (BertLayer): layer_norm after each residual sum."),
        Example("transformer_block(2, activation='silu', mlp_bias=False)", ("B", 4, 8), ("B", 4, 8),
                note="Biased attention projections, a bias-free SiLU feed-forward network."),
    ),
    reference=_reference,
)
class TransformerBlock(nn.Module):
    """One transformer layer on a `[B, T, D]` sequence. Pre-normalization (`norm="pre"`,
    the default; GPT-2 and ViT):

        h   = x + attention(norm1(x))
        out = h + feed_forward(norm2(h))

    post-normalization (`norm="post"`; BERT and the original transformer):

        h   = norm1(x + attention(x))
        out = norm2(h + feed_forward(h))

    * `norm1` and `norm2` are `torch.nn.LayerNorm(D, eps)` with learned scale and bias
      (population variance over the last axis).
    * `attention` is the module of `attention@1` (`heads`, `causal`, and the attention bias):
      fused query/key/value projection `[3D, D]` in that order, `scaled_dot_product_attention`,
      output projection.
    * `feed_forward` is the module of `feed_forward@2` (`expansion`, `activation`, and the MLP
      bias): `Linear(D, expansion * D)`, the activation, `Linear(expansion * D, D)`.
    * **Biases.** `bias` sets both the attention and the feed-forward biases; `attention_bias`
      or `mlp_bias`, when given, decide for their part alone.
    * **Real models.** GPT-2 is `transformer_block(heads, causal=True, activation="gelu_tanh")`
      (its `Conv1D` weights are the transposes of ours and `c_attn` holds query, key and value
      side by side); a ViT layer is `transformer_block(heads, eps=1e-6)`; a BERT layer is
      `transformer_block(heads, norm="post", eps=1e-12)` (its separate query, key and value
      weights concatenate into `in_proj_weight`). Dropout, LayerScale and stochastic depth are
      not part of the block; in eval mode those models compute exactly this.
    * **Versions.** Version 2 added `activation`, `norm`, `attention_bias` and `mlp_bias`;
      with their defaults it computes exactly what `transformer_block@1` computed, with the
      same parameters. Plans saved with `transformer_block@1` still restore (through
      `transformer_block_v1`).

    The whole layer is one graph node with one module; its parts are submodules, not
    separate nodes. There is no dropout and no randomness in forward, and no final
    normalization: follow a stack of pre-norm blocks with a separate `layer_norm` where the
    architecture calls for one.
    """

    def __init__(
        self,
        *,
        heads: int,
        causal: bool = False,
        expansion: int = 4,
        activation: str = "gelu",
        norm: str = "pre",
        eps: float = 1e-5,
        bias: bool = True,
        attention_bias: Optional[bool] = None,
        mlp_bias: Optional[bool] = None,
        D: int,
    ) -> None:
        super().__init__()
        self.norm = _check_norm(norm)
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attention = Attention(heads=heads, causal=causal, bias=bias if attention_bias is None else attention_bias,
                                   D=D)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.feed_forward = FeedForward(expansion=expansion, activation=activation,
                                        bias=bias if mlp_bias is None else mlp_bias, D=D)

    def forward(self, x):
        if self.norm == "post":
            x = self.norm1(x + self.attention(x))
            return self.norm2(x + self.feed_forward(x))
        x = x + self.attention(self.norm1(x))
        return x + self.feed_forward(self.norm2(x))

    def extra_repr(self) -> str:
        return f"norm={self.norm!r}"
