"""transformer_block@3: one transformer layer (attention, then feed-forward), pre- or post-norm, with
LayerNorm or RMSNorm, grouped/rotary attention and a plain or gated feed-forward network."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .attention import ARGS as ATTENTION_ARGS
from .attention import SELF_SHAPE, Attention, attention_relation, check_attention_args
from .feed_forward import ACTIVATION_HELP, ACTIVATIONS, FeedForward, hidden_width

NORM_PLACEMENTS = ("pre", "post")
NORMALIZATIONS = ("layer_norm", "rms_norm")


def _layer_norm(x, norm):
    """Written-out layer normalization over the last axis with population variance."""
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def _rms_norm(x, norm):
    """Written-out RMS normalization over the last axis (no mean subtracted, no bias)."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + norm.eps) * norm.weight


def _reference(module):
    attend = spec_of(Attention).reference(module.attention)
    expand = spec_of(FeedForward).reference(module.feed_forward)
    normalize = _rms_norm if isinstance(module.norm1, nn.RMSNorm) else _layer_norm

    def forward(x, attn_bias=None, rope=None):
        if module.norm == "post":
            x = normalize(x + attend(x, attn_bias, rope), module.norm1)
            return normalize(x + expand(x), module.norm2)
        x = x + attend(normalize(x, module.norm1), attn_bias, rope)
        return x + expand(normalize(x, module.norm2))

    return forward


def _check_norm(norm: str, normalization: str = "layer_norm") -> str:
    if norm not in NORM_PLACEMENTS:
        raise HNDLError("E_ARGUMENT", f"norm must be 'pre' or 'post', not {norm!r}", field="norm",
                        remedies=("Give norm='pre' (GPT-2, ViT) or norm='post' (BERT, the original transformer).",))
    if normalization not in NORMALIZATIONS:
        raise HNDLError("E_ARGUMENT", f"normalization must be 'layer_norm' or 'rms_norm', not {normalization!r}",
                        field="normalization",
                        remedies=("Give normalization='layer_norm' (GPT-2, BERT, ViT) or 'rms_norm' (LLaMA, T5).",))
    return norm


def _attention_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """The block's arguments as its attention sees them (attention_bias in place of bias)."""
    names = ("heads", "kv_heads", "head_dim", "causal", "scale", "query_bias", "key_bias", "value_bias", "out_bias",
             "qkv", "rope_theta", "rope_dims")
    out = {name: args.get(name) for name in names}
    out["causal"] = bool(out["causal"])
    out["qkv"] = out["qkv"] or "fused"
    out["bias"] = args["bias"] if args.get("attention_bias") is None else args["attention_bias"]
    return out


def _validate(args) -> None:
    check_attention_args(_attention_args(args))
    hidden_width(1, args.get("expansion"), args.get("hidden"))


def _pick(*names: str) -> dict[str, Arg]:
    return {name: ATTENTION_ARGS[name] for name in names}


@operator(
    "transformer_block",
    torch=TorchSpelling(
        signature="nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1, "
                  "activation=relu)",
        hint="transformer_block reads the width from its input: torch's "
             "TransformerEncoderLayer(512, 8, 2048) is transformer_block(8, hidden=2048) here.",
        keywords={
            "approximate": "transformer_block spells torch's gelu(approximate='tanh') as activation='gelu_tanh': "
                "write transformer_block(..., activation='gelu_tanh').",
        },
    ),
    version=3,
    summary="Transformer layer: attention then feed_forward, each in a residual with a layer_norm or rms_norm "
            "before (pre-norm) or after (post-norm) it.",
    shape=SELF_SHAPE,
    relation=attention_relation,
    validate=_validate,
    shape_text="x and out are [B, T, D]; D must be divisible by heads unless head_dim is given; the optional "
               "attn_bias [B, heads, T, T] is added to the attention scores; the optional rope [B, 2, T, R] is a "
               "rotary_embedding table.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT,
                     help="Number of attention (query) heads; the width D must be divisible by it unless head_dim "
                          "is given."),
        **_pick("kv_heads", "head_dim"),
        "causal": Arg(bool, False, positional=False,
                      help="Mask the future in the attention: position t attends only to positions 0..t "
                           "(GPT-2 and other decoders)."),
        **_pick("scale", "rope_theta", "rope_dims", "qkv"),
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT, positional=False,
                         help="Feed-forward hidden width as a multiple of D (expansion * D units), unless hidden "
                              "is given (then leave expansion at its default)."),
        "hidden": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                      help="Explicit feed-forward hidden width (LLaMA's intermediate_size, T5's d_ff), instead of "
                           "expansion."),
        "gated": Arg(bool, False, positional=False,
                     help="Gated feed-forward network down_proj(activation(gate_proj(x)) * up_proj(x)): SwiGLU "
                          "(LLaMA) with 'silu', GeGLU (T5 gated-gelu) with 'gelu_tanh'."),
        "activation": Arg(str, "gelu", choices=tuple(ACTIVATIONS), positional=False,
                          help="Feed-forward activation. " + ACTIVATION_HELP),
        "norm": Arg(str, "pre", choices=NORM_PLACEMENTS, positional=False,
                    help="Where the normalizations sit: 'pre' normalizes each branch's input "
                         "(x + f(norm(x)), GPT-2, ViT, LLaMA, T5); 'post' normalizes after each residual sum "
                         "(norm(x + f(x)), BERT and the original transformer)."),
        "normalization": Arg(str, "layer_norm", choices=NORMALIZATIONS, positional=False,
                             help="Which normalization: 'layer_norm' (mean and variance, learned scale and bias; "
                                  "GPT-2, BERT, ViT) or 'rms_norm' (root mean square, learned scale only; LLaMA, "
                                  "T5)."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance (or mean square) in both normalizations for stability (GPT-2 "
                        "1e-5, ViT and LLaMA 1e-6, BERT 1e-12)."),
        "bias": Arg(bool, True, positional=False,
                    help="Whether the attention and feed-forward linear layers learn additive biases; "
                         "attention_bias and mlp_bias override it for one of the two."),
        "attention_bias": Arg(bool, None, positional=False,
                              help="Whether the attention's query/key/value and output projections learn "
                                   "biases; omitted, bias decides. The four per-projection flags override it."),
        "mlp_bias": Arg(bool, None, positional=False,
                        help="Whether the feed-forward network's linear layers learn biases; omitted, "
                             "bias decides."),
        **_pick("query_bias", "key_bias", "value_bias", "out_bias"),
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
        Example("transformer_block(4, kv_heads=2, causal=True, rope_theta=10000.0, qkv='separate', bias=False,\n"
                "                  normalization='rms_norm', eps=1e-6, hidden=172, gated=True, activation='silu')",
                ("B", 12, 64), ("B", 12, 64),
                note="A LLaMA decoder layer (LlamaDecoderLayer): grouped-query rotary attention, RMSNorm, SwiGLU."),
        Example("r = rotary_embedding(x)\n"
                "h = transformer_block(x, 4, kv_heads=2, causal=True, qkv='separate', bias=False, "
                "normalization='rms_norm', gated=True, activation='silu', rope=r)\n"
                "transformer_block(h, 4, kv_heads=2, causal=True, qkv='separate', bias=False, "
                "normalization='rms_norm', gated=True, activation='silu', rope=r)",
                ("B", 10, 32), ("B", 10, 32),
                note="Two LLaMA-style layers sharing one rotary table on their rope ports (R = 8, the head width, "
                     "inferred from the blocks)."),
        Example("b = relative_position_bias(x, 4)\n"
                "h = transformer_block(x, 4, head_dim=8, scale=1.0, qkv='separate', bias=False, "
                "normalization='rms_norm', eps=1e-6, hidden=64, activation='relu', attn_bias=b)\n"
                "transformer_block(h, 4, head_dim=8, scale=1.0, qkv='separate', bias=False, "
                "normalization='rms_norm', eps=1e-6, hidden=64, activation='relu', attn_bias=b)",
                ("B", 6, 32), ("B", 6, 32),
                note="Two T5 encoder layers sharing one relative position bias on their attn_bias ports."),
        Example("transformer_block(4, activation='quick_gelu')", ("B", 7, 32), ("B", 7, 32),
                note="A CLIP encoder layer (CLIPEncoderLayer, hidden_act='quick_gelu')."),
    ),
    reference=_reference,
)
class TransformerBlock(nn.Module):
    """One transformer layer on a `[B, T, D]` sequence. Pre-normalization (`norm="pre"`,
    the default; GPT-2, ViT, LLaMA, T5):

        h   = x + attention(norm1(x))
        out = h + feed_forward(norm2(h))

    post-normalization (`norm="post"`; BERT and the original transformer):

        h   = norm1(x + attention(x))
        out = norm2(h + feed_forward(h))

    * `norm1` and `norm2` are `torch.nn.LayerNorm(D, eps)` with learned scale and bias
      (population variance over the last axis) or, with `normalization="rms_norm"`,
      `torch.nn.RMSNorm(D, eps)` with a learned scale only (LLaMA's `LlamaRMSNorm`, T5's
      `T5LayerNorm`).
    * `attention` is the module of `attention@2` with the block's `heads`, `kv_heads`,
      `head_dim`, `causal`, `scale`, `qkv`, `rope_theta`, `rope_dims` and biases; the
      block's optional `attn_bias` and `rope` ports go to it (a relative position bias shared
      by a stack of T5 layers, a rotary table computed once for a stack of LLaMA layers).
    * `feed_forward` is the module of `feed_forward@3` (`expansion` or `hidden`, `gated`,
      `activation`, and the MLP bias).
    * **Biases.** `bias` sets both the attention and the feed-forward biases; `attention_bias`
      or `mlp_bias`, when given, decide for their part alone, and `query_bias`, `key_bias`,
      `value_bias`, `out_bias` for one attention projection.
    * **Activation.** The same choices as `feed_forward`; the tanh GELU is `activation="gelu_tanh"`
      in the plan, and a call may write torch's `approximate="tanh"` instead (it binds
      `activation="gelu_tanh"`), as the `gelu` operator is `gelu(approximate="tanh")`.
    * **Real models.** GPT-2 is `transformer_block(heads, causal=True, activation="gelu_tanh")`
      (its `Conv1D` weights are the transposes of ours and `c_attn` holds query, key and value
      side by side); a ViT layer is `transformer_block(heads, eps=1e-6)`; a BERT layer is
      `transformer_block(heads, norm="post", eps=1e-12)` (its separate query, key and value
      weights concatenate into `in_proj_weight`, or map one to one with `qkv="separate"`);
      a LLaMA layer is `transformer_block(heads, kv_heads=..., causal=True, rope_theta=...,
      qkv="separate", bias=False, normalization="rms_norm", eps=..., hidden=...,
      gated=True, activation="silu")`; a T5 encoder layer is `transformer_block(heads,
      head_dim=d_kv, scale=1.0, qkv="separate", bias=False, normalization="rms_norm",
      eps=1e-6, hidden=d_ff, activation="relu")` taking `relative_position_bias`'s output on
      its `attn_bias` port. Dropout, LayerScale and stochastic depth are not part of the
      block; in eval mode those models compute exactly this.
    * **Versions.** Version 3 added the attention's new arguments and ports, `normalization`,
      and the feed-forward's `hidden`, `gated` and `"quick_gelu"`; version 2 added `activation`, `norm`,
      `attention_bias` and `mlp_bias`. With the defaults each version computes exactly what
      the previous one computed, with the same parameters. Plans saved with
      `transformer_block@1` or `@2` still restore (through `transformer_block_v1` and
      `transformer_block_v2`).

    The whole layer is one graph node with one module; its parts are submodules, not
    separate nodes. There is no dropout and no randomness in forward, and no final
    normalization: follow a stack of pre-norm blocks with a separate `layer_norm` or
    `rms_norm` where the architecture calls for one.
    """

    def __init__(
        self,
        *,
        heads: int,
        kv_heads: Optional[int] = None,
        head_dim: Optional[int] = None,
        causal: bool = False,
        scale: Optional[float] = None,
        rope_theta: Optional[float] = None,
        rope_dims: Optional[int] = None,
        qkv: str = "fused",
        expansion: int = 4,
        hidden: Optional[int] = None,
        gated: bool = False,
        activation: str = "gelu",
        norm: str = "pre",
        normalization: str = "layer_norm",
        eps: float = 1e-5,
        bias: bool = True,
        attention_bias: Optional[bool] = None,
        mlp_bias: Optional[bool] = None,
        query_bias: Optional[bool] = None,
        key_bias: Optional[bool] = None,
        value_bias: Optional[bool] = None,
        out_bias: Optional[bool] = None,
        D: int,
    ) -> None:
        super().__init__()
        self.norm = _check_norm(norm, normalization)
        self.normalization = normalization
        Norm = nn.RMSNorm if normalization == "rms_norm" else nn.LayerNorm
        self.norm1 = Norm(D, eps=eps)
        self.attention = Attention(
            heads=heads, kv_heads=kv_heads, head_dim=head_dim, causal=causal, scale=scale,
            bias=bias if attention_bias is None else attention_bias, query_bias=query_bias, key_bias=key_bias,
            value_bias=value_bias, out_bias=out_bias, qkv=qkv, rope_theta=rope_theta, rope_dims=rope_dims, D=D)
        self.norm2 = Norm(D, eps=eps)
        self.feed_forward = FeedForward(expansion=expansion, hidden=hidden, gated=gated, activation=activation,
                                        bias=bias if mlp_bias is None else mlp_bias, D=D)

    def forward(self, x: torch.Tensor, attn_bias: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.norm == "post":
            x = self.norm1(x + self.attention(x, attn_bias, rope))
            return self.norm2(x + self.feed_forward(x))
        x = x + self.attention(self.norm1(x), attn_bias, rope)
        return x + self.feed_forward(self.norm2(x))

    def extra_repr(self) -> str:
        return f"norm={self.norm!r}, normalization={self.normalization!r}"
