"""gelu@1: the Gaussian error linear unit, exact or with the tanh approximation."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "gelu",
    torch=TorchSpelling(
        signature="nn.GELU(approximate='none')",
        names=("gelu_tanh", "gelu_new", "gelu_pytorch_tanh"),
        call='gelu(approximate="tanh")',
    ),
    summary="Gaussian error linear unit, x * Phi(x), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    args={
        "approximate": Arg(str, "none", choices=("none", "tanh"),
                           help='"none" computes x * Phi(x) with the exact Gaussian CDF; "tanh" uses '
                                "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))."),
    },
    category="activation",
    examples=(
        Example("linear(64)\ngelu()\nlinear()", ("B", 32), ("B", 10),
                note="GELU between the hidden layer and the head; the head width comes from the output."),
        Example('gelu("tanh")', ("B", 16, 8), ("B", 16, 8),
                note="The tanh approximation, applied at every position of a sequence."),
    ),
    reference=lambda module: (lambda x: F.gelu(x, approximate=module.approximate)),
)
class GELU(nn.GELU):
    """Out-of-place GELU, `x * Phi(x)` where `Phi` is the standard normal CDF. With
    `approximate="tanh"` it uses the tanh formula of the original GELU paper instead of the
    exact error function; the two differ by less than about 1e-3. The choice is part of the
    plan, never picked automatically. The blocks with an activation choice (`feed_forward`,
    `transformer_block`) record the same function as `activation="gelu_tanh"` and accept torch's
    `approximate="tanh"` in a call too, so the tanh GELU is written the torch way everywhere.
    No parameters, no buffers, identical in train and eval mode."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__(approximate=approximate)
