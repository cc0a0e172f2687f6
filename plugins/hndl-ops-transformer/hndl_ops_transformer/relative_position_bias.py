"""relative_position_bias@1: T5's bucketed, learned relative position bias, the additive attention
bias ``[B, H, T, T]`` that ``scaled_dot_product_attention`` (or ``attention``) takes on its bias port.

The bucket function (``t5_bucket`` / ``t5_buckets``) is public: the fused attention reuses it.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

__all__ = ["t5_bucket", "t5_buckets", "RelativePositionBias"]


def t5_bucket(relative_position: torch.Tensor, buckets: int = 32, max_distance: int = 128,
              bidirectional: bool = True) -> torch.Tensor:
    """T5's bucket (int64, in ``[0, buckets)``) of each relative offset ``key - query``.

    Bidirectional, half of the buckets hold offsets ``> 0`` (keys after the query) and half the
    rest; unidirectional (a causal decoder), every offset ``> 0`` falls in bucket 0 with offset 0.
    Within a half of ``n`` buckets, distances ``0 .. n/2 - 1`` have a bucket each and longer ones
    share logarithmically wider buckets up to ``max_distance``; every distance at or beyond
    ``max_distance`` lands in the last one. Bucket for bucket what transformers'
    ``T5Attention._relative_position_bucket`` returns (which the Mesh TensorFlow code defines).
    Needs ``max_distance`` above the exact range ``n // 2`` (``n = buckets // 2`` when
    bidirectional, else ``buckets``) and ``n // 2 >= 1``; the operator checks both.
    """
    relative_position = relative_position.to(torch.long)
    result = torch.zeros_like(relative_position)
    if bidirectional:
        buckets //= 2
        result = result + (relative_position > 0).to(torch.long) * buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)
    exact = buckets // 2
    # Distances below `exact` take the first branch; clamping them away from log(0) changes no
    # bucket that is used (transformers takes log(0) = -inf there and discards it).
    far = distance.clamp(min=exact).to(torch.float32)
    logarithmic = exact + (torch.log(far / exact) / math.log(max_distance / exact) * (buckets - exact)).to(torch.long)
    logarithmic = torch.clamp(logarithmic, max=buckets - 1)
    return result + torch.where(distance < exact, distance, logarithmic)


def t5_buckets(query_length: int, key_length: int, buckets: int = 32, max_distance: int = 128,
               bidirectional: bool = True, device: Optional[torch.device] = None) -> torch.Tensor:
    """The ``[query_length, key_length]`` int64 table of ``t5_bucket(k - q)`` for query position
    ``q`` and key position ``k``, as ``T5Attention.compute_bias`` builds it (no cache offset)."""
    queries = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
    keys = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
    return t5_bucket(keys - queries, buckets, max_distance, bidirectional)


def _exact_range(buckets: int, bidirectional: bool) -> int:
    """How many distances get a bucket each (per direction)."""
    return (buckets // 2 if bidirectional else buckets) // 2


def _problem(buckets: int, max_distance: int, bidirectional: bool) -> Optional[tuple[str, str, str]]:
    """(field, message, remedy) when T5's bucket function is undefined for these arguments."""
    exact = _exact_range(buckets, bidirectional)
    least = 4 if bidirectional else 2
    if exact < 1:
        return ("buckets", f"relative_position_bias needs buckets >= {least} (bidirectional={bidirectional}), "
                           f"got {buckets}",
                f"Give buckets >= {least} (T5 uses 32).")
    if max_distance <= exact:
        return ("max_distance", f"relative_position_bias gives distances below {exact} a bucket each, so "
                                f"max_distance must exceed {exact}, got {max_distance}",
                f"Give max_distance > {exact} (T5 uses 128 with 32 buckets).")
    return None


def _validate(args) -> None:
    problem = _problem(args["buckets"], args["max_distance"], args["bidirectional"])
    if problem is not None:
        field, message, remedy = problem
        raise HNDLError("E_ARGUMENT", message, field=field, remedies=(remedy,))


def _reference(module):
    """transformers' T5Attention.compute_bias, written out with its own bucket arithmetic."""

    def forward(x):
        batch, length = x.shape[0], x.shape[1]
        context = torch.arange(length, dtype=torch.long, device=x.device)[:, None]
        memory = torch.arange(length, dtype=torch.long, device=x.device)[None, :]
        relative = memory - context
        buckets = module.buckets
        bucket = torch.zeros_like(relative)
        if module.bidirectional:
            buckets //= 2
            bucket = bucket + (relative > 0).long() * buckets
            relative = relative.abs()
        else:
            relative = -torch.min(relative, torch.zeros_like(relative))
        exact = buckets // 2
        large = exact + (torch.log(relative.float().clamp(min=exact) / exact)
                         / math.log(module.max_distance / exact) * (buckets - exact)).long()
        large = torch.min(large, torch.full_like(large, buckets - 1))
        bucket = bucket + torch.where(relative < exact, relative, large)
        values = module.relative_attention_bias.weight[bucket]  # [T, T, H]
        return values.permute(2, 0, 1).unsqueeze(0).expand(batch, -1, -1, -1)

    return forward


@operator(
    "relative_position_bias",
    torch=TorchSpelling(signature="transformers T5Attention.compute_bias(query_length, key_length)"),
    summary="T5's learned, bucketed relative position bias for self-attention over a [B, T, D] sequence: "
            "the additive [B, H, T, T] attention bias.",
    shape="x[B, T, D] -> out[B, H, T, T]",
    validate=_validate,
    shape_text="x is [B, T, D] (T and D are read), out is [B, H, T, T] with H = heads: the bias of query t "
               "for key s on head h.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT, dim="H",
                     help="Number of attention heads H; each learns its own bias per bucket."),
        "buckets": Arg(int, 32, min=1, max=MAX_EXTENT, positional=False,
                       help="Rows of the learned table (T5's relative_attention_num_buckets); at least 4 "
                            "bidirectional, 2 otherwise."),
        "max_distance": Arg(int, 128, min=1, max=MAX_EXTENT, positional=False,
                            help="Distance from which every offset shares the last bucket (T5's "
                                 "relative_attention_max_distance); must exceed the exact range."),
        "bidirectional": Arg(bool, True, positional=False,
                             help="Separate buckets for keys before and after the query (an encoder); False "
                                  "gives every key after the query bucket 0 (a causal decoder)."),
    },
    category="attention",
    examples=(
        Example("bias = relative_position_bias(x, 4)\nq = split_heads(x, 4)\n"
                "out = merge_heads(scaled_dot_product_attention(q, q, q, bias, scale=1.0))",
                ("B", 10, 32), ("B", 10, 32),
                note="T5-style self-attention: the bias enters the unscaled scores of 4 heads."),
        Example("relative_position_bias(2, buckets=8, max_distance=16, bidirectional=False)", ("B", 12, 8),
                ("B", 2, 12, 12), note="A decoder's causal buckets."),
    ),
    reference=_reference,
)
class RelativePositionBias(nn.Module):
    """The relative position bias of T5 (Raffel et al.), which replaces absolute position
    embeddings: every query/key pair `(t, s)` of a `T`-position sequence falls in a bucket of
    its offset `s - t`, and each head learns one scalar per bucket, added to the attention
    scores:

        out[b, h, t, s] = relative_attention_bias.weight[bucket(s - t), h]

    The result feeds the `bias` port of `scaled_dot_product_attention` (T5 attends unscaled:
    `scale=1.0`). T5 computes it in the first layer and shares it with every later layer;
    here that is one `relative_position_bias` node whose output several attention nodes read.

    Rank 4 is read here as `[B, H, T, T]` (batch, heads, queries, keys), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4. The same table serves every example (a batch-expanded view).

    * **Buckets** (`t5_bucket`, bucket for bucket transformers'
      `T5Attention._relative_position_bucket`): bidirectional, half of the `buckets` hold keys
      after the query and half the rest; unidirectional, every key after the query shares
      bucket 0. Within a half of `n` buckets, distances below `n/2` have a bucket each and
      longer ones share logarithmically wider buckets up to `max_distance`, beyond which all
      share the last. The `[T, T]` bucket index is a **non-persistent buffer** computed at
      construction (T5's state dict has no entry for it).
    * **Parameters:** `relative_attention_bias`, an `nn.Embedding(buckets, heads)`, named and
      shaped as in T5 so its weight loads directly; initialized from `N(0, D^-1/2)` as
      transformers initializes it (`D` is read from `x`).
    * Query and key positions are both `0 .. T-1` (self-attention without a cache offset).
      Deterministic; no randomness; identical in train and eval mode.
    """

    def __init__(self, heads: int, buckets: int = 32, max_distance: int = 128, bidirectional: bool = True, *,
                 T: int, D: int) -> None:
        super().__init__()
        problem = _problem(buckets, max_distance, bidirectional)
        if problem is not None:
            field, message, remedy = problem
            raise HNDLError("E_ARGUMENT", message, field=field, remedies=(remedy,))
        self.heads = heads
        self.buckets = buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(buckets, heads)
        nn.init.normal_(self.relative_attention_bias.weight, mean=0.0, std=D ** -0.5)
        self.register_buffer("relative_position_bucket", t5_buckets(T, T, buckets, max_distance, bidirectional),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = F.embedding(self.relative_position_bucket, self.relative_attention_bias.weight)  # [T, T, H]
        return values.permute(2, 0, 1).unsqueeze(0).expand(x.shape[0], -1, -1, -1)

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, buckets={self.buckets}, max_distance={self.max_distance}, "
                f"bidirectional={self.bidirectional}")
