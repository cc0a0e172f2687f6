"""depthwise_separable_conv@1 (alias depthwise_separable_conv_v1): the pair as version 1 declared it.

Kept so that plans saved before ``depthwise_separable_conv`` gained ``norm_eps`` and
``norm_momentum`` (version 2) still restore, rebuild and load their state dictionaries. New
specifications use ``depthwise_separable_conv``.
"""

from __future__ import annotations

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .depthwise_separable_conv import STAGE_ACTIVATIONS, DepthwiseSeparableConv


def _relation(s) -> None:
    """Version 2's relation: the spatial equation did not change."""
    spec_of(DepthwiseSeparableConv).relation(s)


@operator(
    "depthwise_separable_conv_v1",
    identity="depthwise_separable_conv",
    version=1,
    summary="Version 1 of depthwise_separable_conv (batch norms with eps 1e-5 and momentum 0.1), kept so saved "
            "depthwise_separable_conv@1 plans restore.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    shape_text="O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis (p defaults to (k - 1) // 2 * d); "
               "inverted as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels of the pointwise convolution. Omit them to infer them from what "
                                 "consumes the result."),
        "kernel_size": Arg("pair", 3, min=1, max=MAX_EXTENT, positional=False,
                           help="Kernel extent of the depthwise convolution."),
        "stride": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False, help="Stride of the depthwise convolution."),
        "padding": Arg("pair", None, min=0, max=MAX_EXTENT, positional=False,
                       help="Zero padding of the depthwise convolution; omitted, (kernel_size - 1) // 2 * dilation "
                            "per axis, which keeps H and W for an odd kernel at stride 1."),
        "dilation": Arg("pair", 1, min=1, max=MAX_EXTENT, positional=False,
                        help="Spacing between the depthwise kernel taps."),
        "norm": Arg(bool, False, positional=False,
                    help="Follow each convolution with batch norm, as MobileNetV1 does; the convolutions then have "
                         "no bias."),
        "activation": Arg(str, "none", choices=STAGE_ACTIVATIONS, positional=False,
                          help='Activation after each stage (after its batch norm): "none" (Xception\'s separable '
                               'convolution), "relu" (MobileNetV1), "relu6", "silu" or "hardswish".'),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels (the depthwise convolution keeps them); normally inferred from the "
                                "producer."),
    },
    category="convolution",
    examples=(
        Example("depthwise_separable_conv_v1(16)", ("B", 8, 6, 6), ("B", 16, 6, 6),
                note="The same pair as depthwise_separable_conv(16)."),
        Example('depthwise_separable_conv_v1(stride=2, norm=True, activation="relu")', ("B", 4, 8, 8),
                ("B", 8, 4, 4), note="A MobileNetV1 layer."),
    ),
    reference=spec_of(DepthwiseSeparableConv).reference,
)
class DepthwiseSeparableConvV1(DepthwiseSeparableConv):
    """`depthwise_separable_conv@1`, frozen: a depthwise k x k convolution then a pointwise 1x1
    convolution, each optionally followed by a batch norm of eps 1e-5 and momentum 0.1 and an
    activation.

    This is the declaration `depthwise_separable_conv` had before version 2 added `norm_eps`
    and `norm_momentum`. Its arguments, plan records and parameters (names, order and shapes)
    are exactly version 1's, so a plan saved with `depthwise_separable_conv@1` restores byte
    for byte, builds this module and loads the state dictionary it was saved with. It computes
    what `depthwise_separable_conv` computes with its defaults. Write
    `depthwise_separable_conv` in new specifications; this alias exists for saved plans (which
    record the identity `depthwise_separable_conv@1`, not the alias)."""

    def __init__(self, *, out_channels: int, in_channels: int, kernel_size=(3, 3), stride=(1, 1), padding=None,
                 dilation=(1, 1), norm: bool = False, activation: str = "none") -> None:
        super().__init__(out_channels=out_channels, in_channels=in_channels, kernel_size=kernel_size, stride=stride,
                         padding=padding, dilation=dilation, norm=norm, activation=activation)
