"""crop2d@1 (alias crop): center-crop the spatial axes of [B, C, H, W]."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT

from .convolution import SPATIAL_AXES

_NAMES = {2: "height", 3: "width"}


def crop_offsets(height: int, width: int, size: tuple[int, int]) -> tuple[int, int]:
    """(top, left) of a centered window of ``size`` in a ``height x width`` image: the floor of
    half the difference on each axis, so an odd surplus leaves its extra row/column at the bottom/right."""
    return (height - size[0]) // 2, (width - size[1]) // 2


def _relation(s) -> None:
    """size fixes the output's spatial extents; omitted, the output's extents fix it.

    The window must fit: H_out <= H and W_out <= W (E_CONSTRAINT otherwise). The input
    extents are never inferred from the output, since every larger input crops to the same size.
    """
    size = s.args.get("size")
    if size is not None:
        for j, axis in enumerate(SPATIAL_AXES):
            s.axis("out", axis, size[j])
    x, out = s.shape("x"), s.shape("out")
    for axis in SPATIAL_AXES:
        if x[axis] is not None and out[axis] is not None and out[axis] > x[axis]:
            s.error(
                "E_CONSTRAINT",
                f"crop: output {_NAMES[axis]} {out[axis]} is larger than the input {_NAMES[axis]} {x[axis]}; "
                "a crop can only shrink. Crop the larger tensor instead, or pad or resize explicitly",
            )
    if size is None and out[2] is not None and out[3] is not None:
        s.arg("size", (out[2], out[3]))


def _reference(module):
    """The centered window taken with narrow (not slicing), at offsets computed here."""

    def forward(x):
        height, width = module.size
        top, left = (x.shape[2] - height) // 2, (x.shape[3] - width) // 2
        return x.narrow(2, top, height).narrow(3, left, width)

    return forward


@operator(
    "crop",
    identity="crop2d",
    summary="Center-crop the spatial axes of [B, C, H, W] to size, for example a U-Net skip connection.",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=_relation,
    shape_text="(H_out, W_out) = size with H_out <= H and W_out <= W; an omitted size is read off the output, "
               "e.g. from the other input of a concat. The input extents are never inferred from the output.",
    args={
        "size": Arg("pair", min=1, max=MAX_EXTENT, inferable=True,
                    help="Output (height, width), or one int for a square. Omit it to take the output's spatial "
                         "extents from what consumes the result, such as the other input of a concat."),
    },
    category="shape",
    examples=(
        Example("crop(8)", ("B", 4, 12, 12), ("B", 4, 8, 8), note="A 2-pixel border is removed on every side."),
        Example("up = deconv(max_pool(x, 3), 4, kernel_size=2, stride=2)\nconcat(crop(x), up)",
                ("B", 4, 12, 12), ("B", 8, 8, 8),
                note="An unpadded U-Net skip: the 12 x 12 skip is cropped to the 8 x 8 upsampled branch; "
                     "the crop size is inferred through the concat, never written."),
        Example("crop((5, 6))", ("B", 3, 8, 9), ("B", 3, 5, 6),
                note="Odd surpluses: top = (8 - 5) // 2 = 1, left = (9 - 6) // 2 = 1."),
    ),
    reference=_reference,
)
class Crop(nn.Module):
    """Center crop of the spatial axes of `[B, C, H, W]`, as in the skip connections of the
    original (unpadded) U-Net, where the encoder's feature map is larger than the decoder's.

    The output is the window `x[:, :, top:top + H_out, left:left + W_out]` with

        top  = (H - H_out) // 2
        left = (W - W_out) // 2

    so the window is exactly centered when the surplus is even (identical to
    `torchvision.transforms.functional.center_crop`), and an odd surplus leaves the extra
    row or column at the bottom or right (torchvision rounds half to even there instead).
    Batch and channels pass through.

    `size` is inferable: written (`crop(8)`, `crop((8, 6))`), it fixes the output's spatial
    extents; omitted, it is read off the output once a contract or a consumer fixes both.
    The usual consumer is a `concat(crop(skip), up)` along the channels: concat makes every
    other axis of its inputs equal, so the upsampled branch fixes the crop and the skip
    connection is one call. An output larger than the input on either axis is
    `E_CONSTRAINT`: crop never pads. The input extents are never inferred from the output
    (every larger input crops to the same size); they come from the producer.

    The result is a view of the input (no copy); the input is never modified, and the
    gradient is the upstream gradient placed in the window, zero elsewhere. No parameters;
    identical in train and eval mode."""

    def __init__(self, *, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = tuple(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = self.size
        # Only a real tensor is checked: tracers (fx proxies, jit.trace) record no Python branch.
        checked = isinstance(x, torch.Tensor) and not torch.jit.is_tracing()
        if checked and (x.dim() != 4 or x.shape[2] < height or x.shape[3] < width):
            raise HNDLError(
                "E_RUNTIME",
                f"crop to {height} x {width} needs a [B, C, H, W] input with H >= {height} and W >= {width}, "
                f"got {list(x.shape)}",
                remedies=("Pass a larger [B, C, H, W] tensor, or resolve the crop for this input size.",),
            )
        top, left = crop_offsets(x.shape[2], x.shape[3], self.size)
        return x[:, :, top:top + height, left:left + width]

    def extra_repr(self) -> str:
        return f"size={self.size}"
