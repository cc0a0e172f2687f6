"""flatten@1: all non-batch axes into one."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator


def _relation(s) -> None:
    s.product("x", "out")


@operator(
    "flatten",
    torch=dict(
        signature="nn.Flatten(start_dim=1, end_dim=-1)",
        hint="flatten always flattens every non-batch axis (torch's Flatten() default): write "
             "flatten().",
    ),
    summary="Flatten all non-batch axes of each example into one feature axis.",
    shape="x[B, ...] -> out[B, F]",
    relation=_relation,
    shape_text="out = [B, prod(x[1:])].",
    category="shape",
    examples=(Example("flatten()", ("B", 3, 4, 4), ("B", 48)),),
    reference=lambda module: (lambda x: torch.reshape(x, (x.shape[0], -1))),
)
class Flatten(nn.Flatten):
    """Combines every non-batch dimension into a single feature axis, giving [B, F]. The
    batch axis is preserved, symbolic or not.

    The built node is torch's own `nn.Flatten()` (`start_dim=1, end_dim=-1`; `type(node) is
    nn.Flatten`), so tools that look layers up by type see the layer a handwritten model has.
    No parameters, no buffers, identical in train and eval mode."""

    def __init__(self) -> None:
        super().__init__(start_dim=1, end_dim=-1)
