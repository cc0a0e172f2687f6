"""add@1: elementwise sum of two tensors of identical shape."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling

from .joins import same_shape


def _relation(s) -> None:
    same_shape(s, "add", "To add a per-channel tensor at every position, call channel_add(feature_map, vector) with "
                         "the {wide} tensor first and the {narrow} one second{flatten}: channel_add is the "
                         "declared form of that broadcast.")


@operator(
    "add",
    torch=TorchSpelling(signature="torch.add(input, other)"),
    summary="Elementwise sum of two tensors of exactly the same shape.",
    shape="x, y -> out",
    relation=_relation,
    shape_text="x, y and out have exactly one shape (the same rank, every axis equal), inferred in every "
               "direction; nothing is broadcast.",
    category="join",
    examples=(Example("a = linear(x, 8)\nb = linear(x, 8)\nadd(a, b)", ("B", 4), ("B", 8)),),
    reference=lambda module: torch.add,
)
class Add(nn.Module):
    """Adds two tensors whose shapes agree on every axis; nothing is broadcast. A `[B, C]` (or
    `[B, C, 1, 1]`) operand against a `[B, C, ...]` tensor fails with E_CONSTRAINT whose remedy
    names `channel_add`, the declared per-channel sum. Both inputs must be passed explicitly:
    add never reads current for a missing operand."""

    def forward(self, x, y):
        return x + y
