"""log_softmax@1: the logarithm of the softmax along one explicitly named axis."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .axes import axis_index, reject_batch


def _validate(args) -> None:
    reject_batch("log_softmax", args, "dim")


def _relation(s) -> None:
    shape = s.shape("x")
    if shape is None:
        shape = s.shape("out")
    if shape is not None:
        axis_index("log_softmax", "dim", s.args["dim"], len(shape))


@operator(
    "log_softmax",
    torch=TorchSpelling(signature="nn.LogSoftmax(dim=None)"),
    summary="Log-softmax along one explicitly named non-batch axis: x - log(sum(exp(x))) over dim.",
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
        Example("linear()\nlog_softmax(-1)", ("B", 32), ("B", 10),
                note="Log-probabilities for a negative log-likelihood loss; the logits width comes from the output."),
        Example("log_softmax(dim=1)", ("B", 4, 6), ("B", 4, 6),
                note="Normalizes over the T axis of a [B, T, D] tensor, separately for every feature."),
    ),
    reference=lambda module: (lambda x: x - torch.logsumexp(x, dim=module.dim, keepdim=True)),
)
class LogSoftmax(nn.LogSoftmax):
    """Computes `log(softmax(x))` along `dim` in one stable step, `x - logsumexp(x)`, so large
    logits neither overflow nor lose the log of tiny probabilities (as `log(softmax(x))` would).
    Every slice along `dim` exponentiates to a distribution that sums to one. The axis is always
    explicit, exactly as for softmax: negative values count from the end and are kept as written
    in the plan; `dim=0` fails with E_ARGUMENT before resolution, an axis equal to the batch
    through a negative index (`-rank`) fails with E_ARGUMENT, and an axis beyond the rank fails
    with E_CONSTRAINT at resolution. Out of place, no parameters, identical in train and eval
    mode."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim=dim)
