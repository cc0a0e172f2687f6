"""instance_norm2d@1 (alias instance_norm): per-example, per-channel normalization over H and W."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator


def _relation(s) -> None:
    """One spatial element has no variance: H * W must exceed 1."""
    _, _, height, width = s.shape("x")
    if height is not None and width is not None and height * width == 1:
        s.error(
            "E_CONSTRAINT",
            "instance_norm of a 1 x 1 spatial extent normalizes a single value per channel; "
            "it needs H * W > 1",
        )


@operator(
    "instance_norm",
    torch=dict(
        signature="nn.InstanceNorm2d(num_features, eps=1e-05, momentum=0.1, affine=False)",
        hint="instance_norm reads the channel count from its input: torch's InstanceNorm2d(64) is "
             "instance_norm() here (instance_norm(num_features=64) checks it); eps= and affine= go "
             "by keyword.",
        names=("instance_norm2d",),
        call="instance_norm()",
    ),
    identity="instance_norm2d",
    summary="Normalize each channel of each example over the spatial axes of [B, C, H, W].",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=_relation,
    shape_text="out has the shape of x; H * W must exceed 1.",
    args={
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance for stability."),
        "affine": Arg(bool, False, positional=False,
                      help="Whether to learn a per-channel scale (weight) and shift (bias); off by default, "
                           "as in torch.nn.InstanceNorm2d."),
        "num_features": Arg(int, min=1, inferable=True, dim="C", positional=False,
                            help="Channels C; normally inferred from the producer."),
    },
    category="normalization",
    examples=(
        Example("instance_norm()", ("B", 3, 6, 6), ("B", 3, 6, 6), note="No parameters by default."),
        Example("conv(4, kernel_size=3, padding=1)\ninstance_norm(affine=True)\nrelu()", ("B", 3, 8, 8),
                ("B", 4, 8, 8), note="A learned per-channel scale and shift for the 4 inferred channels."),
    ),
    reference=lambda module: (lambda x: F.instance_norm(x, weight=module.weight, bias=module.bias, eps=module.eps)),
)
class InstanceNorm(nn.InstanceNorm2d):
    """Instance normalization (torch.nn.InstanceNorm2d) of a `[B, C, H, W]` tensor.

    Each channel of each example is normalized with the mean and population variance of its
    `H * W` values. There are never running statistics, so train and eval mode compute the
    same thing.

    **affine defaults to False**, exactly as in `torch.nn.InstanceNorm2d`, so the operator is
    parameterless unless asked: a plain `instance_norm()` is the normalization that
    `adaptive_norm` and style-transfer networks build on, where the scale and shift come from
    elsewhere. `affine=True` learns a per-channel `weight` (initialized to 1) and `bias`
    (initialized to 0).

    A `1 x 1` spatial extent would normalize a single value per channel; it is rejected at
    resolution with `E_CONSTRAINT`. `eps > 0` keeps a constant channel finite forward and
    backward.

    **Torch spelling.** torch's `nn.InstanceNorm2d(64)` is `instance_norm()` (or
    `instance_norm(num_features=64)`, which checks the width); a positional value is refused
    with E_ARGUMENT naming that spelling."""

    def __init__(self, *, num_features, eps=1e-5, affine=False) -> None:
        super().__init__(num_features, eps=eps, affine=affine, track_running_stats=False)
