"""select@1: one position of one non-batch axis, e.g. the class token."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .axes import reduced_axis, reject_batch


def _validate(args) -> None:
    reject_batch("select", args, "dim")


def _relation(s) -> None:
    axis = reduced_axis(s, "select", False)
    if axis is None:
        return
    extent, index = s.shape("x")[axis], s.args["index"]
    if extent is not None and not -extent <= index < extent:
        raise HNDLError(
            "E_CONSTRAINT",
            f"select index={index} is out of range for axis {axis} of extent {extent}; use "
            f"0 <= index < {extent} or -{extent} <= index <= -1",
            field="index",
            remedies=("Pick a position that exists on that axis, or change the extent that reaches select.",),
        )


@operator(
    "select",
    torch=TorchSpelling(signature="torch.select(input, dim, index)"),
    summary="Take one position of one non-batch axis and drop the axis, e.g. the class token [B, T, D] -> [B, D].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="out is x without axis dim; -x[dim] <= index < x[dim]; the other axes infer both ways, the "
               "selected extent only from x.",
    args={
        "dim": Arg(int, help="The axis to index, counted on the input shape: 1 <= dim < rank, or negative from "
                             "the end. 0 and -rank are the batch axis and rejected."),
        "index": Arg(int, help="The position on that axis: 0 is the first, -1 the last."),
    },
    category="shape",
    examples=(
        Example("select(1, 0)\nlinear()", ("B", 5, 8), ("B", 2),
                note="Class-token pooling (BERT, ViT): the first token of [B, T, D] feeds the head."),
        Example("select(-1, -1)", ("B", 4, 6), ("B", 4), note="The last position of the last axis."),
    ),
    reference=lambda module: (lambda x: x.narrow(module.dim, module.index % x.shape[module.dim], 1)
                              .squeeze(module.dim)),
)
class Select(nn.Module):
    """Picks position `index` of axis `dim` of every example and removes that axis, like
    `torch.select`: `select(1, 0)` of `[B, T, D]` is the first (class) token as `[B, D]`, and
    `select(1, -1)` the last token. Both numbers are kept as written in the plan; negative
    values count from the end. The batch axis is never selected: `dim=0` is E_ARGUMENT before
    resolution and `-rank` once the rank is known; an axis beyond the rank, an index outside
    `-x[dim] <= index < x[dim]`, or a result below rank 2 is E_CONSTRAINT. The rank and every
    other extent infer in both directions; the indexed extent comes only from the input. The
    result is a view of the input; the gradient reaches only the selected position. No
    parameters, identical in train and eval mode."""

    def __init__(self, dim: int, index: int) -> None:
        super().__init__()
        self.dim = dim
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.select(self.dim, self.index)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, index={self.index}"
