"""group_norm@1: per-example normalization over groups of channels and the spatial axes."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT


def _relation(s) -> None:
    """The channels must divide evenly into num_groups, and a group must hold more than one value.

    A group of one value, ``C == num_groups`` on a 1 x 1 spatial extent, has no variance: torch
    refuses it at batch 1 and normalizes it to zero at any other batch, so it is never useful.
    """
    groups = s.args["num_groups"]
    _, channels, height, width = s.shape("x")
    if channels is not None and channels % groups:
        s.error(
            "E_CONSTRAINT",
            f"group_norm: {channels} channels are not divisible by num_groups={groups}",
        )
    known = channels is not None and height is not None and width is not None
    if known and channels // groups * height * width == 1:
        s.error(
            "E_CONSTRAINT",
            f"group_norm(num_groups={groups}) of {channels} channels on a 1 x 1 spatial extent normalizes a single "
            "value per group; it needs (C / num_groups) * H * W > 1: use fewer groups than channels, "
            "normalize before the spatial extent shrinks to 1 x 1, or use layer_norm on the flattened features",
        )


@operator(
    "group_norm",
    torch=dict(
        signature="nn.GroupNorm(num_groups, num_channels, eps=1e-05, affine=True)",
        hint="group_norm reads the channel count from its input: torch's GroupNorm(32, 64) is "
             "group_norm(32) here (group_norm(32, num_channels=64) checks it); eps= and affine= go "
             "by keyword.",
        names=("groupnorm",),
        call="group_norm(num_groups)",
    ),
    summary="Normalize each example over groups of channels and the spatial axes of [B, C, H, W].",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=_relation,
    shape_text="out has the shape of x; C must be a multiple of num_groups.",
    args={
        "num_groups": Arg(int, min=1, max=MAX_EXTENT,
                          help="Number of channel groups G; the channels C must divide by it."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance for stability."),
        "affine": Arg(bool, True, positional=False,
                      help="Whether to learn a per-channel scale (weight) and shift (bias)."),
        "num_channels": Arg(int, min=1, inferable=True, dim="C", positional=False,
                            help="Channels C; normally inferred from the producer."),
    },
    category="normalization",
    examples=(
        Example("group_norm(4)", ("B", 8, 5, 5), ("B", 8, 5, 5), note="Two channels per group."),
        Example("conv(6, kernel_size=3)\ngroup_norm(3, affine=False)", ("B", 2, 7, 7), ("B", 6, 5, 5),
                note="num_channels 6 is inferred from the convolution."),
    ),
    reference=lambda module: (lambda x: F.group_norm(x, module.num_groups, module.weight, module.bias, module.eps)),
)
class GroupNorm(nn.GroupNorm):
    """Group normalization (torch.nn.GroupNorm) of a `[B, C, H, W]` tensor.

    The `C` channels are split into `num_groups` consecutive groups of `C / num_groups`; each
    example's group is normalized with the mean and population variance of its
    `(C / num_groups) * H * W` values. `affine=True` (the default) then applies a learned
    per-channel `weight` (initialized to 1) and `bias` (initialized to 0). There are no
    running statistics: train and eval mode compute the same thing, and the result of one
    example never depends on another. `num_groups=1` normalizes over all channels at once
    (a layer norm over `[C, H, W]`); `num_groups=C` normalizes each channel separately.

    A channel count that `num_groups` does not divide is a contradiction (`E_CONSTRAINT`) at
    resolution, whether it comes from the producer, the output contract or an explicit
    `num_channels`. So is a group of a single value (`num_groups = C` on a `1 x 1` spatial
    extent), as for `instance_norm`: it has no variance, torch refuses it at batch 1, and at
    any other batch it would erase the input. `eps > 0` keeps a constant group finite forward
    and backward.

    **Torch spelling.** torch's `nn.GroupNorm(32, 64)` is `group_norm(32)` (or
    `group_norm(32, num_channels=64)`, which checks the width); a second positional value is
    refused with E_ARGUMENT naming that spelling."""

    def __init__(self, *, num_groups, num_channels, eps=1e-5, affine=True) -> None:
        super().__init__(num_groups, num_channels, eps=eps, affine=affine)
