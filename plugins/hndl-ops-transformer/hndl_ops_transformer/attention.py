"""attention@2: multi-head self-attention over a [B, T, D] sequence, with grouped key/value heads,
rotary positions, an additive bias input, a scale choice and per-projection biases."""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .heads import check_heads, heads_divide_width
from .rotary import apply_keeping_float32, apply_rotary, rotary_frequencies, rotary_tables
from .scaled_dot_product_attention import attend, causal_mask

torch.fx.wrap("attend")

QKV_LAYOUTS = ("fused", "separate")
PROJECTIONS = ("query", "key", "value", "out")

#: The shape contract: the sequence, an optional additive bias on the scores (one [T, S] map per
#: head, rank 4 read as [B, H, T, S]), an optional rotary table ([B, 2, T, R]: cos then sin) and an
#: optional context [B, S, E] the keys and values come from (cross-attention; S = T without it).
SHAPE = "x[B, T, D], attn_bias?[B, H, T, S], rope?[B, 2, T, R], context?[B, S, E] -> out[B, T, D]"
#: The self-attention contract of transformer_block (no context: the bias is [B, H, T, T]).
SELF_SHAPE = "x[B, T, D], attn_bias?[B, H, T, T], rope?[B, 2, T, R] -> out[B, T, D]"


def projection_biases(args: Mapping[str, Any]) -> dict[str, bool]:
    """Whether each of the query, key, value and output projections learns a bias: its own
    ``<name>_bias`` argument when given, else ``bias``."""
    return {name: args["bias"] if args.get(f"{name}_bias") is None else args[f"{name}_bias"]
            for name in PROJECTIONS}


def _argument_error(message: str, field: str, remedy: str) -> HNDLError:
    return HNDLError("E_ARGUMENT", message, field=field, remedies=(remedy,))


def check_attention_args(args: Mapping[str, Any]) -> None:
    """Cross-argument rules (E_ARGUMENT): kv_heads divides heads, a fused projection has one
    bias choice for query, key and value, rope_dims is even and fits the head, and rope_dims
    only comes with a rotary table (rope_theta here, or a bound rope port, which the relation checks)."""
    heads, kv_heads = args["heads"], args.get("kv_heads")
    if kv_heads is not None and heads % kv_heads:
        raise _argument_error(f"kv_heads={kv_heads} does not divide heads={heads}: each key/value head must "
                              "serve the same number of query heads", "kv_heads",
                              "Give kv_heads a divisor of heads (1 for multi-query attention, heads for none).")
    biases = projection_biases(args)
    if args.get("qkv", "fused") == "fused" and len({biases["query"], biases["key"], biases["value"]}) > 1:
        mixed = ", ".join(f"{name}_bias={biases[name]}" for name in ("query", "key", "value"))
        raise _argument_error(f"the fused query/key/value projection has one bias for all three, but {mixed}",
                              "qkv", "Give qkv='separate' for per-projection biases (Whisper has no key bias).")
    rope_dims, head_dim = args.get("rope_dims"), args.get("head_dim")
    if rope_dims is not None:
        if rope_dims % 2:
            raise _argument_error(f"rope_dims={rope_dims} is odd: rotary embedding turns pairs of dimensions",
                                  "rope_dims", "Give an even rope_dims.")
        if head_dim is not None and rope_dims > head_dim:
            raise _argument_error(f"rope_dims={rope_dims} exceeds head_dim={head_dim}", "rope_dims",
                                  "Give rope_dims at most the head width.")


def _validate(args) -> None:
    check_attention_args(args)


def _head_width(s) -> Optional[int]:
    """head_dim when given, else D / heads when D is known."""
    if s.args.get("head_dim") is not None:
        return s.args["head_dim"]
    shape = s.shape("x") or s.shape("out")
    if shape and shape[-1] is not None:
        return shape[-1] // s.args["heads"]
    return None


def _bound(s, port: str) -> bool:
    return port in s.inputs and s.bound(port)


def _cross_attention_rules(s) -> None:
    """With a context: no causal mask, no rotary positions, and a fused projection needs E = D;
    without one, the bias is [B, H, T, T] (S = T)."""
    if not _bound(s, "context"):
        if _bound(s, "attn_bias"):
            known = [shape[1] for shape in (s.shape("x"), s.shape("out")) if shape and shape[1] is not None]
            bias = s.shape("attn_bias")
            if known:
                s.axis("attn_bias", 3, known[0])
            elif bias and bias[3] is not None:
                s.axis("x", 1, bias[3])
        return
    if s.args.get("causal"):
        s.error("E_ARGUMENT", "causal=True masks the future of a sequence attending to itself; with a context "
                              "(cross-attention) every query sees the whole context: drop causal or the context")
    if s.args.get("rope_theta") is not None or _bound(s, "rope"):
        s.error("E_ARGUMENT", "rotary positions turn queries and keys of one sequence; with a context "
                              "(cross-attention) give neither rope_theta nor the rope port")
    context, x = s.shape("context"), s.shape("x") or s.shape("out")
    if (s.args.get("qkv", "fused") == "fused" and context and x and context[-1] is not None and x[-1] is not None
            and context[-1] != x[-1]):
        s.error("E_CONSTRAINT", f"the fused projection reads x and the context with one weight, but the context "
                                f"width {context[-1]} differs from D={x[-1]}: give qkv='separate'")


def attention_relation(s) -> None:
    """D divisible by heads (unless head_dim is given); the attn_bias port has one map per query head;
    the rope port rotates rope_dims (default the head width) of each head and excludes rope_theta;
    the cross-attention rules of the context port."""
    heads_divide_width(s)
    _cross_attention_rules(s)
    head = _head_width(s)
    rope_dims = s.args.get("rope_dims")
    if rope_dims is not None and head is not None and rope_dims > head:
        s.error("E_CONSTRAINT", f"rope_dims={rope_dims} exceeds the head width {head}")
    if _bound(s, "attn_bias"):
        s.axis("attn_bias", 1, s.args["heads"])
    rope_bound = _bound(s, "rope")
    if rope_bound:
        if s.args.get("rope_theta") is not None:
            s.error("E_ARGUMENT", "the rope port and rope_theta both give a rotary table; give one: the port for a "
                                  "rotary_embedding node's table, rope_theta for a table of the attention's own")
        rotated = rope_dims if rope_dims is not None else head
        if rotated is not None:
            s.axis("rope", 3, rotated)
    elif rope_dims is not None and s.args.get("rope_theta") is None:
        s.error("E_ARGUMENT", f"rope_dims={rope_dims} is given without a rotary table; give rope_theta= or bind "
                              "the rope port")


def _softmax_attention(q, k, v, bias, causal, scale):
    """softmax(q k^T * scale + bias) v with the grouped heads expanded, in plain torch ops."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        length, source = scores.shape[-2:]
        future = torch.ones(length, source, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return (weights / weights.sum(dim=-1, keepdim=True)) @ v


def _written_rotation(x, cos, sin):
    rotated = cos.shape[-1]
    head, tail = x[..., :rotated], x[..., rotated:]
    half = rotated // 2
    turned = torch.cat((-head[..., half:], head[..., :half]), dim=-1)
    return torch.cat((head * cos + turned * sin, tail), dim=-1)


def _reference(module):
    """Written-out attention: project, split heads, rotate, softmax(Q K^T * scale + bias) V, merge, project."""

    def linear(x, weight, bias):
        out = x @ weight.t()
        return out if bias is None else out + bias

    def forward(x, attn_bias=None, rope=None, context=None):
        batch, length, _ = x.shape
        heads, groups, size = module.heads, module.kv_heads, module.head_dim
        source = x if context is None else context
        if module.qkv == "fused":
            weights = module.in_proj_weight.split((heads * size, groups * size, groups * size))
            biases = (None,) * 3 if module.in_proj_bias is None else module.in_proj_bias.split(
                (heads * size, groups * size, groups * size))
            q = linear(x, weights[0], biases[0])
            k, v = linear(source, weights[1], biases[1]), linear(source, weights[2], biases[2])
        else:
            q = linear(x, module.q_proj.weight, module.q_proj.bias)
            k = linear(source, module.k_proj.weight, module.k_proj.bias)
            v = linear(source, module.v_proj.weight, module.v_proj.bias)

        def split(t, count):
            return t.reshape(batch, t.shape[1], count, size).permute(0, 2, 1, 3)

        q, k, v = split(q, heads), split(k, groups), split(v, groups)
        if module.rope_theta is not None:
            dims = module.rope_dims
            inv_freq = 1.0 / module.rope_theta ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims)
            angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]
            angles = torch.cat((angles, angles), dim=-1)
            cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
            q, k = _written_rotation(q, cos, sin), _written_rotation(k, cos, sin)
        elif rope is not None:
            cos, sin = rope[:, 0, None], rope[:, 1, None]
            q, k = _written_rotation(q, cos, sin), _written_rotation(k, cos, sin)
        mixed = _softmax_attention(q, k, v, attn_bias, module.causal, module.scale)
        mixed = mixed.permute(0, 2, 1, 3).reshape(batch, length, heads * size)
        return linear(mixed, module.out_proj.weight, module.out_proj.bias)

    return forward


ARGS = {
    "heads": Arg(int, min=1, max=MAX_EXTENT,
                 help="Number of query heads; the width D must be divisible by it unless head_dim is given."),
    "kv_heads": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                    help="Number of key/value heads, a divisor of heads: query head h reads key/value head "
                         "h // (heads / kv_heads) (grouped-query attention; 1 is multi-query). Omitted, heads."),
    "head_dim": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                    help="Width of each head; omitted, D / heads. The output projection maps heads * head_dim "
                         "back to D."),
    "causal": Arg(bool, False, positional=False,
                  help="Mask the future: position t attends only to positions 0..t."),
    "scale": Arg(float, None, min=0, exclusive_min=True, positional=False,
                 help="Factor on the scores Q K^T; omitted, 1 / sqrt(head_dim). T5 uses 1.0."),
    "bias": Arg(bool, True, positional=False,
                help="Whether the query, key, value and output projections learn additive biases; the four "
                     "per-projection flags override it one at a time."),
    "query_bias": Arg(bool, None, positional=False, help="Whether the query projection learns a bias; omitted, bias."),
    "key_bias": Arg(bool, None, positional=False,
                    help="Whether the key projection learns a bias; omitted, bias (Whisper has none)."),
    "value_bias": Arg(bool, None, positional=False, help="Whether the value projection learns a bias; omitted, bias."),
    "out_bias": Arg(bool, None, positional=False, help="Whether the output projection learns a bias; omitted, bias."),
    "qkv": Arg(str, "fused", choices=QKV_LAYOUTS, positional=False,
               help="Parameter layout of the input projections: 'fused' is one in_proj_weight [(heads + "
                    "2 * kv_heads) * head_dim, D] (torch.nn.MultiheadAttention's); 'separate' is q_proj, k_proj "
                    "and v_proj Linear layers (the LLaMA, T5 and diffusers layout). Differing query/key/value "
                    "biases need 'separate'."),
    "rope_theta": Arg(float, None, min=0, exclusive_min=True, positional=False,
                      help="Base of a rotary position embedding the attention computes itself (LLaMA: 10000, "
                           "LLaMA 3: 500000), applied to queries and keys; omitted, none (or the rope port's)."),
    "rope_dims": Arg(int, None, min=2, max=MAX_EXTENT, positional=False,
                     help="How many leading dimensions of each head the rotary embedding turns (even; partial "
                          "rotary); omitted, the whole head."),
}


@operator(
    "attention",
    torch=TorchSpelling(
        signature="nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True)",
        hint="attention reads the width from its input: torch's MultiheadAttention(512, 8) is "
             "attention(8) here.",
        names=("multihead_attention", "multi_head_attention", "mha"),
        call="attention(heads)",
    ),
    version=2,
    summary="Multi-head scaled dot-product attention over a [B, T, D] sequence (self-attention, or "
            "cross-attention to a context), with grouped key/value heads, rotary positions and an optional "
            "additive score bias.",
    shape=SHAPE,
    relation=attention_relation,
    validate=_validate,
    shape_text="x and out are [B, T, D]; D must be divisible by heads unless head_dim is given; the optional "
               "attn_bias is [B, heads, T, S] (rank 4 read as [B, H, T, S]), added to the scores, with S = T unless "
               "a context is bound; the optional rope is a rotary_embedding table [B, 2, T, R] with R = rope_dims "
               "(default the head width); the optional context [B, S, E] gives the keys and values "
               "(cross-attention; E = D unless qkv='separate').",
    args=ARGS,
    category="attention",
    examples=(
        Example("attention(4)", ("B", 16, 64), ("B", 16, 64),
                note="Four heads of width 16 over 16 positions; D is read from the input."),
        Example("linear(32)\nattention(heads=2, causal=True)\nlinear()", ("B", 10, 8), ("B", 10, 8),
                note="Causal attention between two position-wise projections; the head width comes from the "
                     "output contract."),
        Example("attention(4, kv_heads=2, causal=True, bias=False, qkv='separate', rope_theta=10000.0)",
                ("B", 12, 64), ("B", 12, 64),
                note="A LLaMA attention layer: grouped-query (two query heads per key/value head), rotary "
                     "positions, bias-free q_proj/k_proj/v_proj/out_proj."),
        Example("attention(4, key_bias=False, qkv='separate')", ("B", 6, 32), ("B", 6, 32),
                note="Whisper's attention: biased query, value and output projections, no key bias."),
        Example("attention(2, head_dim=8, scale=1.0, bias=False, qkv='separate')", ("B", 5, 12), ("B", 5, 12),
                note="Heads of an explicit width (2 * 8 = 16 inner units for D = 12) and unscaled scores, "
                     "as T5 configures d_kv."),
        Example("r = rotary_embedding(x)\nattention(x, 4, kv_heads=1, causal=True, rope=r)", ("B", 9, 32),
                ("B", 9, 32),
                note="Multi-query attention taking its rotary table from a rotary_embedding node (R = 8, the head "
                     "width, inferred from this consumer)."),
        Example("b = relative_position_bias(x, 4)\nattention(x, 4, scale=1.0, attn_bias=b)", ("B", 6, 32),
                ("B", 6, 32),
                note="T5-style attention: unscaled scores plus a learned relative position bias on the attn_bias "
                     "port."),
        Example("memory = linear(x, 24)\nattention(x, 4, qkv='separate', context=memory)", ("B", 7, 32),
                ("B", 7, 32),
                note="Cross-attention: queries from x (D = 32), keys and values from a 24-wide context."),
    ),
    reference=_reference,
)
class Attention(nn.Module):
    """Attention in which every position of a `[B, T, D]` sequence attends to the positions
    of the same sequence (self-attention) or, with the `context` port bound, of a context
    `[B, S, E]` (cross-attention), with `heads` query heads of width `head_dim` (default
    `D / heads`) and `kv_heads` key/value heads (default `heads`).

    * **Projections.** With `qkv="fused"` (the default) one input projection
      `in_proj_weight` `[(heads + 2 * kv_heads) * head_dim, D]` (and `in_proj_bias`) produces
      queries, keys and values in that order; `out_proj` is a `Linear(heads * head_dim, D)`.
      When `kv_heads == heads` and `head_dim == D / heads`, the parameter names, layout and
      initialization (Xavier-uniform input projection, zero biases, PyTorch's `Linear` default
      for the output weight) are those of `torch.nn.MultiheadAttention(D, heads,
      batch_first=True)`, so its `state_dict` loads directly into one and back. With
      `qkv="separate"` the queries, keys and values come from `q_proj`, `k_proj` and `v_proj`
      (`Linear(D, heads * head_dim)`, `Linear(D, kv_heads * head_dim)` twice, PyTorch's
      `Linear` initialization, zero biases): the layout of LLaMA (`q_proj`, `k_proj`, `v_proj`,
      `o_proj`), T5 (`q`, `k`, `v`, `o`) and diffusers, whose state dicts map one to one by name.
    * **Biases.** `bias` decides for all four projections; `query_bias`, `key_bias`,
      `value_bias` and `out_bias` override it one at a time (Whisper: `key_bias=False`).
      A fused projection has one bias vector, so differing query/key/value choices need
      `qkv="separate"` (E_ARGUMENT otherwise).
    * **Grouped heads.** Query head `h` reads key/value head `h // (heads / kv_heads)`, as
      transformers' `repeat_kv` arranges it: `kv_heads=1` is multi-query attention,
      `1 < kv_heads < heads` grouped-query attention (LLaMA 2 70B, LLaMA 3, Mistral).
    * **Scores.** `softmax(Q K^T * scale + bias) V` per head, with `scale` defaulting to
      `1 / sqrt(head_dim)` (T5 uses `scale=1.0`). The optional `attn_bias` port `[B, heads, T, S]`
      (`S = T` in self-attention) is added to the scores before the softmax: a relative position bias
      (`relative_position_bias`), an ALiBi table or an additive mask (`-inf` masks a pair).
      With `causal=True` position `t` sees only positions `0..t`, on top of any bias.
      Rank 4 here reads as `[B, H, T, S]`: heads, query positions, key positions.
    * **Cross-attention.** A bound `context` port `[B, S, E]` supplies the keys and values
      (queries still come from `x`): the decoder's attention over an encoder's output in T5,
      Whisper or the original transformer, a UNet's attention over text embeddings. `k_proj`
      and `v_proj` then read width `E` (`qkv="separate"`; the fused layout needs `E = D`), the
      `attn_bias` port is `[B, heads, T, S]`, and `causal` and rotary positions, which concern a
      sequence attending to itself, are E_ARGUMENT.
    * **Rotary positions.** `rope_theta` turns the first `rope_dims` (default `head_dim`)
      dimensions of every query and key head by the position's angles, in the half-split
      ("rotate half") convention of transformers' LLaMA; the inverse frequencies are a
      non-persistent float32 buffer `inv_freq` computed at construction (not a parameter, not
      in the state dict) and the cos/sin tables are computed in float32 per forward, then cast
      to the compute dtype. Instead, a bound `rope` port takes a `rotary_embedding` node's
      table `[B, 2, T, R]` (cos then sin), computed once for a whole stack; giving both is
      E_ARGUMENT.
    * **Kernels.** `torch.nn.functional.scaled_dot_product_attention` runs the product, with
      `enable_gqa` for grouped heads (under `torch.jit.trace`, as the classic ONNX exporter
      traces, the key/value heads are repeated instead: that exporter has no `enable_gqa`).
      float64 inputs always take PyTorch's math kernel, which is twice differentiable
      (`gradgradcheck` passes). Other dtypes use whichever kernel
      `scaled_dot_product_attention` selects, and the fused ones have no second derivative;
      a host that needs one in float32 wraps the forward in
      `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`, which the module honours.
    * **Deterministic.** There is no dropout and no randomness in forward; train and eval mode
      compute the same thing. No padding mask beyond what the attn_bias port adds.
    * **Versions.** Version 2 added `kv_heads`, `head_dim`, `scale`, the per-projection biases,
      `qkv`, `rope_theta`, `rope_dims` and the `attn_bias`, `rope` and `context` ports. With their defaults it
      computes exactly what `attention@1` computed, with the same parameters; plans saved with
      `attention@1` still restore (through `attention_v1`).
    """

    def __init__(
        self,
        *,
        heads: int,
        kv_heads: Optional[int] = None,
        head_dim: Optional[int] = None,
        causal: bool = False,
        scale: Optional[float] = None,
        bias: bool = True,
        query_bias: Optional[bool] = None,
        key_bias: Optional[bool] = None,
        value_bias: Optional[bool] = None,
        out_bias: Optional[bool] = None,
        qkv: str = "fused",
        rope_theta: Optional[float] = None,
        rope_dims: Optional[int] = None,
        D: int,
        E: Optional[int] = None,
    ) -> None:
        super().__init__()
        args = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, bias=bias, query_bias=query_bias,
                    key_bias=key_bias, value_bias=value_bias, out_bias=out_bias, qkv=qkv, rope_dims=rope_dims)
        if qkv not in QKV_LAYOUTS:
            raise _argument_error(f"qkv must be 'fused' or 'separate', not {qkv!r}", "qkv",
                                  "Give qkv='fused' or qkv='separate'.")
        check_attention_args(args)
        self.head_dim = check_heads(D, heads, head_dim)
        if rope_dims is not None and rope_dims > self.head_dim:
            raise _argument_error(f"rope_dims={rope_dims} exceeds the head width {self.head_dim}", "rope_dims",
                                  "Give rope_dims at most the head width.")
        self.embed_dim = D
        self.context_dim = D if E is None else E
        if qkv == "fused" and self.context_dim != D:
            raise HNDLError("E_CONSTRAINT", f"the fused projection reads x and the context with one weight, but the "
                                            f"context width {E} differs from D={D}", field="qkv",
                            remedies=("Give qkv='separate' for a context of another width.",))
        self.heads = heads
        self.kv_heads = heads if kv_heads is None else kv_heads
        self.causal = causal
        self.scale = 1.0 / math.sqrt(self.head_dim) if scale is None else scale
        self.qkv = qkv
        biases = projection_biases(args)
        inner, kv_inner = heads * self.head_dim, self.kv_heads * self.head_dim
        if qkv == "fused":
            self.in_proj_weight = nn.Parameter(torch.empty(inner + 2 * kv_inner, D))
            if biases["query"]:
                self.in_proj_bias = nn.Parameter(torch.empty(inner + 2 * kv_inner))
            else:
                self.register_parameter("in_proj_bias", None)
            nn.init.xavier_uniform_(self.in_proj_weight)
            if biases["query"]:
                nn.init.zeros_(self.in_proj_bias)
        else:
            self.q_proj = nn.Linear(D, inner, bias=biases["query"])
            self.k_proj = nn.Linear(self.context_dim, kv_inner, bias=biases["key"])
            self.v_proj = nn.Linear(self.context_dim, kv_inner, bias=biases["value"])
            for projection in (self.q_proj, self.k_proj, self.v_proj):
                if projection.bias is not None:
                    nn.init.zeros_(projection.bias)
        self.out_proj = nn.Linear(inner, D, bias=biases["out"])
        if biases["out"]:
            nn.init.zeros_(self.out_proj.bias)
        self.rope_theta = rope_theta
        self.rope_dims = None
        if rope_theta is not None:
            self.rope_dims = self.head_dim if rope_dims is None else rope_dims
            self.register_buffer("inv_freq", rotary_frequencies(self.rope_dims, rope_theta), persistent=False)
        else:
            self.inv_freq = None

    def _apply(self, fn, recurse: bool = True):
        return apply_keeping_float32(self, "inv_freq", super()._apply, fn, recurse)

    def _project(self, x, context):
        batch, length = x.shape[0], x.shape[1]  # indexed, not unpacked: fx traces a proxy's shape by item
        heads, groups, size = self.heads, self.kv_heads, self.head_dim
        if context is None:
            context = x
            if self.qkv == "fused":
                qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
                if groups == heads:
                    return qkv.view(batch, length, 3, heads, size).permute(2, 0, 3, 1, 4).unbind(0)
                q, k, v = qkv.split((heads * size, groups * size, groups * size), dim=-1)
        elif self.qkv == "fused":
            inner = heads * size
            bias = self.in_proj_bias
            q = F.linear(x, self.in_proj_weight[:inner], None if bias is None else bias[:inner])
            k, v = F.linear(context, self.in_proj_weight[inner:], None if bias is None else bias[inner:]).chunk(2, -1)
        if self.qkv == "separate":
            q, k, v = self.q_proj(x), self.k_proj(context), self.v_proj(context)
        source = context.shape[1]
        return (q.view(batch, length, heads, size).transpose(1, 2),
                k.reshape(batch, source, groups, size).transpose(1, 2),
                v.reshape(batch, source, groups, size).transpose(1, 2))

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor] = None, rope: Optional[torch.Tensor] = None,
                context: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch, length = x.shape[0], x.shape[1]
        q, k, v = self._project(x, context)
        if self.inv_freq is not None:
            cos, sin = rotary_tables(self.inv_freq, length, q.dtype)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        elif rope is not None:
            cos, sin = rope[:, 0].unsqueeze(1), rope[:, 1].unsqueeze(1)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        causal, bias = self.causal, attn_bias
        if bias is not None and causal:  # scaled_dot_product_attention takes a mask or is_causal, not both
            bias, causal = bias.masked_fill(~causal_mask(length, length, x.device), float("-inf")), False
        grouped = self.kv_heads != self.heads
        if grouped and torch.jit.is_tracing():  # the TorchScript ONNX exporter has no enable_gqa: repeat the heads
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
            grouped = False
        mixed = attend(q, k, v, bias, causal, self.scale, grouped)
        return self.out_proj(mixed.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))

    def extra_repr(self) -> str:
        biases = {"query": None, "key": None, "value": None, "out": self.out_proj.bias is not None}
        if self.qkv == "fused":
            biases.update(dict.fromkeys(("query", "key", "value"), self.in_proj_bias is not None))
        else:
            biases.update(query=self.q_proj.bias is not None, key=self.k_proj.bias is not None,
                          value=self.v_proj.bias is not None)
        text = f"D={self.embed_dim}, heads={self.heads}"
        if self.context_dim != self.embed_dim:
            text += f", E={self.context_dim}"
        if self.kv_heads != self.heads:
            text += f", kv_heads={self.kv_heads}"
        text += f", head_dim={self.head_dim}, causal={self.causal}, qkv={self.qkv!r}"
        if len(set(biases.values())) == 1:
            text += f", bias={biases['out']}"
        else:
            text += "".join(f", {name}_bias={value}" for name, value in biases.items())
        if self.rope_theta is not None:
            text += f", rope_theta={self.rope_theta}, rope_dims={self.rope_dims}"
        return text
