"""mul@1: elementwise product of two tensors of identical shape."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling

from .joins import same_shape


def _relation(s) -> None:
    same_shape(s, "mul", "To scale every position of a channel, call channel_scale_shift(feature_map, params) with "
                         "the {wide} tensor first{flatten}: it computes feature_map * (1 + scale) + shift from "
                         "params = [scale, shift] of shape [B, 2*C], the declared form of that broadcast.")


@operator(
    "mul",
    torch=TorchSpelling(signature="torch.mul(input, other)"),
    summary="Elementwise product of two tensors of exactly the same shape.",
    shape="x, y -> out",
    relation=_relation,
    shape_text="x, y and out have exactly one shape (the same rank, every axis equal), inferred in every "
               "direction; nothing is broadcast.",
    category="join",
    examples=(
        Example("gate = linear(x, 8)\ng = sigmoid(gate)\nv = linear(x, 8)\nmul(v, g)",
                ("B", 4), ("B", 8), note="A sigmoid gate: both branches read x, the product has width 8."),
    ),
    reference=lambda module: torch.mul,
)
class Mul(nn.Module):
    """Multiplies two tensors whose shapes agree on every axis; nothing is broadcast, so a
    width-1 gate must be widened explicitly. A `[B, C]` (or `[B, C, 1, 1]`) operand against a
    `[B, C, ...]` tensor fails with E_CONSTRAINT whose remedy names `channel_scale_shift`, the
    declared per-channel modulation. Both inputs must be passed explicitly: mul never reads
    current for a missing operand. Out-of-place; no parameters, no buffers."""

    def forward(self, x, y):
        return x * y
