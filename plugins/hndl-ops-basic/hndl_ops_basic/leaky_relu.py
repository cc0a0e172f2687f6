"""leaky_relu@1: ReLU with a small slope for negative inputs."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "leaky_relu",
    torch=TorchSpelling(signature="nn.LeakyReLU(negative_slope=0.01, inplace=False)"),
    summary="Leaky rectified linear unit, x if x > 0 else negative_slope * x.",
    shape="x[B, ...] -> out[B, ...]",
    args={"negative_slope": Arg(float, 0.01, min=0, help="Slope applied to negative inputs.")},
    category="activation",
    examples=(Example("leaky_relu(0.2)", ("B", 8), ("B", 8)),),
    reference=lambda module: (lambda x: F.leaky_relu(x, module.negative_slope)),
)
class LeakyReLU(nn.LeakyReLU):
    """Out-of-place leaky ReLU: never modifies its input. No parameters, no buffers."""

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__(negative_slope=negative_slope, inplace=False)
