"""The window arithmetic the Swin operators share (window_partition, window_merge,
window_attention, swin_block).

Every operator here works on HNDL's image layout `[B, C, H, W]` (§3) and does its
channels-last work inside. A map is cut into non-overlapping windows of `wh x ww` positions
after padding it (zeros, at the bottom and the right) to a multiple of the window and rolling
it cyclically by `-shift`; windows are numbered row-major (window row, then window column) and
the `N = wh * ww` positions inside a window row-major too, exactly as torchvision's
`shifted_window_attention` partitions its `[B, H, W, C]` map.

torchvision's shift rule is kept: along an axis whose padded extent fits in one window
(`window >= padded extent`) the shift is 0, because rolling a single window changes nothing
about which positions share a window. `effective_shift` applies it; every operator uses it,
so a partition and a merge with the same arguments are inverse to each other.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, HNDLError
from hndl.arg import MAX_EXTENT

#: torchvision's additive mask value between positions of one window that came from
#: different regions of the unshifted map (not -inf: every row keeps a finite softmax).
MASK_VALUE = -100.0


def window_args() -> dict[str, Arg]:
    """``window`` and ``shift``, the arguments every window operator takes."""
    return {
        "window": Arg("pair", min=1, max=MAX_EXTENT,
                      help="Window extent (height, width), or one int for a square window; Swin uses 7."),
        "shift": Arg("pair", 0, min=0, max=MAX_EXTENT,
                     help="Cyclic shift (rows, columns) applied before partitioning: the map is rolled by -shift. "
                          "Each must be smaller than the window (Swin alternates 0 and window // 2). Along an axis "
                          "whose padded extent fits in one window the shift is 0, as in torchvision."),
    }


def validate_shift(args: dict) -> None:
    """0 <= shift < window on each axis (E_ARGUMENT)."""
    window, shift = args["window"], args["shift"]
    for axis in range(2):
        if shift[axis] >= window[axis]:
            raise HNDLError(
                "E_ARGUMENT",
                f"shift {tuple(shift)} is not smaller than window {tuple(window)} on axis {axis}",
                field="shift",
                remedies=(f"Use a shift below the window on every axis, e.g. shift={window[axis] // 2} "
                          f"(Swin's shifted block), or 0.",),
            )


def windows_along(extent: int, window: int) -> int:
    """How many windows cover ``extent`` positions once it is padded to a multiple of ``window``."""
    return (extent + window - 1) // window  # not -(-extent // window): traced, the classic ONNX exporter truncates


def window_count(height: int, width: int, window: tuple[int, int]) -> int:
    """The number of windows nW of a ``height x width`` map."""
    return windows_along(height, window[0]) * windows_along(width, window[1])


def effective_shift(height: int, width: int, window: tuple[int, int], shift: tuple[int, int]) -> tuple[int, int]:
    """The shift actually applied: 0 along an axis whose padded extent is at most one window."""
    padded = (windows_along(height, window[0]) * window[0], windows_along(width, window[1]) * window[1])
    return tuple(0 if not shift[axis] or window[axis] >= padded[axis] else shift[axis] for axis in range(2))


def window_relation(s, map_port: str, windows_port: str) -> None:
    """The shape rule of a partition ``map_port[B, C, H, W]`` <-> ``windows_port[B, nW, N, C]``:
    N = wh * ww always; nW = ceil(H / wh) * ceil(W / ww) forward; backward, a known nW and one
    known side bound the other side to the interval of extents giving the remaining window count."""
    window = s.args["window"]
    s.axis(windows_port, 2, window[0] * window[1])
    image, windows = s.shape(map_port), s.shape(windows_port)
    height, width, count = image[2], image[3], windows[1]
    if height is not None and width is not None:
        s.axis(windows_port, 1, window_count(height, width, window))
        return
    if count is None:
        return
    for known_axis, other_axis in ((2, 3), (3, 2)):
        known = image[known_axis]
        if known is None:
            continue
        along = windows_along(known, window[known_axis - 2])
        if count % along:
            s.error("E_CONSTRAINT",
                    f"{count} windows of {tuple(window)} cannot tile a map whose axis {known_axis} "
                    f"({known} positions) alone holds {along} windows")
        rest, size = count // along, window[other_axis - 2]
        s.interval(map_port, other_axis, (rest - 1) * size + 1, rest * size)


# -- the tensor work -----------------------------------------------------------------------------------
def partition(x: torch.Tensor, window: tuple[int, int], shift: tuple[int, int]) -> torch.Tensor:
    """``[B, C, H, W]`` -> ``[B, nW, N, C]``: pad to the window, roll by -shift (effective), cut."""
    return partition_last(x.permute(0, 2, 3, 1), window, shift)


def partition_last(x: torch.Tensor, window: tuple[int, int], shift: tuple[int, int], *,
                   effective: bool = False) -> torch.Tensor:
    """:func:`partition` of a channels-last ``[B, H, W, C]`` map. ``effective=True`` says ``shift`` is
    already :func:`effective_shift`'s for this map (a module that knows its map size computes it once,
    so a ``torch.jit.trace`` of it compares no traced sizes)."""
    batch, height, width, channels = x.shape
    wh, ww = window
    rows, cols = windows_along(height, wh), windows_along(width, ww)
    if not effective:
        shift = effective_shift(height, width, window, shift)
    x = F.pad(x, (0, 0, 0, cols * ww - width, 0, rows * wh - height))
    if any(shift):
        x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
    x = x.reshape(batch, rows, wh, cols, ww, channels).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(batch, rows * cols, wh * ww, channels)


def merge(windows: torch.Tensor, window: tuple[int, int], shift: tuple[int, int], height: int,
          width: int) -> torch.Tensor:
    """``[B, nW, N, C]`` -> ``[B, C, H, W]``: the inverse of :func:`partition` (unroll, crop)."""
    return merge_last(windows, window, shift, height, width).permute(0, 3, 1, 2)


def merge_last(windows: torch.Tensor, window: tuple[int, int], shift: tuple[int, int], height: int,
               width: int, *, effective: bool = False) -> torch.Tensor:
    """:func:`merge` to a channels-last ``[B, H, W, C]`` map (``effective`` as in :func:`partition_last`)."""
    batch, _, _, channels = windows.shape
    wh, ww = window
    rows, cols = windows_along(height, wh), windows_along(width, ww)
    if not effective:
        shift = effective_shift(height, width, window, shift)
    x = windows.reshape(batch, rows, cols, wh, ww, channels).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(batch, rows * wh, cols * ww, channels)
    if any(shift):
        x = torch.roll(x, shifts=shift, dims=(1, 2))
    return x[:, :height, :width, :]


def region_labels(height: int, width: int, window: tuple[int, int], shift: tuple[int, int],
                  device: Optional[torch.device] = None) -> torch.Tensor:
    """``[pH, pW]`` labels of the padded, rolled map: positions that were neighbours before the roll
    share a label (three bands per axis: [0, p - w), [p - w, p - s), [p - s, p))."""
    labels = []
    for axis, extent in enumerate((height, width)):
        padded = windows_along(extent, window[axis]) * window[axis]
        band = torch.zeros(padded, dtype=torch.long, device=device)
        band[padded - window[axis]:] = 1
        band[padded - shift[axis]:] = 2
        labels.append(band)
    return labels[0][:, None] * 3 + labels[1][None, :]


def shifted_window_mask(height: int, width: int, window: tuple[int, int],
                        shift: tuple[int, int]) -> Optional[torch.Tensor]:
    """The additive ``[nW, N, N]`` mask of shifted windows (0 within a region, -100 across), or None
    when the effective shift is 0 on both axes (no window then mixes regions)."""
    shift = effective_shift(height, width, window, shift)
    if not any(shift):
        return None
    labels = region_labels(height, width, window, shift).to(torch.float32)[None, None]  # [1, 1, pH, pW]
    cut = partition(labels, window, (0, 0))[0, :, :, 0]  # [nW, N]: the map is rolled already
    different = cut[:, None, :] != cut[:, :, None]
    return torch.zeros(different.shape).masked_fill(different, MASK_VALUE)


def relative_position_index(window: tuple[int, int]) -> torch.Tensor:
    """Swin's flattened ``[N * N]`` index into the ``[(2wh - 1)(2ww - 1), heads]`` bias table:
    entry ``(i, j)`` is ``(dy + wh - 1) * (2ww - 1) + (dx + ww - 1)`` for the offset of position
    ``i`` from position ``j`` (torchvision's layout, so its buffer loads as is)."""
    wh, ww = window
    rows = torch.arange(wh).repeat_interleave(ww)
    cols = torch.arange(ww).repeat(wh)
    dy = rows[:, None] - rows[None, :] + wh - 1
    dx = cols[:, None] - cols[None, :] + ww - 1
    return (dy * (2 * ww - 1) + dx).flatten()


class ShiftedWindowSelfAttention(nn.Module):
    """Swin's (shifted) window multi-head self-attention over a `[B, C, H, W]` map, with
    torchvision's parameter and buffer names: `qkv`, `proj`, `relative_position_bias_table`
    (parameter) and `relative_position_index` (persistent buffer); the shifted-window mask is
    the non-persistent buffer `attention_mask` ([nW, N, N], absent when no shift applies), made
    here once for the map size the plan resolved."""

    def __init__(self, channels: int, heads: int, window: tuple[int, int], shift: tuple[int, int],
                 height: int, width: int, qkv_bias: bool = True, proj_bias: bool = True) -> None:
        super().__init__()
        if channels % heads:
            raise HNDLError("E_CONSTRAINT", f"the channels C={channels} are not divisible by heads={heads}",
                            field="heads", remedies=("Choose heads that divides the channel count.",))
        self.heads, self.window, self.height, self.width = heads, tuple(window), height, width
        self.shift = effective_shift(height, width, self.window, tuple(shift))
        self.qkv = nn.Linear(channels, 3 * channels, bias=qkv_bias)
        self.proj = nn.Linear(channels, channels, bias=proj_bias)
        table = (2 * window[0] - 1) * (2 * window[1] - 1)
        self.relative_position_bias_table = nn.Parameter(torch.empty(table, heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer("relative_position_index", relative_position_index(self.window))
        self.register_buffer("attention_mask", shifted_window_mask(height, width, self.window, self.shift),
                             persistent=False)

    def relative_position_bias(self) -> torch.Tensor:
        """The ``[heads, N, N]`` additive bias gathered from the table."""
        count = self.window[0] * self.window[1]
        bias = self.relative_position_bias_table[self.relative_position_index]
        return bias.view(count, count, self.heads).permute(2, 0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """The attention of a channels-last ``[B, H, W, C]`` map, returned channels-last."""
        batch, height, width, channels = x.shape
        windows = partition_last(x, self.window, self.shift, effective=True)  # [B, nW, N, C]
        _, count, length, _ = windows.shape
        size = channels // self.heads
        tokens = windows.reshape(batch * count, length, channels)
        qkv = self.qkv(tokens).reshape(batch * count, length, 3, self.heads, size).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * size ** -0.5, qkv[1], qkv[2]
        scores = q @ k.transpose(-2, -1) + self.relative_position_bias()
        if self.attention_mask is not None:
            scores = scores.view(batch, count, self.heads, length, length) + self.attention_mask[None, :, None]
            scores = scores.view(batch * count, self.heads, length, length)
        mixed = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch * count, length, channels)
        out = self.proj(mixed).view(batch, count, length, channels)
        return merge_last(out, self.window, self.shift, height, width, effective=True)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, window={self.window}, shift={self.shift}, map=({self.height}, {self.width})"


def attention_reference(module: ShiftedWindowSelfAttention) -> Any:
    """Window attention written out window by window: each window of the padded, rolled map
    attends within itself (bias from the table, -100 between different regions), then the map
    is rolled back and cropped. Plain torch, one loop per window."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        wh, ww = module.window
        shift = effective_shift(height, width, module.window, module.shift)
        heads, size = module.heads, channels // module.heads
        rows, cols = windows_along(height, wh), windows_along(width, ww)
        image = F.pad(x.permute(0, 2, 3, 1), (0, 0, 0, cols * ww - width, 0, rows * wh - height))
        image = torch.roll(image, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        labels = region_labels(height, width, module.window, shift, device=x.device)
        count = wh * ww
        table = module.relative_position_bias_table
        offsets = torch.stack(torch.meshgrid(torch.arange(wh, device=x.device), torch.arange(ww, device=x.device),
                                             indexing="ij")).flatten(1)
        delta = offsets[:, :, None] - offsets[:, None, :]  # [2, N, N]
        bias = table[(delta[0] + wh - 1) * (2 * ww - 1) + delta[1] + ww - 1].permute(2, 0, 1)  # [heads, N, N]
        out = torch.zeros_like(image)
        for i in range(rows):
            for j in range(cols):
                cell = (slice(None), slice(i * wh, (i + 1) * wh), slice(j * ww, (j + 1) * ww))
                tokens = image[cell].reshape(batch, count, channels)
                q, k, v = (t.reshape(batch, count, heads, size).transpose(1, 2)
                           for t in module.qkv(tokens).split(channels, dim=-1))
                scores = (q / math.sqrt(size)) @ k.transpose(-2, -1) + bias
                if any(shift):
                    label = labels[cell[1:]].flatten()
                    scores = scores + (label[:, None] != label[None, :]).to(scores.dtype) * MASK_VALUE
                mixed = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, count, channels)
                out[cell] = module.proj(mixed).reshape(batch, wh, ww, channels)
        out = torch.roll(out, shifts=shift, dims=(1, 2))
        return out[:, :height, :width].permute(0, 3, 1, 2)

    return forward
