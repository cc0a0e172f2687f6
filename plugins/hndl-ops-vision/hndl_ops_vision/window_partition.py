"""window_partition@1: cut a [B, C, H, W] map into (shifted) windows, [B, nW, N, C]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Example, operator

from .windows import effective_shift, partition, validate_shift, window_args, window_relation, windows_along


def _reference(module):
    """The partition written out: pad, roll, then copy window after window, position by position."""

    def forward(x):
        batch, channels, height, width = x.shape
        wh, ww = module.window
        rows, cols = windows_along(height, wh), windows_along(width, ww)
        shift = effective_shift(height, width, module.window, module.shift)
        image = F.pad(x, (0, cols * ww - width, 0, rows * wh - height))
        image = torch.roll(image, shifts=(-shift[0], -shift[1]), dims=(2, 3))
        out = x.new_empty(batch, rows * cols, wh * ww, channels)
        for i in range(rows):
            for j in range(cols):
                for p in range(wh):
                    for q in range(ww):
                        out[:, i * cols + j, p * ww + q, :] = image[:, :, i * wh + p, j * ww + q]
        return out

    return forward


def _relation(s) -> None:
    window_relation(s, "x", "out")


@operator(
    "window_partition",
    summary="Cut a [B, C, H, W] map into non-overlapping (optionally cyclically shifted) windows: [B, nW, N, C].",
    shape="x[B, C, H, W] -> out[B, nW, N, C]",
    relation=_relation,
    validate=validate_shift,
    shape_text="N = window height x window width; nW = ceil(H / wh) x ceil(W / ww) (the map is zero-padded to a "
               "multiple of the window); C is kept. Backward, nW and one known side bound the other side.",
    args=window_args(),
    category="shape",
    examples=(
        Example("window_partition(4)", ("B", 8, 8, 8), ("B", 4, 16, 8),
                note="An 8 x 8 map, 4 x 4 windows: 4 windows of 16 positions, channels last."),
        Example("window_partition(4, 2)", ("B", 8, 6, 6), ("B", 4, 16, 8),
                note="Swin's shifted windows: 6 x 6 is padded to 8 x 8, rolled by -2 on both axes, then cut."),
        Example("window_partition((2, 3))\nwindow_merge((2, 3))", ("B", 3, 4, 6), ("B", 3, 4, 6),
                note="Partition and merge with the same arguments give the input back."),
    ),
    reference=_reference,
)
class WindowPartition(nn.Module):
    """Swin's window partition (Liu et al. 2021) over HNDL's `[B, C, H, W]` layout. The map is
    zero-padded at the bottom and the right to a multiple of the window `(wh, ww)`, rolled
    cyclically by `-shift` (`torch.roll`), and cut into `nW = ceil(H / wh) * ceil(W / ww)`
    windows of `N = wh * ww` positions:

        out[b, i * cols + j, p * ww + q, c] = rolled[b, c, i * wh + p, j * ww + q]

    Windows are numbered row-major (window row `i`, then column `j`, `cols = ceil(W / ww)`)
    and positions inside a window row-major too, torchvision's order. The layout
    `[B, nW, N, C]` stays within rank 4 (§3) and reuses it with another meaning: axis 1
    counts windows, axis 2 the positions of a window, axis 3 the channels (channels last, so a
    window is a `[N, C]` token sequence). It is not an image; `window_merge` with the same
    `window` and `shift` turns it back into `[B, C, H, W]`.

    The shift follows torchvision's rule: along an axis whose padded extent fits in one window
    the shift is 0. `0 <= shift < window` on each axis (E_ARGUMENT otherwise). No parameters,
    no buffers; identical in train and eval mode; the output is a new tensor."""

    def __init__(self, window: tuple[int, int], shift: tuple[int, int] = (0, 0)) -> None:
        super().__init__()
        self.window, self.shift = tuple(window), tuple(shift)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return partition(x, self.window, self.shift)

    def extra_repr(self) -> str:
        return f"window={self.window}, shift={self.shift}"
