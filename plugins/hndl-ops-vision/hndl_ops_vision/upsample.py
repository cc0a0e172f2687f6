"""upsample2d@1 (alias upsample): nearest-neighbour upsampling by an exact integer factor."""

from __future__ import annotations

from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT

from .convolution import SPATIAL_AXES


def _relation(s) -> None:
    """out[H] = scale_factor * x[H] and out[W] = scale_factor * x[W], exact in both directions."""
    factor = s.args["scale_factor"]
    for axis in SPATIAL_AXES:
        s.scale("out", axis, "x", axis, factor)


def _reference(module):
    """Nearest neighbour written out: output pixel (i, j) repeats input pixel (i // s, j // s)."""
    factor = int(module.scale_factor)  # nn.Upsample keeps the factor as a float
    return lambda x: x.repeat_interleave(factor, dim=2).repeat_interleave(factor, dim=3)


@operator(
    "upsample",
    torch=dict(
        signature="nn.Upsample(size=None, scale_factor=None, mode='nearest')",
        hint="upsample takes an integer scale factor, upsample(scale_factor=2); the output size is "
             "never an argument: it follows from the scale (torch's Upsample(size=...) has no HNDL "
             "spelling).",
        names=("interpolate",),
        call="upsample(scale_factor=2)",
        keywords={
            "size": "upsample takes an integer scale factor, upsample(scale_factor=2); the output size is "
                "never an argument: it follows from the scale (torch's Upsample(size=...) has no HNDL "
                "spelling).",
            "output_size": "upsample takes an integer scale factor, upsample(scale_factor=2); the output size is "
                "never an argument: it follows from the scale (torch's Upsample(size=...) has no HNDL "
                "spelling).",
        },
    ),
    identity="upsample2d",
    summary="Repeat every pixel of [B, C, H, W] scale_factor times along both spatial axes (nearest neighbour).",
    shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
    relation=_relation,
    shape_text="H_out = scale_factor * H and W_out = scale_factor * W exactly, in both directions.",
    args={
        "scale_factor": Arg(int, min=1, max=MAX_EXTENT, help="The integer factor applied to height and width."),
        "mode": Arg(str, "nearest", choices=("nearest",), positional=False,
                    help="Interpolation mode; only nearest, which copies each pixel, is supported."),
    },
    category="resampling",
    examples=(
        Example("upsample(2)", ("B", 3, 4, 4), ("B", 3, 8, 8), note="Every pixel becomes a 2 x 2 block."),
        Example("linear()\nreshape(16)\nupsample(2)\nconv(3, kernel_size=3, padding=1)", ("B", 8), ("B", 3, 16, 16),
                note="Resize-convolution: the 8 x 8 seed and projection width 16 * 8 * 8 = 1024 are inferred "
                     "backward through the exact scale."),
    ),
    reference=_reference,
)
class Upsample(nn.Upsample):
    """Nearest-neighbour upsampling by an explicit integer `scale_factor` on both spatial
    axes: `out[b, c, i, j] = x[b, c, i // s, j // s]`, so `H_out = s * H` and `W_out = s * W`
    exactly. The relation is an exact integer scale in both directions: a known output fixes
    the input, and an output extent that is not a multiple of `s` is a contradiction
    (`E_CONSTRAINT`). Channels pass through.

    Only `mode="nearest"` exists; the argument is recorded in the plan so the interpolation
    is explicit. HNDL never inserts resizing on its own: upsampling happens only where this
    operator is written. The gradient of each input pixel is the sum over its `s x s` block.
    No parameters; identical in train and eval mode.

    **Torch spelling.** torch's `nn.Upsample(scale_factor=2)` is `upsample(2)` or
    `upsample(scale_factor=2)`. There is no `size` argument (torch's first positional one): the
    output size follows from the scale, and `upsample(size=...)` is refused naming
    `upsample(scale_factor=...)`.

    **Torch's own class.** The built node is `nn.Upsample(scale_factor=float(s), mode="nearest")`
    (`type(node) is nn.Upsample`, which keeps the factor as a float), computing the same
    `F.interpolate` call, so tools that look layers up by type see the layer a handwritten
    model has."""

    def __init__(self, *, scale_factor: int, mode: str = "nearest") -> None:
        super().__init__(scale_factor=float(scale_factor), mode=mode)
