"""conv2d@1 (alias conv): a 2-D convolution over [B, C, H, W]."""

from __future__ import annotations

from torch import nn

from hndl import Arg, Example, Policy, operator

from .convolution import conv_relation

DOWN2 = Policy(
    "spatial.down2_conv@1",
    {"kernel_size": 4, "stride": 2, "padding": 1, "dilation": 1, "groups": 1},
)


@operator(
    "conv",
    identity="conv2d",
    summary="2-D convolution over [B, C, H, W] with learned kernels.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=conv_relation,
    shape_text="O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis; inverted as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels. Omit them to infer them from what consumes the result."),
        "kernel_size": Arg("pair", min=1, positional=False,
                           help="Kernel extent per spatial axis; required unless a policy supplies it."),
        "stride": Arg("pair", 1, min=1, positional=False, help="Step between kernel applications."),
        "padding": Arg("pair", 0, min=0, positional=False, help="Zero padding added on both sides."),
        "dilation": Arg("pair", 1, min=1, positional=False, help="Spacing between kernel taps."),
        "groups": Arg(int, 1, min=1, positional=False, help="Channel groups; both channel counts must divide by it."),
        "bias": Arg(bool, True, positional=False, help="Whether to learn an additive bias per output channel."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    },
    policies={"down2": DOWN2},
    category="convolution",
    examples=(
        Example("conv(8, kernel_size=3, padding=1)", ("B", 3, 16, 16), ("B", 8, 16, 16)),
        Example('conv(16, policy="down2")', ("B", 3, 16, 16), ("B", 16, 8, 8),
                note="down2: kernel 4, stride 2, padding 1 halves each even spatial axis."),
    ),
)
class Conv(nn.Conv2d):
    """A 2-D convolution (torch.nn.Conv2d) with no activation inside. `kernel_size` is
    required unless a policy supplies it; `policy="down2"` (spatial.down2_conv@1) selects
    kernel 4, stride 2, padding 1, dilation 1, groups 1, which halves every even spatial
    extent. Inverting the equation from a known output leaves an interval of input sizes."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, bias=True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
