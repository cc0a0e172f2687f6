"""channel_shuffle@1: interleave the channels of [B, C, H, W] across groups (ShuffleNet)."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT


def _relation(s) -> None:
    """The pattern ties every axis of out to x; the channels must split into ``groups`` equal groups."""
    shape = s.shape("x")
    groups = s.args["groups"]
    if shape is not None and shape[1] is not None and shape[1] % groups:
        s.error(
            "E_CONSTRAINT",
            f"channel_shuffle: {shape[1]} channels are not divisible by groups={groups}; use a groups value "
            f"that divides the channel count, or change the channels of the producer to a multiple of {groups}",
        )


def shuffled_order(channels: int, groups: int) -> list[int]:
    """The input channel each output channel reads: output i takes input (i % groups) * (C / groups) + i // groups."""
    per_group = channels // groups
    return [(i % groups) * per_group + i // groups for i in range(channels)]


def _reference(module):
    """The permutation written out as an index gather over the channel axis."""

    def forward(x):
        order = torch.tensor(shuffled_order(x.shape[1], module.groups), device=x.device)
        return x.index_select(1, order)

    return forward


@operator(
    "channel_shuffle",
    torch=dict(signature="nn.ChannelShuffle(groups)"),
    summary="Interleave the channels of [B, C, H, W] across groups, as ShuffleNet does between grouped convolutions.",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=_relation,
    shape_text="out has the shape of x, in both directions; C must be divisible by groups.",
    args={
        "groups": Arg(int, min=1, max=MAX_EXTENT,
                      help="Number of channel groups; C must be divisible by it. Output channel i is input channel "
                           "(i % groups) * (C / groups) + i // groups."),
    },
    category="shape",
    examples=(
        Example("channel_shuffle(2)", ("B", 4, 3, 3), ("B", 4, 3, 3),
                note="Channels [0, 1, 2, 3] become [0, 2, 1, 3]: the two groups are interleaved."),
        Example("conv(kernel_size=1, groups=3)\nchannel_shuffle(3)", ("B", 24, 8, 8), ("B", 12, 8, 8),
                note="The start of a ShuffleNet v1 unit: a grouped 1x1 convolution, then the shuffle; the "
                     "convolution's 12 output channels are inferred back through the shuffle."),
    ),
    reference=_reference,
)
class ChannelShuffle(nn.Module):
    """Channel shuffle (torch.nn.ChannelShuffle; ShuffleNet v1 and v2, torchvision's
    `channel_shuffle`) over `[B, C, H, W]`.

    A grouped convolution only mixes channels within each of its `groups`; stacking two of
    them would keep every group isolated. Shuffling between them lets each group of the next
    convolution read from every group of the previous one: the channels are viewed as a
    `groups x (C / groups)` grid, transposed and flattened again, so output channel `i` is
    input channel `(i % groups) * (C / groups) + i // groups`, e.g. `[0, 1, 2, 3, 4, 5]` with
    `groups=2` becomes `[0, 3, 1, 4, 2, 5]`. Spatial positions and values are untouched; the
    gradient is the inverse permutation. `C` must be divisible by `groups` (E_CONSTRAINT at
    resolution); `groups=1` is the identity. The shape passes through unchanged, so channels
    infer in both directions. No parameters; identical in train and eval mode.

    The node computes the permutation as that reshape and transpose rather than being torch's
    `nn.ChannelShuffle` (the same values): the classic ONNX exporter (`dynamo=False`) has no
    conversion for `aten::channel_shuffle`, and no torch tool keys on that class."""

    def __init__(self, *, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        grid = x.reshape(batch, self.groups, channels // self.groups, height, width)
        return grid.transpose(1, 2).reshape(batch, channels, height, width)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
