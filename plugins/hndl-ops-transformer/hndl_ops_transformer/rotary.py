"""Rotary position embedding (RoPE) math, shared by ``rotary_embedding``, ``rotary`` and the fused
``attention``: the inverse frequencies, the half-duplicated cos/sin tables and the rotation.

The conventions are those of transformers' ``LlamaRotaryEmbedding`` and ``apply_rotary_pos_emb``
(GPT-NeoX's "rotate half" layout): a rotated width ``R`` (even) pairs dimension ``i`` with
dimension ``i + R/2``, both turned by the angle ``t * inv_freq[i]`` at position ``t``. Tables
are computed in float32, whatever the compute dtype, and cast to it at the end, as transformers
does; only the first ``R`` dimensions of the last axis are rotated (partial rotary, as GPT-NeoX,
Phi or StableLM configure it), the rest pass through unchanged.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

__all__ = ["rotary_frequencies", "rotary_tables", "rotate_half", "apply_rotary", "apply_keeping_float32"]


def apply_keeping_float32(module: nn.Module, name: str, apply: Callable, fn: Callable, recurse: bool) -> nn.Module:
    """``module._apply(fn)`` (given as ``apply``, the parent class's method) that keeps the float32
    buffer ``name`` float32 on the new device: a dtype move such as ``.half()`` or the build's cast to
    the compute dtype would otherwise round the frequencies, and the references keep them float32."""
    kept = module._buffers.get(name)
    result = apply(fn, recurse)
    moved = module._buffers.get(name)
    if kept is not None and moved is not None and moved.dtype != kept.dtype:
        module._buffers[name] = kept.to(device=moved.device)
    return result


def rotary_frequencies(dims: int, theta: float, device: Optional[torch.device] = None) -> torch.Tensor:
    """The ``dims // 2`` inverse frequencies ``1 / theta ** (2i / dims)``, float32.

    ``dims`` is the rotated width ``R`` (even, positive) and ``theta`` the base (``rope_theta``,
    10000 in the RoPE paper and LLaMA 1/2, 500000 in LLaMA 3). Computed exactly as
    transformers' default RoPE initialization computes ``inv_freq``. ``device`` defaults to
    torch's current default device (a ``torch.device(...)`` context applies).
    """
    exponents = torch.arange(0, dims, 2, dtype=torch.float32, device=device) / dims
    return 1.0 / (theta ** exponents)


def rotary_tables(inv_freq: torch.Tensor, length: int,
                  dtype: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` for positions ``0 .. length - 1``, each ``[length, 2 * len(inv_freq)]``.

    Row ``t`` holds ``cos(t * inv_freq)`` (or ``sin``) twice over, ``[f_0 .. f_{R/2-1}, f_0 ..
    f_{R/2-1}]``: the half-duplicated layout that ``apply_rotary`` (and transformers'
    ``apply_rotary_pos_emb``) expects. The angles are computed in float32 on ``inv_freq``'s
    device and the tables cast to ``dtype`` at the end (float32 when ``dtype`` is None).
    """
    positions = torch.arange(length, dtype=torch.float32, device=inv_freq.device)
    angles = positions[:, None] * inv_freq.to(dtype=torch.float32)[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    cos, sin = angles.cos(), angles.sin()
    if dtype is not None:  # a no-op at float32; no comparison, so fx records a traced dtype as it is
        cos, sin = cos.to(dtype), sin.to(dtype)
    return cos, sin


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[-x2, x1]`` for ``x = [x1, x2]`` split in two halves along the last axis."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``R = cos.shape[-1]`` dimensions of ``x``'s last axis; the rest pass through.

    ``out[..., :R] = x[..., :R] * cos + rotate_half(x[..., :R]) * sin`` and ``out[..., R:] =
    x[..., R:]``. ``cos`` and ``sin`` must broadcast against ``x[..., :R]``: ``[T, R]`` for any
    ``x[..., T, E]``, or ``[B, 1, T, R]`` for ``x[B, H, T, E]`` (a ``[B, T, R]`` table gains its
    head axis with ``unsqueeze(1)``, as ``apply_rotary_pos_emb(..., unsqueeze_dim=1)`` does).
    The caller checks that ``R`` is even and at most ``E``. Out of place; differentiable in ``x``
    (and in the tables, should they require gradients) to any order.
    """
    rotated = cos.shape[-1]
    # Under torch.jit.trace (and the classic ONNX exporter) sizes are traced tensors, and under fx proxies:
    # comparing them would be a TracerWarning or a TraceError, so a trace records the general form, which
    # computes the same with an empty tail.
    if isinstance(rotated, int) and not torch.jit.is_tracing() and rotated == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    head, tail = x[..., :rotated], x[..., rotated:]
    return torch.cat((head * cos + rotate_half(head) * sin, tail), dim=-1)
