"""squeeze@1: remove one non-batch axis of extent 1."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .axes import assert_ranks, axis_index, gather_axes, reject_batch, related_ranks


def _validate(args) -> None:
    reject_batch("squeeze", args, "dim")


def _relation(s) -> None:
    rank = related_ranks(s, "squeeze", "x", "out", -1)
    if rank is None:
        return
    removed = axis_index("squeeze", "dim", s.args["dim"], rank)
    assert_ranks(s, "x", "out", rank, -1)
    extent = s.shape("x")[removed]
    if extent is not None and extent != 1:
        raise HNDLError(
            "E_CONSTRAINT",
            f"squeeze dim={s.args['dim']} removes axis {removed} of x, which has extent {extent}, not 1",
            field="dim",
            remedies=("Squeeze an axis of extent 1, or reduce it with mean()/max(), or pick one position with "
                      "select().",),
        )
    s.axis("x", removed, 1)
    gather_axes(s, "out", "x", [axis if axis < removed else axis + 1 for axis in range(rank - 1)])


@operator(
    "squeeze",
    torch=TorchSpelling(signature="torch.squeeze(input, dim)"),
    summary="Remove one non-batch axis of extent 1, e.g. [B, 1, D] -> [B, D].",
    shape="x -> out",
    relation=_relation,
    validate=_validate,
    shape_text="x[dim] = 1 and out is x without that axis (rank(x) - 1); both directions.",
    args={
        "dim": Arg(int, help="The axis to remove, counted on the input shape: 1 <= dim < rank(x), or negative "
                             "from the end. It must have extent 1; 0 and -rank(x) are the batch axis and "
                             "rejected."),
    },
    category="shape",
    examples=(
        Example("squeeze(1)", ("B", 1, 16), ("B", 16), note="A length-1 sequence back to one feature vector."),
        Example("mean(-1, keepdim=True)\nsqueeze(-1)\nlinear()", ("B", 8, 5), ("B", 10),
                note="Global average pooling of [B, C, L] keeping the axis, then dropping it before a classifier."),
    ),
    reference=lambda module: (lambda x: x.squeeze(module.dim)),
)
class Squeeze(nn.Module):
    """Removes axis `dim` of the input, which must have extent 1: `[B, 1, D]` with `dim=1`
    becomes `[B, D]`. Exactly one named axis is removed, never every size-1 axis, so the result
    does not depend on extents that happen to be 1. `dim` is counted on the input (negative from
    the end) and kept as written in the plan. An axis of another extent is E_CONSTRAINT at
    resolution; the batch axis is never removed (`dim=0` is E_ARGUMENT before resolution,
    `-rank` once the rank is known), and a result below rank 2 is E_CONSTRAINT. The rank and
    every extent infer in both directions, the removed axis being 1. The result is a view of
    the input; no parameters, identical in train and eval mode."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
