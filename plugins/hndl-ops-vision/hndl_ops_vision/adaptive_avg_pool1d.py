"""adaptive_avg_pool1d@1: the mean over windows of a [B, C, L] signal chosen to give a fixed length."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .convolution import SIGNAL_AXIS


def _relation(s) -> None:
    """output_size fixes the output length; omitted, the output length fixes it."""
    if "output_size" in s.args:
        s.axis("out", SIGNAL_AXIS, s.args["output_size"])
        return
    length = s.shape("out")[SIGNAL_AXIS]
    if length is not None:
        s.arg("output_size", length)


@operator(
    "adaptive_avg_pool1d",
    torch=TorchSpelling(signature="nn.AdaptiveAvgPool1d(output_size)"),
    summary="Average each channel of a [B, C, L] signal over windows chosen to give a fixed output length.",
    shape="x[B, C, L] -> out[B, C, L_out]",
    relation=_relation,
    shape_text="Rank 3 read as [B, C, L]; out = [B, C, output_size] for any input L; an omitted output_size "
               "is read off the output.",
    args={
        "output_size": Arg(int, min=1, max=MAX_EXTENT, inferable=True,
                           help="Output length L_out. Omit it to take the output length from what consumes "
                                "the result."),
    },
    category="pooling",
    examples=(
        Example("conv1d(8, kernel_size=3)\nadaptive_avg_pool1d(1)\nflatten()\nlinear()", ("B", 2, 20), ("B", 10),
                note="Global average pooling before the classifier, as in the M5 audio net."),
        Example("adaptive_avg_pool1d()", ("B", 4, 9), ("B", 4, 4),
                note="output_size 4 is inferred from the output contract; windows overlap by one."),
    ),
    reference=lambda module: (lambda x: F.adaptive_avg_pool1d(x, module.output_size)),
)
class AdaptiveAvgPool1d(nn.AdaptiveAvgPool1d):
    """Adaptive average pooling (torch.nn.AdaptiveAvgPool1d) along the length of a `[B, C, L]` signal.

    **Axis order.** adaptive_avg_pool1d reads a rank-3 tensor as a one-dimensional signal
    `[B, C, L]`: batch, channels, then length, and pools along the last axis, like conv1d.
    This is *not* the `[B, T, D]` sequence layout that linear, the normalizations and the
    activations use (there the features are last); rank alone does not name the axes.

    The output always has length `output_size`, whatever the input's. Output element `i`
    averages input elements `floor(i * L / L_out)` up to (excluding) `ceil((i + 1) * L / L_out)`,
    so windows may differ in size by one and overlap when the division is not exact.
    `output_size=1` is global average pooling.

    `output_size` is an inferable argument: written, it fixes the output length; omitted, it
    is read off the output once a contract or a consumer fixes it (recorded as inferred), and
    stays unresolved otherwise. The input length is never inferred from the output, because
    every input length produces the same output length; it must come from the producer.
    Channels pass through. No parameters; identical in train and eval mode."""

    def __init__(self, *, output_size: int) -> None:
        super().__init__(output_size)
