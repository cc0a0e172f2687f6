"""mul@1: elementwise product of two tensors of identical shape."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator


@operator(
    "mul",
    summary="Elementwise product of two tensors of exactly the same shape.",
    shape="x[B, ...], y[B, ...] -> out[B, ...]",
    category="join",
    examples=(
        Example("gate = linear(x, 8)\ng = sigmoid(gate)\nv = linear(x, 8)\nmul(v, g)",
                ("B", 4), ("B", 8), note="A sigmoid gate: both branches read x, the product has width 8."),
    ),
    reference=lambda module: torch.mul,
)
class Mul(nn.Module):
    """Multiplies two tensors whose shapes agree on every axis; nothing is broadcast, so a
    width-1 gate must be widened explicitly. Both inputs must be passed explicitly: mul never
    reads current for a missing operand. Out-of-place; no parameters, no buffers."""

    def forward(self, x, y):
        return x * y
