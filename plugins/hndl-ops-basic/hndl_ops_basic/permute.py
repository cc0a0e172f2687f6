"""permute@1: reorder the non-batch axes."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .axes import RANKS, gather_axes


def _order(dims: tuple) -> tuple[int, ...]:
    """The complete torch order, batch first, for the written non-batch ``dims``."""
    rank = len(dims) + 1
    return (0, *(dim % rank for dim in dims))


def _validate(args) -> None:
    dims = args["dims"]
    rank = len(dims) + 1
    if 0 in dims:
        written = ", ".join(map(str, dims))
        rest = ", ".join(str(dim) for dim in dims if dim != 0)
        raise HNDLError(
            "E_ARGUMENT",
            f"permute({written}) names the batch axis 0; permute lists only the non-batch axes, "
            "in their new order, and batch always stays first",
            field="dims",
            remedies=(f"Drop the 0: write permute({rest})." if dims[0] == 0 and rest else
                      "List each non-batch axis once, e.g. permute(2, 3, 1) for [B, C, H, W] -> [B, H, W, C].",),
        )
    if rank not in RANKS:
        raise HNDLError(
            "E_ARGUMENT",
            f"permute takes 1 to {RANKS[-1] - 1} axes (one per non-batch axis of a rank-2 to rank-4 tensor), "
            f"got {len(dims)}",
            field="dims",
            remedies=("List each non-batch axis once, e.g. permute(2, 1) for [B, T, D] -> [B, D, T].",),
        )
    if any(not -rank <= dim < rank for dim in dims) or -rank in dims or sorted(_order(dims)) != list(range(rank)):
        raise HNDLError(
            "E_ARGUMENT",
            f"permute{tuple(dims)!r} is not a permutation of the non-batch axes 1..{rank - 1} of a rank-{rank} "
            "tensor (each must appear exactly once; negative values count from the end)",
            field="dims",
            remedies=(f"List every axis from 1 to {rank - 1} exactly once, in the order the output takes them.",),
        )


def _relation(s) -> None:
    order = _order(s.args["dims"])
    s.rank("x", len(order))
    s.rank("out", len(order))
    gather_axes(s, "out", "x", order)


@operator(
    "permute",
    torch=TorchSpelling(signature="torch.permute(input, dims)"),
    summary="Reorder the non-batch axes of each example, e.g. [B, C, H, W] -> [B, H, W, C].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    positional_rest="dims",
    shape_text="rank = len(dims) + 1; out[i] = x[dims[i - 1]] for every non-batch axis i; both directions.",
    args={
        "dims": Arg("ints", help="For each non-batch output axis in turn, the input axis it takes, numbered on "
                                 "the whole shape (1 is the first axis after batch; negative counts from the end). "
                                 "List only the non-batch axes: batch stays first and is never written, so a "
                                 "torch-style full order starting with 0 is rejected."),
    },
    category="shape",
    examples=(
        Example("reshape(8, 16)\npermute(2, 1)\nlayer_norm()", ("B", 8, 4, 4), ("B", 16, 8),
                note="Pixels as tokens: [B, C, H, W] -> [B, C, H*W] -> [B, H*W, C], each normalized over its "
                     "C channels; permute's two entries fix the reshape's rank."),
        Example("permute(2, 3, 1)", ("B", 3, 4, 5), ("B", 4, 5, 3),
                note="Channels last: [B, C, H, W] -> [B, H, W, C], torch's x.permute(0, 2, 3, 1)."),
        Example("permute(2, 1)\nlinear()", ("B", 6, 16), ("B", 16, 3),
                note="Token mixing on [B, T, D]; the linear's in_features is T = 6."),
    ),
    reference=lambda module: (lambda x: torch.permute(x, (0, *(dim % x.dim() for dim in module.dims)))),
)
class Permute(nn.Module):
    """Reorders the non-batch axes: output axis `i` (for `i >= 1`) is input axis `dims[i - 1]`.
    Only the non-batch axes are written, numbered on the whole shape as elsewhere in HNDL, so
    `permute(2, 3, 1)` turns `[B, C, H, W]` into `[B, H, W, C]` (torch's `x.permute(0, 2, 3, 1)`)
    and `permute(3, 1, 2)` turns it back. The number of entries fixes the rank (two entries:
    rank 3; three: rank 4). Batch stays on axis 0 and is never written: a torch-style full
    order with a 0, a repeated or missing axis, or an entry beyond the rank fails with
    E_ARGUMENT before resolution. Negative entries count from the end (`permute(-1, 1)` is
    `permute(2, 1)`) and are kept as written in the plan. The rank and every extent infer in
    both directions. The result is a view of the input (nothing is copied or modified); no
    parameters, identical in train and eval mode."""

    def __init__(self, dims: tuple) -> None:
        super().__init__()
        self.dims = tuple(dims)
        self.order = _order(self.dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.order)

    def extra_repr(self) -> str:
        return f"dims={self.dims}"
