"""conv2d@1 (alias conv): a 2-D convolution over [B, C, H, W]."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Example, Policy, operator

from .convolution import conv_relation, convolution_args

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
    args=convolution_args(),
    policies={"down2": DOWN2},
    category="convolution",
    examples=(
        Example("conv(8, kernel_size=3, padding=1)", ("B", 3, 16, 16), ("B", 8, 16, 16)),
        Example('conv(16, policy="down2")', ("B", 3, 16, 16), ("B", 16, 8, 8),
                note="down2: kernel 4, stride 2, padding 1 halves each even spatial axis."),
    ),
    reference=lambda module: (lambda x: F.conv2d(x, module.weight, module.bias, module.stride, module.padding, module.dilation, module.groups)),
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
