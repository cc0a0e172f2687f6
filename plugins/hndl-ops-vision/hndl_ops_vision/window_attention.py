"""window_attention@1: Swin's (shifted) window multi-head self-attention over [B, C, H, W]."""

from __future__ import annotations

from typing import Any, Mapping

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .windows import ShiftedWindowSelfAttention, attention_reference, validate_shift, window_args


def heads_divide_channels(s) -> None:
    """E_CONSTRAINT as soon as a known channel count C is not a multiple of ``heads``."""
    heads = s.args["heads"]
    for port in ("x", "out"):
        shape = s.shape(port)
        channels = shape[1] if shape else None
        if channels is not None and channels % heads:
            s.error("E_CONSTRAINT", f"{s.spec.alias} splits the C={channels} channels of {port!r} into "
                                    f"heads={heads} equal heads, but {channels} is not divisible by {heads}")


def attention_args() -> dict[str, Arg]:
    """heads, window, shift, then the projection biases (torchvision's names)."""
    return {
        "heads": Arg(int, min=1, max=MAX_EXTENT,
                     help="Number of attention heads; the channel count C must be divisible by it."),
        **window_args(),
        "qkv_bias": Arg(bool, True, positional=False, help="Whether the fused query/key/value projection has a bias."),
        "proj_bias": Arg(bool, True, positional=False, help="Whether the output projection has a bias."),
    }


@operator(
    "window_attention",
    torch=TorchSpelling(
        signature="torchvision ShiftedWindowAttention(dim, window_size, shift_size, num_heads)",
        hint="window_attention reads the width from its input: torchvision's "
             "ShiftedWindowAttention(96, [7, 7], [3, 3], 3) is window_attention(3, 7, 3) here "
             "(heads, window, shift).",
    ),
    summary="Swin's (shifted) window multi-head self-attention with a learned relative position bias, on [B, C, H, W].",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=heads_divide_channels,
    validate=validate_shift,
    shape_text="out has the shape of x; C must be divisible by heads.",
    args=attention_args(),
    category="attention",
    examples=(
        Example("window_attention(2, 4)", ("B", 8, 8, 8), ("B", 8, 8, 8),
                note="W-MSA: four 4 x 4 windows, 2 heads of width 4; 49 x 2 bias table entries."),
        Example("conv(16, kernel_size=4, stride=4)\nwindow_attention(4, 4, 2)", ("B", 3, 24, 24), ("B", 16, 6, 6),
                note="SW-MSA: the 6 x 6 map is padded to 8 x 8 and shifted by 2; the mask keeps regions apart."),
        Example("window_attention(1, (3, 2), qkv_bias=False)", ("B", 4, 5, 4), ("B", 4, 5, 4),
                note="A rectangular window; no query/key/value bias."),
    ),
    reference=attention_reference,
)
class WindowAttention(ShiftedWindowSelfAttention):
    """Window multi-head self-attention with relative position bias, W-MSA and SW-MSA of
    Swin (Liu et al. 2021), computing exactly what torchvision's `ShiftedWindowAttention`
    computes, on HNDL's `[B, C, H, W]` layout (torchvision's block is channels-last; this
    operator permutes inside). For each window of `N = wh * ww` positions (the map padded with
    zeros to a multiple of the window and rolled by `-shift`, as `window_partition` cuts it):

        q, k, v = split(qkv(tokens))                    per head of width d = C / heads
        scores  = (q * d^-0.5) k^T + table[index]      + mask  (shifted windows only)
        out     = proj(softmax(scores) v)              then merged, rolled back, cropped

    `relative_position_bias_table` is a learned `[(2wh - 1)(2ww - 1), heads]` parameter
    (truncated normal, std 0.02); `relative_position_index` is the persistent `[N * N]` buffer
    mapping each pair of positions in a window to its row of the table (relative offset
    `(dy, dx)`), kept in the state dict as torchvision keeps it, so torchvision's weights load
    as they are (`qkv`, `proj` are its names too). With a shift, positions that share a window
    only because of the cyclic roll get `-100` added (torchvision's value, not `-inf`); that
    mask is built once at construction for the resolved map size and held in the
    non-persistent buffer `attention_mask` (`[nW, N, N]`; absent without a shift).
    torchvision's shift rule is kept: along an axis whose padded extent fits in one window the
    shift is 0. Padded positions take part as keys, as in torchvision.

    No dropout (inference and training alike; torchvision's default is 0). The queries and
    keys of different windows never meet, so the cost is `O(H W N C)` rather than
    `O((H W)^2 C)`."""

    def __init__(self, heads: int, window: tuple[int, int], shift: tuple[int, int] = (0, 0), qkv_bias: bool = True,
                 proj_bias: bool = True, *, input_shapes: Mapping[str, Any]) -> None:
        _, channels, height, width = input_shapes["x"]
        super().__init__(channels, heads, window, shift, height, width, qkv_bias=qkv_bias, proj_bias=proj_bias)
