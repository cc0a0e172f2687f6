"""adaptive_avg_pool2d@1 (alias adaptive_avg_pool): the mean over windows chosen to give a fixed output size."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .convolution import SPATIAL_AXES


def _relation(s) -> None:
    """output_size fixes the output's spatial extents; omitted, the output's extents fix it."""
    if "output_size" in s.args:
        for j, axis in enumerate(SPATIAL_AXES):
            s.axis("out", axis, s.args["output_size"][j])
        return
    out = s.shape("out")
    if out[2] is not None and out[3] is not None:
        s.arg("output_size", (out[2], out[3]))


@operator(
    "adaptive_avg_pool",
    torch=TorchSpelling(
        signature="nn.AdaptiveAvgPool2d(output_size)",
        names=("adaptive_avg_pool2d", "adaptiveavgpool2d"),
        call="adaptive_avg_pool(output_size)",
    ),
    identity="adaptive_avg_pool2d",
    summary="Average each channel of [B, C, H, W] over windows chosen to give a fixed output size.",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=_relation,
    shape_text="out = [B, C, *output_size] for any input H, W; an omitted output_size is read off the output.",
    args={
        "output_size": Arg("pair", min=1, max=MAX_EXTENT, inferable=True,
                           help="Output height and width (one int for a square). Omit it to take the output's "
                                "spatial extents from what consumes the result."),
    },
    category="pooling",
    examples=(
        Example("adaptive_avg_pool(1)\nflatten()\nlinear()", ("B", 8, 7, 7), ("B", 10),
                note="Global average pooling before a classifier."),
        Example("adaptive_avg_pool()", ("B", 4, 9, 7), ("B", 4, 3, 2),
                note="output_size (3, 2) is inferred from the output contract."),
    ),
    reference=lambda module: (lambda x: F.adaptive_avg_pool2d(x, module.output_size)),
)
class AdaptiveAvgPool(nn.AdaptiveAvgPool2d):
    """Adaptive average pooling (torch.nn.AdaptiveAvgPool2d) over each channel of `[B, C, H, W]`.

    The output always has the spatial extents `output_size = (H_out, W_out)`, whatever the
    input's. Output row `i` averages input rows `floor(i * H / H_out)` up to (excluding)
    `ceil((i + 1) * H / H_out)`, and the same for columns, so windows may differ in size by one
    and overlap when the division is not exact. `output_size=1` is global average pooling.

    `output_size` is an inferable argument: written, it fixes the output's spatial extents;
    omitted, it is read off the output once a contract or a consumer fixes both extents
    (recorded as inferred), and stays unresolved otherwise. The input's spatial extents are
    never inferred from the output, because every input size produces the same output size;
    they must come from the producer. Channels pass through. No parameters; identical in train
    and eval mode."""

    def __init__(self, *, output_size) -> None:
        super().__init__(output_size)
