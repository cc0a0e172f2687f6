"""transformer_block@1: one pre-norm transformer layer (attention, then feed-forward)."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import spec_of

from .attention import Attention
from .feed_forward import FeedForward
from .heads import heads_divide_width


def _layer_norm(x, norm):
    """Written-out layer normalization over the last axis with population variance."""
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def _reference(module):
    attend = spec_of(Attention).reference(module.attention)
    expand = spec_of(FeedForward).reference(module.feed_forward)

    def forward(x):
        x = x + attend(_layer_norm(x, module.norm1))
        return x + expand(_layer_norm(x, module.norm2))

    return forward


@operator(
    "transformer_block",
    summary="Pre-norm transformer layer: x + attention(layer_norm(x)), then + feed_forward(layer_norm(.)).",
    shape="x[B, T, D] -> out[B, T, D]",
    relation=heads_divide_width,
    shape_text="x and out are [B, T, D]; D must be divisible by heads.",
    args={
        "heads": Arg(int, min=1, help="Number of attention heads; the width D must be divisible by it."),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future in the attention: position t attends only to positions 0..t."),
        "expansion": Arg(int, 4, min=1, positional=False,
                         help="Feed-forward hidden width as a multiple of D (expansion * D units)."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance in both layer normalizations for stability."),
        "bias": Arg(bool, True, positional=False,
                    help="Whether the attention and feed-forward linear layers learn additive biases."),
    },
    category="block",
    examples=(
        Example("transformer_block(4)", ("B", 16, 64), ("B", 16, 64),
                note="Four heads and a 256-unit feed-forward layer; D is read from the input."),
        Example("linear(32)\ntransformer_block(2, causal=True)\ntransformer_block(2, causal=True)\nlinear()",
                ("B", 12, 8), ("B", 12, 5),
                note="A two-layer causal stack between an input projection and a head."),
    ),
    reference=_reference,
)
class TransformerBlock(nn.Module):
    """One pre-normalization transformer layer on a `[B, T, D]` sequence (the GPT-2 layout):

        h   = x + attention(norm1(x))
        out = h + feed_forward(norm2(h))

    * `norm1` and `norm2` are `torch.nn.LayerNorm(D, eps)` with learned scale and bias
      (population variance over the last axis).
    * `attention` is the module of `attention@1` (`heads`, `causal`, `bias`): fused
      query/key/value projection, `scaled_dot_product_attention`, output projection.
    * `feed_forward` is the module of `feed_forward@1` (`expansion`, `bias`): `Linear(D,
      expansion * D)`, exact GELU, `Linear(expansion * D, D)`.

    The whole layer is one graph node with one module; its parts are submodules, not
    separate nodes. There is no dropout and no randomness in forward, and no final
    normalization: follow a stack of blocks with a separate `layer_norm` where the
    architecture calls for one.
    """

    def __init__(
        self, *, heads: int, causal: bool = False, expansion: int = 4, eps: float = 1e-5, bias: bool = True, D: int
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attention = Attention(heads=heads, causal=causal, bias=bias, D=D)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.feed_forward = FeedForward(expansion=expansion, bias=bias, D=D)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.feed_forward(self.norm2(x))
