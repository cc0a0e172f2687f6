"""softmax@1: normalized exponentials along one explicitly named axis."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling


def _validate(args) -> None:
    if args["dim"] == 0:
        raise HNDLError(
            "E_ARGUMENT",
            "softmax dim=0 is the batch axis; softmax never mixes the examples of a batch",
            field="dim",
            remedies=("Name a feature axis, e.g. dim=-1 for the last axis.",),
        )


def _relation(s) -> None:
    shape = s.shape("x")
    if shape is None:
        shape = s.shape("out")
    if shape is None:
        return
    rank, dim = len(shape), s.args["dim"]
    if not -rank <= dim < rank:
        s.error(
            "E_CONSTRAINT",
            f"softmax dim={dim} is out of range for rank {rank}; use 1 <= dim < {rank} or "
            f"-{rank - 1} <= dim <= -1",
        )
    if dim % rank == 0:
        s.error(
            "E_ARGUMENT",
            f"softmax dim={dim} names the batch axis of a rank-{rank} tensor; softmax never mixes "
            "the examples of a batch",
        )


@operator(
    "softmax",
    torch=TorchSpelling(signature="nn.Softmax(dim=None)"),
    summary="Softmax along one explicitly named non-batch axis: exp(x) / sum(exp(x)) over dim.",
    shape="x[B, ...] -> out[B, ...]",
    relation=_relation,
    validate=_validate,
    shape_text="out has the shape of x; dim must name a non-batch axis of that rank (negative counts from the end).",
    args={
        "dim": Arg(int, help="The axis to normalize over. Required, no default: -1 is the last axis; "
                             "0 (and -rank) is the batch axis and is rejected."),
    },
    category="activation",
    examples=(
        Example("linear()\nsoftmax(-1)", ("B", 32), ("B", 10),
                note="Class probabilities; the logits width comes from the output contract."),
        Example("softmax(dim=1)", ("B", 4, 6), ("B", 4, 6),
                note="Normalizes over the T axis of a [B, T, D] tensor, separately for every feature."),
    ),
    reference=lambda module: (lambda x: F.softmax(x, dim=module.dim)),
)
class Softmax(nn.Softmax):
    """Rescales the values along `dim` into a probability distribution: every slice along
    `dim` is non-negative and sums to one. The axis is always explicit (there is no implied
    default, unlike older PyTorch). Negative values count from the end and are kept as
    written in the plan; `dim` must name a non-batch axis of the resolved rank, so `dim=0`
    fails with E_ARGUMENT before resolution, an axis equal to the batch through a negative
    index (`-rank`) fails with E_ARGUMENT, and an axis beyond the rank fails with
    E_CONSTRAINT at resolution. Computed stably (the maximum is subtracted first), out of
    place, no parameters, identical in train and eval mode."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim=dim)
