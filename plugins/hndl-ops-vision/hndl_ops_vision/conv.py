"""conv2d@2 (alias conv): a 2-D convolution over [B, C, H, W]; version 2 takes torch's padding="same"."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Example, Policy, operator
from hndl.declaration import TorchSpelling

from .convolution import check_same_padding, conv_relation, convolution_args

DOWN2 = Policy(
    "spatial.down2_conv@1",
    {"kernel_size": 4, "stride": 2, "padding": 1, "dilation": 1, "groups": 1},
)


@operator(
    "conv",
    torch=TorchSpelling(
        signature="nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, "
                  "groups=1, bias=True)",
        names=("conv2d",),
        call="conv(out_channels, kernel_size=3, padding=1)",
    ),
    identity="conv2d",
    version=2,
    summary="2-D convolution over [B, C, H, W] with learned kernels.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=conv_relation,
    validate=check_same_padding,
    shape_text='O = floor((I + 2p - d(k - 1) - 1) / s + 1) per spatial axis; inverted as an interval. '
               'padding="same" (stride 1): O = I.',
    args=convolution_args(same=True),
    policies={"down2": DOWN2},
    category="convolution",
    examples=(
        Example("conv(8, kernel_size=3, padding=1)", ("B", 3, 16, 16), ("B", 8, 16, 16)),
        Example('conv(16, policy="down2")', ("B", 3, 16, 16), ("B", 16, 8, 8),
                note="down2: kernel 4, stride 2, padding 1 halves each even spatial axis."),
        Example('conv(8, kernel_size=3, padding="same")\nrelu()\nconv(kernel_size=5, padding="same")',
                ("B", 3, 32, 32), ("B", 16, 32, 32), note='padding="same" keeps H and W at stride 1, as in torch.'),
    ),
    reference=lambda module: (lambda x: F.conv2d(x, module.weight, module.bias, module.stride, module.padding, module.dilation, module.groups)),
)
class Conv(nn.Conv2d):
    """A 2-D convolution (torch.nn.Conv2d) with no activation inside. `kernel_size` is
    required unless a policy supplies it; `policy="down2"` (spatial.down2_conv@1) selects
    kernel 4, stride 2, padding 1, dilation 1, groups 1, which halves every even spatial
    extent. Inverting the equation from a known output leaves an interval of input sizes.

    **Padding.** `padding` is an int, a pair, or one of torch's strings: `"same"` keeps H and W
    (stride 1 only: torch refuses it for a strided convolution, and so does HNDL, with
    E_ARGUMENT naming the number to write instead; an odd total padding `d(k - 1)` puts the
    extra zero after, as torch does) and `"valid"` means no padding. When the equation misses an
    extent the contract or a consumer requires, the error writes the equation out with its
    numbers and names the `padding` or `stride` that gives the required extent.

    **Argument order.** HNDL's only positional argument is `out_channels`; `in_channels` is
    inferred and every other argument is a keyword. torch's `Conv2d(3, 16, 3)` is
    `conv(16, kernel_size=3)` here; a torch-style `conv(3, 16, 3)` is refused (E_ARGUMENT),
    never read another way.

    Version 2 added the padding strings; `conv_v1` (conv2d@1) keeps version 1's declaration for
    saved plans."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, bias=True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
