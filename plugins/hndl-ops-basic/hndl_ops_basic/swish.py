"""swish@1: the sigmoid linear unit (SiLU), x * sigmoid(x).

Its alias is ``swish``, not ``silu``: the specification's own custom-operator example (§8) registers
``silu`` as ``example.silu@1`` on ``Registry.builtins()``, which must keep working, so the built-in
takes SiLU's other name (SPEC.md "First-party catalog choices"). Composite blocks name the same
function ``activation="silu"``.
"""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "swish",
    torch=TorchSpelling(
        signature="nn.SiLU()",
        names=("silu", "sigmoid_linear_unit"),
        call="swish()",
    ),
    summary="Swish / SiLU, x * sigmoid(x), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(
        Example("linear(64)\nswish()\nlinear()", ("B", 32), ("B", 10),
                note="Swish (SiLU) between two layers; the head width comes from the output contract."),
        Example("swish()", ("B", 4, 6, 6), ("B", 4, 6, 6), note="Elementwise on any supported rank."),
    ),
    reference=lambda module: (lambda x: x * torch.sigmoid(x)),
)
class Swish(nn.SiLU):
    """Out-of-place swish, also called SiLU (`torch.nn.SiLU`), `x * sigmoid(x)`: smooth, non-monotone just below
    zero, and unbounded above. Never modifies its input. No parameters, no buffers, identical in
    train and eval mode."""

    def __init__(self) -> None:
        super().__init__(inplace=False)
