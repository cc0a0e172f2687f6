"""hardtanh@1: the identity clipped to [min_val, max_val]."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling


def _validate(args) -> None:
    if not args["min_val"] < args["max_val"]:
        raise HNDLError(
            "E_ARGUMENT",
            f"hardtanh needs min_val < max_val, got min_val={args['min_val']} and max_val={args['max_val']}",
            field="max_val",
            remedies=("Give a lower bound strictly below the upper bound, e.g. hardtanh(-1.0, 1.0).",),
        )


@operator(
    "hardtanh",
    torch=TorchSpelling(signature="nn.Hardtanh(min_val=-1.0, max_val=1.0, inplace=False)"),
    summary="Hard tanh: x clipped to [min_val, max_val], applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    validate=_validate,
    args={
        "min_val": Arg(float, -1.0, tensor_value=True,
                       help="Lower clipping bound; must be below max_val and fit the compute dtype (resolution "
                            "refuses magnitudes above 65504 in float16)."),
        "max_val": Arg(float, 1.0, tensor_value=True,
                       help="Upper clipping bound; must be above min_val and fit the compute dtype."),
    },
    category="activation",
    examples=(
        Example("linear(16)\nhardtanh()\nlinear()", ("B", 8), ("B", 4), note="Clips to [-1, 1]."),
        Example("hardtanh(-2.0, 2.0)", ("B", 5, 8), ("B", 5, 8), note="Explicit bounds, at every position."),
    ),
    reference=lambda module: (lambda x: torch.clamp(x, module.min_val, module.max_val)),
)
class Hardtanh(nn.Hardtanh):
    """Out-of-place hard tanh: `min_val` below the range, `max_val` above it and `x` in
    between, a cheap piecewise-linear stand-in for tanh. The gradient is 1 strictly inside the
    range and 0 outside. `min_val < max_val` is checked before resolution (E_ARGUMENT). Never
    modifies its input. No parameters, no buffers, identical in train and eval mode."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0) -> None:
        super().__init__(min_val=min_val, max_val=max_val, inplace=False)
