"""transpose@1: swap two non-batch axes."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .axes import assert_ranks, axis_index, gather_axes, reject_batch, related_ranks


def _validate(args) -> None:
    reject_batch("transpose", args, "dim0", "dim1")


def _relation(s) -> None:
    rank = related_ranks(s, "transpose", "x", "out", 0)
    if rank is None:
        return
    first = axis_index("transpose", "dim0", s.args["dim0"], rank)
    second = axis_index("transpose", "dim1", s.args["dim1"], rank)
    assert_ranks(s, "x", "out", rank, 0)
    order = list(range(rank))
    order[first], order[second] = second, first
    gather_axes(s, "out", "x", order)


@operator(
    "transpose",
    torch=TorchSpelling(signature="torch.transpose(input, dim0, dim1)"),
    summary="Swap two non-batch axes of each example, e.g. [B, T, D] -> [B, D, T].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="out has the rank of x, with out[dim0] = x[dim1], out[dim1] = x[dim0] and every other axis "
               "equal; both directions.",
    args={
        "dim0": Arg(int, help="One axis to swap, counted on the whole shape: 1 <= dim0 < rank, or negative "
                              "from the end (-1 is the last axis). 0 and -rank are the batch axis and rejected."),
        "dim1": Arg(int, help="The other axis to swap, with the same numbering as dim0."),
    },
    category="shape",
    examples=(
        Example("linear()\ntranspose(1, 2)", ("B", 4, 8), ("B", 16, 4),
                note="Token mixing: [B, T, D] -> [B, D, T]; the linear width 16 comes from the output contract."),
        Example("transpose(-1, -3)", ("B", 3, 4, 5), ("B", 5, 4, 3), note="Negative axes count from the end."),
    ),
    reference=lambda module: (lambda x: x.transpose(module.dim0, module.dim1)),
)
class Transpose(nn.Module):
    """Swaps axes `dim0` and `dim1` of every example and keeps the others in place, so a
    `[B, T, D]` sequence becomes `[B, D, T]` for a linear layer that mixes tokens, and back.
    Axes are numbered on the whole shape, batch included, exactly as in `torch.transpose`:
    `transpose(1, 2)` and `transpose(-1, -2)` are the same on rank 3. The batch axis never moves:
    0 fails with E_ARGUMENT before resolution and `-rank` with E_ARGUMENT once the rank is known;
    an axis beyond the rank is E_CONSTRAINT. `transpose(d, d)` is the identity. The rank and
    every extent infer in both directions, from the input to the output and back. The result is
    a view of the input (nothing is copied or modified); no parameters, identical in train and
    eval mode."""

    def __init__(self, dim0: int, dim1: int) -> None:
        super().__init__()
        self.dim0 = dim0
        self.dim1 = dim1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(self.dim0, self.dim1)

    def extra_repr(self) -> str:
        return f"dim0={self.dim0}, dim1={self.dim1}"
