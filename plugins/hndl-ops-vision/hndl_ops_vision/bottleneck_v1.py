"""bottleneck@1 (alias bottleneck_v1): the ResNet bottleneck block as version 1 declared it.

Kept so that plans saved before ``bottleneck`` gained ``dilation``, ``norm_eps``,
``norm_momentum`` and ``stochastic_depth_prob`` (version 2) still restore, rebuild and load their
state dictionaries. New specifications use ``bottleneck``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .bottleneck import Bottleneck


def _relation(s) -> None:
    """Version 2's relation at dilation 1: the spatial and channel equations did not change."""
    spec_of(Bottleneck).relation(s)


@operator(
    "bottleneck_v1",
    identity="bottleneck",
    version=1,
    summary="Version 1 of bottleneck (batch norms with eps 1e-5 and momentum 0.1, no dilation, no stochastic "
            "depth), kept so saved bottleneck@1 plans restore.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    shape_text="H_out = floor((H - 1) / stride) + 1, the same for W, inverted as an interval; "
               "C_out = expansion * width.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels, expansion * width. Omit them to infer them from width or from "
                                 "what consumes the result."),
        "width": Arg(int, min=1, max=MAX_EXTENT, inferable=True, positional=False,
                     help="Channels of the inner 1x1 and 3x3 convolutions (torchvision's planes, 64 in ResNet-50's "
                          "first stage); inferred as out_channels / expansion when omitted."),
        "stride": Arg(int, 1, min=1, max=2, positional=False,
                      help="Stride of the 3x3 convolution and of the projection: 1 keeps H and W, 2 halves them "
                           "(rounding up)."),
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT, positional=False,
                         help="out_channels / width: 4 in ResNet-50/101/152, 2 in Wide ResNet-50-2 and ResNeXt."),
        "groups": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                      help="Groups of the 3x3 convolution (ResNeXt's cardinality, e.g. 32); width must divide by it."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    },
    category="block",
    examples=(
        Example("bottleneck_v1(16)", ("B", 8, 6, 6), ("B", 16, 6, 6),
                note="The same block as bottleneck(16): width 4 and a projected skip."),
        Example("bottleneck_v1(stride=2, expansion=2, groups=2)", ("B", 8, 7, 7), ("B", 16, 4, 4),
                note="A ResNeXt-style block: width 8 in 2 groups."),
    ),
    reference=spec_of(Bottleneck).reference,
)
class BottleneckV1(Bottleneck):
    """`bottleneck@1`, frozen: torchvision's `Bottleneck`, `relu(bn3(conv3(relu(bn2(conv2(
    relu(bn1(conv1(x)))))))) + skip)`, with batch norms of eps 1e-5 and momentum 0.1, an
    undilated 3x3 convolution and no stochastic depth.

    This is the declaration `bottleneck` had before version 2 added `dilation`, `norm_eps`,
    `norm_momentum` and `stochastic_depth_prob`. Its arguments, plan records and parameters
    (names, order and shapes) are exactly version 1's, so a plan saved with `bottleneck@1`
    restores byte for byte, builds this module and loads the state dictionary it was saved
    with. It computes what `bottleneck` computes with its defaults. Write `bottleneck` in new
    specifications; this alias exists for saved plans (which record the identity
    `bottleneck@1`, not the alias)."""

    def __init__(self, *, out_channels: int, in_channels: int, width: int, stride: int = 1, expansion: int = 4,
                 groups: int = 1) -> None:
        super().__init__(out_channels=out_channels, in_channels=in_channels, width=width, stride=stride,
                         expansion=expansion, groups=groups)
