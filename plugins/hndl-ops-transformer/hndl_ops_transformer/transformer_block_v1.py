"""transformer_block@1 (alias transformer_block_v1): the pre-norm GELU layer as version 1 declared it.

Kept so that plans saved before ``transformer_block`` gained ``activation``, ``norm``,
``attention_bias`` and ``mlp_bias`` (version 2) still restore, rebuild and load their state
dicts. New specifications use ``transformer_block``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .heads import heads_divide_width
from .transformer_block import TransformerBlock


@operator(
    "transformer_block_v1",
    identity="transformer_block",
    version=1,
    summary="Version 1 of transformer_block (pre-norm, exact GELU), kept so saved transformer_block@1 plans restore.",
    shape="x[B, T, D] -> out[B, T, D]",
    relation=heads_divide_width,
    shape_text="x and out are [B, T, D]; D must be divisible by heads.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT,
                     help="Number of attention heads; the width D must be divisible by it."),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future in the attention: position t attends only to positions 0..t."),
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT, positional=False,
                         help="Feed-forward hidden width as a multiple of D (expansion * D units)."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance in both layer normalizations for stability."),
        "bias": Arg(bool, True, positional=False,
                    help="Whether the attention and feed-forward linear layers learn additive biases."),
    },
    category="block",
    examples=(
        Example("transformer_block_v1(4)", ("B", 16, 64), ("B", 16, 64),
                note="The same layer as transformer_block(4) with its default activation and placement."),
        Example("linear(32)\ntransformer_block_v1(2, causal=True)\nlinear()", ("B", 12, 8), ("B", 12, 5),
                note="A causal layer between an input projection and a head."),
    ),
    reference=spec_of(TransformerBlock).reference,
)
class TransformerBlockV1(TransformerBlock):
    """`transformer_block@1`, frozen: the pre-normalization layer

        h   = x + attention(norm1(x))
        out = h + feed_forward(norm2(h))

    with `LayerNorm(D, eps)` norms, the `attention@1` module and an exact-GELU feed-forward
    network of width `expansion * D`, one `bias` flag for both.

    This is the declaration `transformer_block` had before version 2 added `activation`,
    `norm`, `attention_bias` and `mlp_bias`. Its arguments, plan records and parameters are
    exactly version 1's, so a plan saved with `transformer_block@1` restores byte for byte,
    builds this module and loads the state dict it was saved with. It computes what
    `transformer_block` computes with those four at their defaults. Write `transformer_block`
    in new specifications; this alias exists for saved plans (which record the identity
    `transformer_block@1`, not the alias).
    """

    def __init__(self, *, heads: int, causal: bool = False, expansion: int = 4, eps: float = 1e-5,
                 bias: bool = True, D: int) -> None:
        super().__init__(heads=heads, causal=causal, expansion=expansion, eps=eps, bias=bias, D=D)
