"""linear@1: an affine map over the last axis."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .feature_axis import feature_axis_only


@operator(
    "linear",
    torch=TorchSpelling(
        signature="nn.Linear(in_features, out_features, bias=True)",
    ),
    summary="Affine map over the last axis, out = x @ weight.T + bias.",
    shape="x[B, ..., D_in] -> out[B, ..., D_out]",
    relation=feature_axis_only,
    shape_text="Rank 2 [B, D_in] or rank 3 [B, T, D_in]; rank 4 is rejected.",
    args={
        "out_features": Arg(int, min=1, inferable=True, dim="D_out",
                            help="Output width. Omit it to infer it from what consumes the result."),
        "bias": Arg(bool, True, positional=False, help="Whether to learn an additive bias."),
        "in_features": Arg(int, min=1, inferable=True, dim="D_in", positional=False,
                           help="Input width; normally inferred from the producer."),
    },
    category="linear",
    examples=(
        Example("linear(64)\nrelu()\nlinear()", ("B", 128), ("B", 10),
                note="The last width comes from the output contract."),
        Example("linear(32)", ("B", 16, 8), ("B", 16, 32), note="Applied at every position of a sequence."),
    ),
    reference=lambda module: (lambda x: F.linear(x, module.weight, module.bias)),
)
class Linear(nn.Linear):
    """Applies a learned affine transformation to the last axis of a `[B, F]` or `[B, T, D]`
    tensor. There is no activation inside and none is accepted as an argument; write it as a
    separate operation. Weight and bias use PyTorch's default initialization."""

    def __init__(self, *, out_features: int, in_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features, bias=bias)
