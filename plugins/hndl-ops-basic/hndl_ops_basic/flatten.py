"""flatten@1: all non-batch axes into one."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator


def _relation(s) -> None:
    s.product("x", "out")


@operator(
    "flatten",
    summary="Flatten all non-batch axes of each example into one feature axis.",
    shape="x[B, ...] -> out[B, F]",
    relation=_relation,
    shape_text="out = [B, prod(x[1:])].",
    category="shape",
    examples=(Example("flatten()", ("B", 3, 4, 4), ("B", 48)),),
    reference=lambda module: (lambda x: torch.reshape(x, (x.shape[0], -1))),
)
class Flatten(nn.Module):
    """Combines every non-batch dimension into a single feature axis, giving [B, F]. The
    batch axis is preserved, symbolic or not."""

    def forward(self, x):
        return x.flatten(1)
