"""transformer_block@2 (alias transformer_block_v2): the transformer layer as version 2 declared it.

Kept so that plans saved before ``transformer_block`` gained the attention's grouped heads, rotary
positions, score-bias port, scale and per-projection biases, ``normalization`` and the gated
feed-forward network (version 3) still restore, rebuild and load their state dicts. New
specifications use ``transformer_block``.
"""

from __future__ import annotations

from typing import Optional

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .feed_forward import ACTIVATION_HELP_V2, ACTIVATIONS_V2
from .heads import heads_divide_width
from .transformer_block import NORM_PLACEMENTS, TransformerBlock


@operator(
    "transformer_block_v2",
    identity="transformer_block",
    version=2,
    summary="Version 2 of transformer_block (LayerNorm, fused attention, plain feed-forward), kept so saved "
            "transformer_block@2 plans restore.",
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
        "activation": Arg(str, "gelu", choices=ACTIVATIONS_V2, positional=False,
                          help="Feed-forward activation. " + ACTIVATION_HELP_V2),
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
        Example("transformer_block_v2(4)", ("B", 16, 64), ("B", 16, 64),
                note="The same layer as transformer_block(4) with its new arguments at their defaults."),
        Example("transformer_block_v2(2, norm='post', eps=1e-12, activation='relu', mlp_bias=False)",
                ("B", 6, 16), ("B", 6, 16),
                note="A post-norm layer with a bias-free ReLU feed-forward network."),
    ),
    reference=spec_of(TransformerBlock).reference,
)
class TransformerBlockV2(TransformerBlock):
    """`transformer_block@2`, frozen: the layer

        h   = x + attention(norm1(x))          (norm="pre")
        out = h + feed_forward(norm2(h))

    or its post-norm form, with `LayerNorm(D, eps)` norms, the fused `attention@1` module
    (`heads`, `causal`) and a plain feed-forward network of width `expansion * D` with one of
    the activations 'gelu', 'gelu_tanh', 'relu', 'silu'; `bias`, `attention_bias`, `mlp_bias`.

    This is the declaration `transformer_block` had before version 3 added the attention's
    new arguments and ports, `normalization`, `hidden`, `gated` and `"quick_gelu"`. Its
    arguments, plan records and parameters are exactly version 2's, so a plan saved with
    `transformer_block@2` restores byte for byte, builds this module and loads the state dict
    it was saved with. It computes what `transformer_block` computes with the new arguments
    at their defaults. Write `transformer_block` in new specifications; this alias exists for
    saved plans (which record the identity `transformer_block@2`, not the alias).
    """

    def __init__(self, *, heads: int, causal: bool = False, expansion: int = 4, activation: str = "gelu",
                 norm: str = "pre", eps: float = 1e-5, bias: bool = True, attention_bias: Optional[bool] = None,
                 mlp_bias: Optional[bool] = None, D: int) -> None:
        super().__init__(heads=heads, causal=causal, expansion=expansion, activation=activation, norm=norm, eps=eps,
                         bias=bias, attention_bias=attention_bias, mlp_bias=mlp_bias, D=D)
