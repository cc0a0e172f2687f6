"""max@1: the maximum over one non-batch axis (values only)."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .axes import reduced_axis, reject_batch


def _validate(args) -> None:
    reject_batch("max", args, "dim")


def _relation(s) -> None:
    reduced_axis(s, "max", s.args["keepdim"])


@operator(
    "max",
    torch=TorchSpelling(
        signature="torch.max(input, dim, keepdim=False)",
        unpack="Unlike torch.max(x, dim), which returns values and indices, max returns the values "
               "only.",
    ),
    summary="Maximum over one non-batch axis (values only), e.g. global max pooling [B, C, L] -> [B, C].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="out is x without axis dim (keepdim=False) or with it as 1 (keepdim=True); the other axes "
               "infer both ways, the reduced extent only from x.",
    args={
        "dim": Arg(int, help="The axis to take the maximum over, counted on the input shape: 1 <= dim < rank, "
                             "or negative from the end. 0 and -rank are the batch axis and rejected."),
        "keepdim": Arg(bool, False, help="Keep the reduced axis as extent 1 instead of removing it."),
    },
    category="reduction",
    examples=(
        Example("max(-1)\nlinear()", ("B", 8, 12), ("B", 10),
                note="Global max pooling of [B, C, L] before a classifier head."),
        Example("max(1, keepdim=True)", ("B", 6, 8), ("B", 1, 8), note="Max over the tokens, kept as extent 1."),
    ),
    reference=lambda module: (lambda x: x.max(dim=module.dim, keepdim=module.keepdim).values),
)
class Max(nn.Module):
    """The largest value along axis `dim` of every example: `[B, C, L]` with `dim=-1` is global
    max pooling into `[B, C]`, `[B, T, D]` with `dim=1` max-pools the tokens into `[B, D]`. Only
    the values are returned, never the indices. With `keepdim=True` the axis stays as extent 1.
    `dim` is counted on the input (negative from the end) and kept as written in the plan. The
    batch axis is never reduced: `dim=0` is E_ARGUMENT before resolution and `-rank` once the
    rank is known; an axis beyond the rank, or a result below rank 2, is E_CONSTRAINT. The rank
    and every other extent infer in both directions; the reduced extent comes only from the
    input. Computed with `torch.amax`: the gradient reaches the maximal position, and is split
    evenly between positions that tie for the maximum (deterministic on every device). No
    parameters, identical in train and eval mode."""

    def __init__(self, dim: int, keepdim: bool = False) -> None:
        super().__init__()
        self.dim = dim
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=self.dim, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, keepdim={self.keepdim}"
