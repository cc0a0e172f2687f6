"""{{ cookiecutter.__identity }}@1: dynamic tanh, a learned squashing over the last axis.

This module is the whole operator: the `@operator` declaration is what the resolver, the
backend, the test harness (`hndl.testing`) and the catalog (`python -m hndl.docs`) read.
Replace the computation with your own, keep the declaration complete (summary, docstring,
category, help on every argument, at least one example, a reference), and raise `version`
whenever the shape rule, the argument schema, the numerics or the parameter layout changes.
"""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator

#: The ranks this operator accepts: [B, D] and [B, T, D]. Its feature axis is the last one.
FEATURE_RANKS = (2, 3)


def feature_axis_only(s) -> None:
    """The relation: reject a rank-4 input instead of treating its last spatial axis as features.

    A relation sees only the node view `s`; it may add facts or fail, never read tensors.
    """
    for port in (*s.inputs, *s.outputs):
        shape = s.shape(port)
        if shape is not None and len(shape) not in FEATURE_RANKS:
            s.error("E_CONSTRAINT", f"{s.spec.alias} acts on the last axis of [B, D] or [B, T, D] tensors, "
                                    f"but port {port!r} has rank {len(shape)}")


def reference(module: "{{ cookiecutter.__class_name }}"):
    """The handwritten equivalent the harness compares every example node against."""
    return lambda x: module.weight * torch.tanh(module.alpha * x) + module.bias


@operator(
    "{{ cookiecutter.operator_alias }}",
    identity="{{ cookiecutter.__identity }}",
    version=1,
    summary="Dynamic tanh over the last axis, weight * tanh(alpha * x) + bias, with a learned scalar alpha.",
    shape="x[B, ..., D] -> out[B, ..., D]",
    relation=feature_axis_only,
    shape_text="Rank 2 [B, D] or rank 3 [B, T, D]; out has the shape of x; D is read from the input.",
    args={
        "alpha_init": Arg(float, 0.5, min=0, exclusive_min=True,
                          help="Initial value of the learned input scale alpha; must be positive."),
    },
    category="normalization",
    examples=(
        Example("{{ cookiecutter.operator_alias }}()", ("B", 32), ("B", 32),
                note="A [B, 32] input: alpha starts at 0.5, weight at ones and bias at zeros."),
        Example("{{ cookiecutter.operator_alias }}(alpha_init=1.0)", ("B", 16, 8), ("B", 16, 8),
                note="Each of the 16 positions is squashed over its 8 features; D = 8 is read from the input."),
    ),
    reference=reference,
)
class {{ cookiecutter.__class_name }}(nn.Module):
    """Dynamic tanh (DyT), an element-wise, normalization-free stand-in for layer_norm on the
    last axis of a `[B, D]` or `[B, T, D]` tensor:

        out = weight * tanh(alpha * x) + bias

    `alpha` is one learned scalar, initialized to `alpha_init`; `weight` (ones) and `bias`
    (zeros) are learned per feature, of shape `[D]`. The width `D` is never an argument: it
    is the input's last extent, read from the producer (or, backward, from whatever fixes the
    output). No statistics are computed, so train and eval mode are identical and nothing is
    random. Rank 4 is rejected with E_CONSTRAINT."""

    def __init__(self, alpha_init: float = 0.5, *, D: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(D))
        self.bias = nn.Parameter(torch.zeros(D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, self.weight, torch.tanh(self.alpha * x))

    def extra_repr(self) -> str:
        return f"D={self.weight.shape[0]}"
