"""mean@1: the mean over one non-batch axis."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .axes import reduced_axis, reject_batch


def _validate(args) -> None:
    reject_batch("mean", args, "dim")


def _relation(s) -> None:
    reduced_axis(s, "mean", s.args["keepdim"])


@operator(
    "mean",
    torch=TorchSpelling(signature="torch.mean(input, dim, keepdim=False)"),
    summary="Mean over one non-batch axis, e.g. token pooling [B, T, D] -> [B, D].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="out is x without axis dim (keepdim=False) or with it as 1 (keepdim=True); the other axes "
               "infer both ways, the reduced extent only from x.",
    args={
        "dim": Arg(int, help="The axis to average over, counted on the input shape: 1 <= dim < rank, or "
                             "negative from the end. 0 and -rank are the batch axis and rejected."),
        "keepdim": Arg(bool, False, help="Keep the reduced axis as extent 1 instead of removing it."),
    },
    category="reduction",
    examples=(
        Example("linear(16)\nmean(1)\nlinear()", ("B", 6, 8), ("B", 3),
                note="Mean pooling over the tokens of [B, T, D] before a classifier head."),
        Example("mean(-1)", ("B", 4, 9), ("B", 4), note="Global average pooling of [B, C, L]."),
        Example("mean(2, keepdim=True)", ("B", 5, 7), ("B", 5, 1), note="The reduced axis kept as extent 1."),
    ),
    reference=lambda module: (lambda x: x.sum(dim=module.dim, keepdim=module.keepdim) / x.shape[module.dim]),
)
class Mean(nn.Module):
    """The arithmetic mean over axis `dim` of every example: `[B, T, D]` with `dim=1` pools the
    tokens into `[B, D]`; `[B, C, L]` with `dim=-1` is global average pooling into `[B, C]`.
    With `keepdim=True` the axis stays as extent 1. `dim` is counted on the input (negative from
    the end) and kept as written in the plan. The batch axis is never reduced: `dim=0` is
    E_ARGUMENT before resolution and `-rank` once the rank is known; an axis beyond the rank,
    or a result below rank 2 (`mean(1)` of `[B, F]`), is E_CONSTRAINT. The rank and every other
    extent infer in both directions; the reduced extent comes only from the input. Every
    position gets gradient `1 / x[dim]`. No parameters, identical in train and eval mode."""

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        super().__init__()
        self.dim = dim
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, keepdim={self.keepdim}"
