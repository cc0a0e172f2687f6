"""unsqueeze@1: insert a size-1 axis after the batch axis."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .axes import assert_ranks, axis_index, gather_axes, reject_batch, related_ranks


def _validate(args) -> None:
    reject_batch("unsqueeze", args, "dim")


def _relation(s) -> None:
    rank = related_ranks(s, "unsqueeze", "x", "out", 1)
    if rank is None:
        return
    inserted = axis_index("unsqueeze", "dim", s.args["dim"], rank + 1)
    assert_ranks(s, "x", "out", rank, 1)
    s.axis("out", inserted, 1)
    gather_axes(s, "out", "x", [axis if axis < inserted else axis - 1 if axis > inserted else None
                                for axis in range(rank + 1)])


@operator(
    "unsqueeze",
    torch=TorchSpelling(signature="torch.unsqueeze(input, dim)"),
    summary="Insert a new axis of extent 1 at a non-batch position, e.g. [B, D] -> [B, 1, D].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="out has rank(x) + 1 with out[dim] = 1 and the axes of x around it; both directions.",
    args={
        "dim": Arg(int, help="Where the new axis goes, counted on the output shape as in torch.unsqueeze: "
                             "1 <= dim < rank(out), or negative from the end (-1 appends a last axis). "
                             "0 and -rank(out) would put it before the batch and are rejected."),
    },
    category="shape",
    examples=(
        Example("unsqueeze(1)", ("B", 16), ("B", 1, 16), note="One feature vector as a length-1 sequence."),
        Example("linear()\nunsqueeze(-1)", ("B", 8), ("B", 3, 1),
                note="A trailing channel axis; the linear width 3 comes from the output contract."),
    ),
    reference=lambda module: (lambda x: x.unsqueeze(module.dim)),
)
class Unsqueeze(nn.Module):
    """Inserts an axis of extent 1 at position `dim` of the output, moving the axes from `dim`
    on one place to the right: `[B, D]` with `dim=1` becomes `[B, 1, D]`, with `dim=-1` (or 2)
    `[B, D, 1]`. `dim` is counted on the output, as in `torch.unsqueeze`, and is kept as written
    in the plan. Nothing goes before the batch axis: `dim=0` is E_ARGUMENT before resolution and
    `-rank(out)` E_ARGUMENT once the rank is known; a position beyond the output rank, or an
    output above rank 4, is E_CONSTRAINT. The rank and every extent infer in both directions.
    The result is a view of the input; no parameters, identical in train and eval mode."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
