"""window_merge@1: put [B, nW, N, C] windows back into a [B, C, H, W] map (window_partition's inverse)."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT

from .windows import effective_shift, merge, validate_shift, window_args, window_relation, windows_along


def _reference(module):
    """The merge written out: place window after window, position by position, then roll back and crop."""

    def forward(x):
        batch, _, _, channels = x.shape
        height, width = module.height, module.width
        wh, ww = module.window
        rows, cols = windows_along(height, wh), windows_along(width, ww)
        shift = effective_shift(height, width, module.window, module.shift)
        image = x.new_empty(batch, channels, rows * wh, cols * ww)
        for i in range(rows):
            for j in range(cols):
                for p in range(wh):
                    for q in range(ww):
                        image[:, :, i * wh + p, j * ww + q] = x[:, i * cols + j, p * ww + q, :]
        image = torch.roll(image, shifts=shift, dims=(2, 3))
        return image[:, :, :height, :width]

    return forward


def _relation(s) -> None:
    window_relation(s, "out", "x")


@operator(
    "window_merge",
    summary="Put [B, nW, N, C] windows back together into a [B, C, H, W] map, undoing window_partition.",
    shape="x[B, nW, N, C] -> out[B, C, H, W]",
    relation=_relation,
    validate=validate_shift,
    shape_text="N = window height x window width; nW = ceil(H / wh) x ceil(W / ww); C is kept. H and W come from "
               "the output (or height=/width=); from nW and one known side the other is bounded.",
    args={
        **window_args(),
        "height": Arg(int, inferable=True, dim="H", min=1, max=MAX_EXTENT, positional=False,
                      help="The map height H, the output's axis 2. Omitted, it is inferred from the output or a "
                           "consumer (recorded as inferred)."),
        "width": Arg(int, inferable=True, dim="W", min=1, max=MAX_EXTENT, positional=False,
                     help="The map width W, the output's axis 3; inferred like height when omitted."),
    },
    category="shape",
    examples=(
        Example("window_merge(4)", ("B", 4, 16, 8), ("B", 8, 8, 8),
                note="Four 4 x 4 windows of 8 channels back into an 8 x 8 map; H and W come from the output."),
        Example("window_merge(4, 2, height=6, width=6)\nconv(kernel_size=1)", ("B", 4, 16, 8), ("B", 3, 6, 6),
                note="height= and width= state the map when nothing else does; the padding is cropped away."),
        Example("window_partition(3, 1)\nwindow_merge(3, 1)\nconv(kernel_size=1)", ("B", 2, 5, 7),
                ("B", 4, 5, 7), note="The map size is inferred across the pair; the round trip is exact."),
    ),
    reference=_reference,
)
class WindowMerge(nn.Module):
    """The inverse of `window_partition`: `[B, nW, N, C]` windows (axis 1 windows, axis 2 the
    `N = wh * ww` positions of a window, axis 3 channels; see window_partition for the order)
    are laid back into the padded map, which is rolled by `+shift` and cropped to `H x W`:

        rolled[b, c, i * wh + p, j * ww + q] = x[b, i * cols + j, p * ww + q, c]
        out = roll(rolled, +shift)[:, :, :H, :W]

    `H` and `W` are not recoverable from `nW` alone (12 windows tile 3 x 4 and 4 x 3 window
    grids), so they are the output's extents: read from the output contract or a consumer,
    bounded by a known `nW` and one known side, or given as `height=` / `width=` (recorded in
    the plan either way). The shift rule matches window_partition (0 along an axis whose padded
    extent fits in one window), so merging with the partition's arguments restores its input
    exactly. No parameters, no buffers; identical in train and eval mode."""

    def __init__(self, window: tuple[int, int], shift: tuple[int, int] = (0, 0), *, height: int,
                 width: int) -> None:
        super().__init__()
        self.window, self.shift, self.height, self.width = tuple(window), tuple(shift), height, width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return merge(x, self.window, self.shift, self.height, self.width)

    def extra_repr(self) -> str:
        return f"window={self.window}, shift={self.shift}, height={self.height}, width={self.width}"

