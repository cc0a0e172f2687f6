"""swin_block@1: one Swin Transformer block (LayerNorm, window attention, LayerNorm, GELU MLP; two residuals)."""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

from .window_attention import attention_args, heads_divide_channels
from .windows import ShiftedWindowSelfAttention, attention_reference, validate_shift


def _layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm over the channels of [B, C, H, W], written out."""
    mean = x.mean(dim=1, keepdim=True)
    variance = (x - mean).square().mean(dim=1, keepdim=True)
    out = (x - mean) / torch.sqrt(variance + norm.eps)
    return out * norm.weight[:, None, None] + norm.bias[:, None, None]


def _reference(module):
    """x + attn(norm1(x)), then + fc2(gelu(fc1(norm2(.)))), channels first, window by window."""
    attention = attention_reference(module.attn)

    def forward(x):
        x = x + attention(_layer_norm(x, module.norm1))
        hidden = torch.einsum("oc,bchw->bohw", module.mlp.fc1.weight, _layer_norm(x, module.norm2))
        hidden = F.gelu(hidden + module.mlp.fc1.bias[:, None, None])
        return x + torch.einsum("oc,bchw->bohw", module.mlp.fc2.weight, hidden) + module.mlp.fc2.bias[:, None, None]

    return forward


def _relation(s) -> None:
    """heads divide C, and the MLP keeps at least one hidden unit: int(C * mlp_ratio) >= 1."""
    heads_divide_channels(s)
    for port in ("x", "out"):
        shape = s.shape(port)
        channels = shape[1] if shape else None
        if channels is not None and int(channels * s.args["mlp_ratio"]) < 1:
            s.error("E_CONSTRAINT", f"mlp_ratio={s.args['mlp_ratio']} leaves the MLP of C={channels} channels "
                                    f"no hidden unit (int(C * mlp_ratio) = 0)")


class _Mlp(nn.Sequential):
    """fc1 (C -> hidden), exact GELU, fc2 (hidden -> C), applied per position."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(channels, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, channels)


@operator(
    "swin_block",
    torch=TorchSpelling(
        signature="torchvision SwinTransformerBlock(dim, num_heads, window_size, shift_size, "
                  "mlp_ratio=4.0)",
        hint="swin_block reads the width from its input: torchvision's SwinTransformerBlock(96, 3, "
             "[7, 7], [3, 3]) is swin_block(3, 7, 3) here.",
    ),
    summary="One Swin Transformer block on [B, C, H, W]: x + W-MSA/SW-MSA(LN(x)), then + MLP(LN(.)).",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=_relation,
    validate=validate_shift,
    shape_text="out has the shape of x; C must be divisible by heads, and int(C * mlp_ratio) must be at least 1.",
    args={
        **attention_args(),
        "mlp_ratio": Arg(float, 4.0, min=0, exclusive_min=True, positional=False,
                         help="The MLP's hidden width is int(C * mlp_ratio) (4.0 in Swin)."),
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Epsilon of both layer normalizations (1e-5, torchvision's Swin)."),
    },
    category="block",
    examples=(
        Example("swin_block(2, 4)\nswin_block(2, 4, 2)", ("B", 8, 8, 8), ("B", 8, 8, 8),
                note="A Swin stage's pair: regular windows, then windows shifted by half a window."),
        Example("conv(16, kernel_size=4, stride=4)\nswin_block(4, 3, 1, mlp_ratio=2.0)", ("B", 3, 20, 20),
                ("B", 16, 5, 5), note="5 x 5 is padded to 6 x 6 inside the attention; MLP hidden width 32."),
    ),
    reference=_reference,
)
class SwinBlock(nn.Module):
    """One block of the Swin Transformer (Liu et al. 2021), torchvision's `SwinTransformerBlock`
    on HNDL's `[B, C, H, W]` layout:

        x = x + attn(norm1(x))        window_attention(heads, window, shift)
        x = x + mlp(norm2(x))         fc1: C -> int(C * mlp_ratio), GELU (erf), fc2: -> C

    `norm1`/`norm2` are LayerNorms over the channels of each position (`eps`), `attn` is
    exactly the `window_attention` operator (parameters `qkv`, `proj`,
    `relative_position_bias_table`, persistent buffer `relative_position_index`,
    non-persistent shifted-window mask), `mlp.fc1`/`mlp.fc2` the two linear maps, all applied
    per position. Swin stacks these in pairs, the second with `shift = window // 2`. The names
    are torchvision's except the MLP, which torchvision numbers `mlp.0` / `mlp.3` (a Sequential
    with its dropouts). No dropout and no stochastic depth: identical in train and eval mode,
    as torchvision's block with its rates at 0."""

    def __init__(self, heads: int, window: tuple[int, int], shift: tuple[int, int] = (0, 0), qkv_bias: bool = True,
                 proj_bias: bool = True, mlp_ratio: float = 4.0, eps: float = 1e-5, *,
                 input_shapes: Mapping[str, Any]) -> None:
        super().__init__()
        _, channels, height, width = input_shapes["x"]
        self.norm1 = nn.LayerNorm(channels, eps=eps)
        self.attn = ShiftedWindowSelfAttention(channels, heads, window, shift, height, width, qkv_bias=qkv_bias,
                                               proj_bias=proj_bias)
        self.norm2 = nn.LayerNorm(channels, eps=eps)
        self.mlp = _Mlp(channels, int(channels * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)  # channels last inside, as torchvision's block
        x = x + self.attn.attend(self.norm1(x))
        return (x + self.mlp(self.norm2(x))).permute(0, 3, 1, 2)
