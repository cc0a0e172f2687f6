"""relative_position_bias@1: T5's bucketed, learned relative position bias, the additive attention
bias ``[B, H, T, T]`` that ``scaled_dot_product_attention`` (or ``attention``) takes on its bias port.

The bucket function (``t5_bucket`` / ``t5_buckets``) is public: the fused attention reuses it.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = ["t5_bucket", "t5_buckets"]


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
