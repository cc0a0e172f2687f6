"""attention@1 (alias attention_v1): multi-head self-attention as version 1 declared it.

Kept so that plans saved before ``attention`` gained grouped key/value heads, rotary positions,
the score-bias port, ``scale``, ``head_dim``, per-projection biases and the ``qkv`` layout
(version 2) still restore, rebuild and load their state dicts. New specifications use ``attention``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .attention import Attention
from .heads import heads_divide_width


@operator(
    "attention_v1",
    identity="attention",
    version=1,
    summary="Version 1 of attention (fused projections, no bias or rotary input), kept so saved attention@1 "
            "plans restore.",
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
        Example("attention_v1(4)", ("B", 16, 64), ("B", 16, 64),
                note="The same layer as attention(4) with its new arguments at their defaults."),
        Example("linear(32)\nattention_v1(heads=2, causal=True)\nlinear()", ("B", 10, 8), ("B", 10, 8),
                note="Causal attention between two position-wise projections."),
    ),
    reference=spec_of(Attention).reference,
)
class AttentionV1(Attention):
    """`attention@1`, frozen: self-attention over `[B, T, D]` with `heads` heads of width
    `D / heads`, one fused input projection `in_proj_weight` `[3D, D]` (and `in_proj_bias`),
    `softmax(Q K^T / sqrt(D / heads)) V` per head (optionally causal) and `out_proj`, in the
    parameter layout of `torch.nn.MultiheadAttention(D, heads, batch_first=True)`.

    This is the declaration `attention` had before version 2 added `kv_heads`, `head_dim`,
    `scale`, per-projection biases, `qkv`, rotary positions and the `attn_bias` and `rope`
    ports. Its arguments, plan records and parameters are exactly version 1's, so a plan saved
    with `attention@1` restores byte for byte, builds this module and loads the state dict it
    was saved with. It computes what `attention` computes with those at their defaults. Write
    `attention` in new specifications; this alias exists for saved plans (which record the
    identity `attention@1`, not the alias).
    """

    def __init__(self, *, heads: int, causal: bool = False, bias: bool = True, D: int) -> None:
        super().__init__(heads=heads, causal=causal, bias=bias, D=D)
