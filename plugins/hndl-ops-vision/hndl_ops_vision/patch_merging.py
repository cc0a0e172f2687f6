"""patch_merging@1: Swin's 2 x 2 patch merging, [B, C, H, W] -> [B, 2C, ceil(H/2), ceil(W/2)]."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling


def _reference(module):
    """Pad to even, concatenate the four 2 x 2 sub-grids along the channels, normalize, project."""

    def forward(x):
        height, width = x.shape[2:]
        x = F.pad(x, (0, width % 2, 0, height % 2))
        grids = torch.cat([x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2], x[:, :, 0::2, 1::2], x[:, :, 1::2, 1::2]], 1)
        mean = grids.mean(dim=1, keepdim=True)
        variance = (grids - mean).square().mean(dim=1, keepdim=True)
        normed = (grids - mean) / torch.sqrt(variance + module.norm.eps)
        normed = normed * module.norm.weight[:, None, None] + module.norm.bias[:, None, None]
        return torch.einsum("oc,bchw->bohw", module.reduction.weight, normed)

    return forward


def _relation(s) -> None:
    """out[H] = ceil(x[H] / 2) per spatial axis; backward, x[H] is 2 * out[H] - 1 or 2 * out[H]."""
    x, out = s.shape("x"), s.shape("out")
    for axis in (2, 3):
        if x[axis] is not None:
            s.axis("out", axis, -(-x[axis] // 2))
        elif out[axis] is not None:
            s.interval("x", axis, 2 * out[axis] - 1, 2 * out[axis])


@operator(
    "patch_merging",
    torch=TorchSpelling(
        signature="torchvision PatchMerging(dim, norm_layer=nn.LayerNorm)",
        hint="patch_merging reads the channel count from its input: torchvision's PatchMerging(96) "
             "is patch_merging() here; give eps as a float or by keyword: patch_merging(eps=1e-05).",
        width_first=True,
    ),
    summary="Swin's patch merging: concatenate each 2 x 2 neighbourhood's channels, normalize, project 4C -> 2C.",
    shape="x[B, C, H, W] -> out[B, 2*C, H_out, W_out]",
    relation=_relation,
    shape_text="out has 2C channels and ceil(H / 2) x ceil(W / 2) positions (an odd side is zero-padded).",
    args={
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True,
                   help="The layer normalization's epsilon (1e-5, torchvision's Swin)."),
    },
    category="block",
    examples=(
        Example("patch_merging()", ("B", 8, 6, 6), ("B", 16, 3, 3),
                note="Halves the map and doubles the channels; 4C = 32 normalized, projected to 16."),
        Example("patch_merging()\nconv(kernel_size=1)", ("B", 4, 5, 7), ("B", 8, 3, 4),
                note="Odd sides are padded with zeros before merging, as torchvision does."),
        Example("conv(kernel_size=1)\npatch_merging()", ("B", 3, 8, 8), ("B", 12, 4, 4),
                note="The input channels 6 are inferred backward from 2C = 12."),
    ),
    reference=_reference,
)
class PatchMerging(nn.Module):
    """Patch merging of Swin (Liu et al. 2021), torchvision's `PatchMerging`, on HNDL's
    `[B, C, H, W]` layout. The downsampling between Swin stages: the map is zero-padded to even
    sides, the four sub-grids taken with stride 2 are concatenated along the channels in
    torchvision's order

        x0 = x[:, :, 0::2, 0::2], x1 = x[:, :, 1::2, 0::2], x2 = x[:, :, 0::2, 1::2], x3 = x[:, :, 1::2, 1::2]
        out = reduction(norm(cat([x0, x1, x2, x3], channels)))

    where `norm` is a LayerNorm over the `4C` channels of each position (`eps`, learned
    weight and bias) and `reduction` a `4C -> 2C` linear map without bias, both applied per
    position (channels last inside). The module names `norm` and `reduction` are
    torchvision's, so its weights load as they are. Output `[B, 2C, ceil(H/2), ceil(W/2)]`.
    No buffers; identical in train and eval mode.

    **Torch spelling.** torchvision's `PatchMerging(96)` is `patch_merging()`: the channel count
    is read from the input. An integer in the first position (`patch_merging(96)`) is refused
    with E_ARGUMENT naming `patch_merging()` / `patch_merging(eps=...)` instead of being read as
    `eps=96.0`."""

    def __init__(self, eps: float = 1e-5, *, C: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * C, 2 * C, bias=False)  # torchvision's order of registration
        self.norm = nn.LayerNorm(4 * C, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[2:]
        x = F.pad(x.permute(0, 2, 3, 1), (0, 0, 0, width % 2, 0, height % 2))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduction(self.norm(x)).permute(0, 3, 1, 2)
