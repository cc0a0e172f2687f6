"""attention@1: multi-head self-attention over a [B, T, D] sequence."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT

from .heads import check_heads, heads_divide_width


def _reference(module):
    """Written-out attention: softmax(Q K^T / sqrt(d) + mask) V per head, plain torch ops."""

    def forward(x):
        batch, length, width = x.shape
        heads = module.heads
        size = width // heads
        qkv = x @ module.in_proj_weight.t()
        if module.in_proj_bias is not None:
            qkv = qkv + module.in_proj_bias
        q, k, v = qkv[..., :width], qkv[..., width:2 * width], qkv[..., 2 * width:]

        def split(t):
            return t.reshape(batch, length, heads, size).permute(0, 2, 1, 3)

        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(size)
        if module.causal:
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        weights = weights / weights.sum(dim=-1, keepdim=True)
        mixed = (weights @ v).permute(0, 2, 1, 3).reshape(batch, length, width)
        out = mixed @ module.out_proj.weight.t()
        if module.out_proj.bias is not None:
            out = out + module.out_proj.bias
        return out

    return forward


@operator(
    "attention",
    summary="Multi-head scaled dot-product self-attention over a [B, T, D] sequence.",
    shape="x[B, T, D] -> out[B, T, D]",
    relation=heads_divide_width,
    shape_text="x and out are [B, T, D]; D must be divisible by heads.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT,
                     help="Number of attention heads; the width D must be divisible by it."),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future: position t attends only to positions 0..t."),
        "bias": Arg(bool, True, positional=False,
                    help="Whether the query/key/value and output projections learn additive biases."),
    },
    category="attention",
    examples=(
        Example("attention(4)", ("B", 16, 64), ("B", 16, 64),
                note="Four heads of width 16 over 16 positions; D is read from the input."),
        Example("linear(32)\nattention(heads=2, causal=True)\nlinear()", ("B", 10, 8), ("B", 10, 8),
                note="Causal attention between two position-wise projections; the head width comes from the "
                     "output contract."),
    ),
    reference=_reference,
)
class Attention(nn.Module):
    """Self-attention in which every position of a `[B, T, D]` sequence attends to the
    positions of the same sequence, with `heads` heads of width `D / heads`.

    * **Projections.** One fused input projection `in_proj_weight` `[3D, D]` (and
      `in_proj_bias` `[3D]`) produces queries, keys and values in that order; `out_proj` is a
      `Linear(D, D)`. The parameter names, layout and initialization (Xavier-uniform input
      projection, zero biases, PyTorch's `Linear` default for the output weight) are those of
      `torch.nn.MultiheadAttention(D, heads, batch_first=True)`, so its `state_dict` loads
      directly into one and back.
    * **Attention.** `torch.nn.functional.scaled_dot_product_attention` computes
      `softmax(Q K^T / sqrt(D / heads)) V` per head; with `causal=True` position `t` sees only
      positions `0..t`, so later tokens never affect earlier outputs.
    * **Deterministic.** There is no dropout and no randomness in forward; train and eval mode
      compute the same thing. No padding mask: every one of the `T` positions is attended to.
    * **Second derivatives.** float64 inputs always take PyTorch's math kernel, which is
      twice differentiable (`gradgradcheck` passes). Other dtypes use whichever kernel
      `scaled_dot_product_attention` selects, and the fused ones (the CPU flash kernel among
      them) have no second derivative. A host that needs one in float32 or lower precision,
      for a gradient penalty say, wraps the forward in
      `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`; the module honours that choice.
    """

    def __init__(self, *, heads: int, causal: bool = False, bias: bool = True, D: int) -> None:
        super().__init__()
        self.head_dim = check_heads(D, heads)
        self.embed_dim = D
        self.heads = heads
        self.causal = causal
        self.in_proj_weight = nn.Parameter(torch.empty(3 * D, D))
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * D))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(D, D, bias=bias)
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def forward(self, x):
        batch, length, width = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if x.dtype == torch.float64:
            with sdpa_kernel(SDPBackend.MATH):
                mixed = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            mixed = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out_proj(mixed.transpose(1, 2).reshape(batch, length, width))

    def extra_repr(self) -> str:
        return f"D={self.embed_dim}, heads={self.heads}, causal={self.causal}, bias={self.in_proj_bias is not None}"
