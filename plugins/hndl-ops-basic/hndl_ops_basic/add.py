"""add@1: elementwise sum of two tensors of identical shape."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator


@operator(
    "add",
    summary="Elementwise sum of two tensors of exactly the same shape.",
    shape="x[B, ...], y[B, ...] -> out[B, ...]",
    category="join",
    examples=(Example("a = linear(x, 8)\nb = linear(x, 8)\nadd(a, b)", ("B", 4), ("B", 8)),),
    reference=lambda module: torch.add,
)
class Add(nn.Module):
    """Adds two tensors whose shapes agree on every axis; nothing is broadcast. Both inputs
    must be passed explicitly: add never reads current for a missing operand."""

    def forward(self, x, y):
        return x + y
