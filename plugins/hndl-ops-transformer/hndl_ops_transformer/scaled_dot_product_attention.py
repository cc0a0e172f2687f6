"""scaled_dot_product_attention@1: softmax(q k^T * scale + bias) v over [B, H, T, E] heads, with
grouped key/value heads (GQA/MQA), an optional additive bias or mask, and causal masking."""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling


def _ungrouped(query_heads: int, key_heads: int) -> str:
    return (f"scaled_dot_product_attention groups H={query_heads} query heads over G={key_heads} key/value "
            f"heads, but {key_heads} does not divide {query_heads}")


_REMEDY = ("Give k and v a number of heads G that divides the query heads H (G = H for multi-head, "
           "G = 1 for multi-query attention).")


def _relation(s) -> None:
    """G divides H (E_CONSTRAINT otherwise); every other extent is shared through the patterns."""
    query, key = s.shape("q"), s.shape("k")
    heads = query[1] if query else None
    groups = key[1] if key else None
    if heads is None:
        out = s.shape("out")
        heads = out[1] if out else None
    if groups is None:
        value = s.shape("v")
        groups = value[1] if value else None
    if heads is not None and groups is not None and heads % groups:
        s.error("E_CONSTRAINT", f"{_ungrouped(heads, groups)}. {_REMEDY}")


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], causal: bool,
           scale: Optional[float], grouped: bool) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, through torch's math kernel for float64 (the one kernel
    with a second derivative). fx records it as one call (``torch.fx.wrap``), since it decides on
    the dtype in Python."""
    if q.dtype == torch.float64:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                                  enable_gqa=grouped)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=grouped)


torch.fx.wrap("attend")


def causal_mask(queries: int, keys: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """The ``[queries, keys]`` boolean mask of allowed pairs, top-left aligned as torch's
    ``is_causal``: query ``i`` attends to keys ``0 .. i``."""
    return torch.ones(queries, keys, dtype=torch.bool, device=device).tril()


def _reference(module):
    """Written-out attention, as transformers' eager_attention_forward computes it: repeat_kv, scaled
    scores plus the bias, the causal mask, a softmax taken in float32 and cast back, the weighted sum."""

    def forward(q, k, v, attn_bias=None):
        heads, groups = q.shape[1], k.shape[1]
        k = k.repeat_interleave(heads // groups, dim=1)
        v = v.repeat_interleave(heads // groups, dim=1)
        scale = module.scale if module.scale is not None else 1.0 / math.sqrt(q.shape[-1])
        scores = (q @ k.transpose(-2, -1)) * scale
        if attn_bias is not None:
            scores = scores + attn_bias
        if module.causal:
            allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        wide = scores.to(torch.float64 if scores.dtype == torch.float64 else torch.float32)
        weights = torch.exp(wide - wide.amax(dim=-1, keepdim=True))
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(q.dtype)
        return weights @ v

    return forward


@operator(
    "scaled_dot_product_attention",
    torch=TorchSpelling(signature="F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, "
                                 "is_causal=False, scale=None)"),
    summary="softmax(q k^T * scale + bias) v per head over [B, H, T, E] queries and [B, G, S, E] keys, "
            "with grouped key/value heads, an optional additive bias and causal masking.",
    shape="q[B, H, T, E], k[B, G, S, E], v[B, G, S, F], attn_bias?[B, H, T, S] -> out[B, H, T, F]",
    relation=_relation,
    shape_text="q [B, H, T, E], k [B, G, S, E], v [B, G, S, F], optional attn_bias [B, H, T, S] -> out [B, H, T, F]; "
               "G must divide H; every extent is shared between the ports in both directions.",
    args={
        "scale": Arg(float, None, min=0, exclusive_min=True, positional=False,
                     help="Multiplies q k^T before the softmax; omitted, 1/sqrt(E) (the per-head width). "
                          "T5 uses scale=1.0."),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future: query i attends to keys 0..i (top-left aligned, as torch's "
                           "is_causal, also when T != S)."),
    },
    category="attention",
    examples=(
        Example("q = split_heads(x, 4)\nk = split_heads(x, 4)\nv = split_heads(x, 4)\n"
                "out = merge_heads(scaled_dot_product_attention(q, k, v, causal=True))",
                ("B", 10, 32), ("B", 10, 32),
                note="Causal self-attention over 4 heads of width 8, written out from its parts."),
        Example("scaled_dot_product_attention(q, k, v)",
                {"q": ("B", 8, 6, 16), "k": ("B", 2, 6, 16), "v": ("B", 2, 6, 16)}, ("B", 8, 6, 16),
                note="Grouped-query attention: 8 query heads share 2 key/value heads (4 each)."),
        Example("scaled_dot_product_attention(q, k, v, bias, scale=1.0)",
                {"q": ("B", 2, 5, 4), "k": ("B", 2, 7, 4), "v": ("B", 2, 7, 3), "bias": ("B", 2, 5, 7)},
                ("B", 2, 5, 3),
                note="Unscaled attention with an additive bias (T5); 5 queries over 7 keys, value width 3."),
    ),
    reference=_reference,
)
class ScaledDotProductAttention(nn.Module):
    """The attention of "Attention Is All You Need", per head, on tensors already split into
    heads:

        out = softmax(q @ k^T * scale + bias) @ v

    Rank 4 is read here as `[B, H, T, E]` (batch, heads, positions, per-head width), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4. `split_heads` and `merge_heads` convert from and to `[B, T, D]`.

    * **Ports.** Queries `q[B, H, T, E]`, keys `k[B, G, S, E]`, values `v[B, G, S, F]`:
      `T` queries attend over `S` keys (self-attention when `S = T`, cross-attention
      otherwise), and the value width `F` may differ from `E`.
    * **Grouped heads.** `G` key/value heads serve `H` query heads; `G` must divide `H`
      (E_CONSTRAINT otherwise). Query head `h` reads key/value head `h // (H / G)`, as
      transformers' `repeat_kv` lays it out: `G = H` is multi-head attention, `1 < G < H`
      grouped-query attention (LLaMA 2 70B, LLaMA 3, Mistral), `G = 1` multi-query attention.
      The grouped key/value heads go to torch as they are (`enable_gqa=True`), not repeated
      by this operator, except under `torch.jit.trace` (the classic ONNX exporter, which has no
      `enable_gqa`), where they are repeated to `H` heads first.
    * **Bias.** The optional `attn_bias[B, H, T, S]` is added to the scaled scores before the
      softmax: a learned relative position bias (T5, `relative_position_bias`), ALiBi slopes,
      or a mask written additively (`0` where allowed, `-inf` or a large negative value where
      not). It is differentiable. A row whose every entry is `-inf` has no defined softmax and
      gives NaN, as in torch.
    * **Scale.** `scale` omitted means `1 / sqrt(E)`; T5 gives `scale=1.0`.
    * **Causal.** `causal=True` lets query `i` attend to keys `0 .. i` only, aligned at the
      top left as torch's `is_causal` is: with `T != S` the mask is `ones(T, S).tril()`, not
      aligned at the bottom right as a key/value cache would need. It combines with `attn_bias`.
    * **Kernels.** `torch.nn.functional.scaled_dot_product_attention` computes it, on
      whichever fused kernel torch selects; with a bias and `causal` both given, the causal
      mask is folded into the bias (torch takes one or the other). float64 inputs always take
      torch's math kernel, which is twice differentiable (`gradgradcheck` passes); a host that
      needs second derivatives in lower precision wraps the call in
      `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`, which this operator honours.
    * No dropout, no parameters, no randomness: identical in train and eval mode.
    """

    def __init__(self, scale: Optional[float] = None, causal: bool = False, *, H: int, G: int) -> None:
        super().__init__()
        if H % G:
            raise HNDLError("E_CONSTRAINT", _ungrouped(H, G), field="k", remedies=(_REMEDY,))
        self.scale = scale
        self.causal = causal
        self.grouped = G != H
        self.repeats = H // G

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                attn_bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        bias = attn_bias
        causal = self.causal
        if bias is not None and causal:
            bias = bias.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
            causal = False
        grouped = self.grouped
        if grouped and torch.jit.is_tracing():  # the TorchScript ONNX exporter has no enable_gqa: repeat the heads
            k, v = k.repeat_interleave(self.repeats, dim=1), v.repeat_interleave(self.repeats, dim=1)
            grouped = False
        return attend(q, k, v, bias, causal, self.scale, grouped)

    def extra_repr(self) -> str:
        scale = "1/sqrt(E)" if self.scale is None else repr(self.scale)
        return f"scale={scale}, causal={self.causal}, grouped={self.grouped}"
