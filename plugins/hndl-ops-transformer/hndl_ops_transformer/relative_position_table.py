"""relative_position_table@1: the learned table of relative offsets (Swin's relative position
bias) as a standalone producer of the additive attention bias ``[B, H, T, T]`` that
``scaled_dot_product_attention`` (``attn_bias``) or ``attention`` takes.

The index function (``relative_position_index``) is public; it is the layout torchvision's
``ShiftedWindowAttention.define_relative_position_index`` builds, so that buffer loads as is.
"""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import TorchSpelling

__all__ = ["relative_position_index", "RelativePositionTable"]


def relative_position_index(window: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """Swin's flattened ``[N * N]`` int64 index (``N = wh * ww``) into the
    ``[(2wh - 1)(2ww - 1), heads]`` table, for the ``N`` positions of a ``wh x ww`` window in
    row-major order: entry ``i * N + j`` is ``(dy + wh - 1) * (2ww - 1) + (dx + ww - 1)`` where
    ``(dy, dx)`` is the offset of position ``i`` from position ``j``. ``window=(1, T)`` is the
    1-D table of ``2T - 1`` offsets: entry ``i * T + j`` is ``i - j + T - 1``."""
    wh, ww = window
    rows = torch.arange(wh, dtype=torch.long, device=device).repeat_interleave(ww)
    cols = torch.arange(ww, dtype=torch.long, device=device).repeat(wh)
    dy = rows[:, None] - rows[None, :] + wh - 1
    dx = cols[:, None] - cols[None, :] + ww - 1
    return (dy * (2 * ww - 1) + dx).flatten()


def _positions(window) -> int:
    return int(window[0]) * int(window[1])


def _relation(s) -> None:
    """T = wh * ww (the window's position count), fixed from the arguments, so T infers for
    both the input and the output and a contract with another T is E_CONSTRAINT."""
    window = tuple(s.args["window"])
    count = _positions(window)
    for port, index, rank in (("x", 1, 3), ("out", 2, 4), ("out", 3, 4)):
        shape = s.shape(port)
        # a shape of another rank is the pattern's rank conflict, reported as such; no T to read
        known = None if shape is None or len(shape) != rank else shape[index]
        if isinstance(known, int) and known != count:
            s.error("E_CONSTRAINT",
                    f"relative_position_table's window {window} holds {window[0]} * {window[1]} = {count} "
                    f"positions, but the sequence length T of {port} is {known}",
                    remedies=(f"Give a window whose wh * ww equals T = {known} (e.g. window=(1, {known}) for a 1-D "
                              f"sequence), or feed it a sequence of {count} positions (one window's tokens, "
                              f"row-major).",),
                    because=((port, index),))
    s.axis("x", 1, count)


def _reference(module):
    """torchvision's define_relative_position_index and _get_relative_position_bias, written
    out with a meshgrid and a gather, expanded over the batch."""

    def forward(x):
        wh, ww = module.window
        coords = torch.stack(torch.meshgrid(torch.arange(wh, device=x.device), torch.arange(ww, device=x.device),
                                            indexing="ij")).flatten(1)            # [2, N]
        offsets = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)    # [N, N, 2]
        index = (offsets[..., 0] + wh - 1) * (2 * ww - 1) + (offsets[..., 1] + ww - 1)
        values = module.relative_position_bias_table[index.flatten()].view(wh * ww, wh * ww, -1)
        return values.permute(2, 0, 1).unsqueeze(0).expand(x.shape[0], -1, -1, -1)

    return forward


@operator(
    "relative_position_table",
    torch=TorchSpelling(signature="torchvision ShiftedWindowAttention.get_relative_position_bias()"),
    summary="Swin's learned relative position bias table, indexed by the relative offsets of a window's "
            "positions: the additive [B, H, T, T] attention bias for a [B, T, D] sequence of T = wh * ww tokens.",
    shape="x[B, T, D] -> out[B, H, T, T]",
    relation=_relation,
    shape_text="x is [B, T, D] (only T is read; it must equal wh * ww of the window), out is [B, H, T, T] with "
               "H = heads: the bias of query t for key s on head h. T infers from the window in both directions.",
    args={
        "heads": Arg(int, min=1, max=MAX_EXTENT, dim="H",
                     help="Number of attention heads H; each learns its own bias per relative offset."),
        "window": Arg("pair", min=1, max=MAX_EXTENT,
                      help="Window extent (wh, ww) whose wh * ww positions, row-major, are the T tokens; one int "
                           "is a square window (Swin uses 7). (1, T) is the 1-D table of 2T - 1 offsets."),
    },
    category="attention",
    examples=(
        Example("bias = relative_position_table(x, 2, (2, 3))\nq = split_heads(x, 2)\n"
                "out = merge_heads(scaled_dot_product_attention(q, q, q, bias))",
                ("B", 6, 16), ("B", 6, 16),
                note="Self-attention inside one 2 x 3 window (6 tokens, row-major): 15 x 2 table entries."),
        Example("relative_position_table(4, (1, 10))", ("B", 10, 8), ("B", 4, 10, 10),
                note="The 1-D form: 19 learned offsets -9 .. 9 per head."),
        Example("relative_position_table(3, 7)", ("B", 49, 96), ("B", 3, 49, 49),
                note="Swin's 7 x 7 window: 49 tokens, a 169 x 3 table."),
    ),
    reference=_reference,
)
class RelativePositionTable(nn.Module):
    """The relative position bias of Swin (Liu et al. 2021), as a node of its own: every
    query/key pair `(t, s)` of the `T = wh * ww` positions of a window (row-major, as
    `window_partition` and torchvision order them) has a 2-D offset `(dy, dx)`, and each head
    learns one scalar per offset, added to the attention scores:

        out[b, h, t, s] = relative_position_bias_table[index[t * T + s], h]
        index[t * T + s] = (dy + wh - 1) * (2 ww - 1) + (dx + ww - 1),  (dy, dx) = pos(t) - pos(s)

    This is the bias inside torchvision's `ShiftedWindowAttention` (and the vision pack's
    `window_attention`), split out so that attention written from primitives
    (`split_heads`, `scaled_dot_product_attention(..., attn_bias)`, `merge_heads`) or the fused
    `attention` (`attn_bias` port) can use it. Unlike T5's `relative_position_bias`, every offset has
    its own entry (no buckets), so the table is tied to one window size. `window=(1, T)` is the
    1-D form: a table of `2T - 1` offsets `s - t`, entry `t - s + T - 1`.

    Rank 4 is read here as `[B, H, T, T]` (batch, heads, queries, keys), not as
    `[B, C, H, W]`: the heads are folded into the non-batch axes, so attention stays within
    §3's ranks 2 to 4. The same table serves every example (a batch-expanded view), so a batch
    of windows (torchvision's `B * nW`) shares it as in Swin.

    * **Parameters:** `relative_position_bias_table`, `[(2wh - 1)(2ww - 1), heads]`, initialized
      from a truncated normal with std 0.02 as torchvision and timm initialize it.
    * **Buffer:** `relative_position_index`, the flattened `[T * T]` int64 index, **persistent**
      as torchvision keeps it, so a torchvision Swin attention's `relative_position_bias_table`
      and `relative_position_index` load as they are.
    * `T` must equal `wh * ww` (E_CONSTRAINT otherwise); it infers from the window for the input
      and the output contract alike. `D` is not read. Deterministic; identical in train and eval.
    """

    def __init__(self, heads: int, window: tuple[int, int]) -> None:
        super().__init__()
        self.heads = heads
        self.window = (int(window[0]), int(window[1]))
        wh, ww = self.window
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * wh - 1) * (2 * ww - 1), heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer("relative_position_index", relative_position_index(self.window))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = self.window[0] * self.window[1]
        values = self.relative_position_bias_table[self.relative_position_index]  # [T * T, H]
        values = values.view(positions, positions, self.heads).permute(2, 0, 1)
        return values.unsqueeze(0).expand(x.shape[0], -1, -1, -1)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, window={self.window}"
