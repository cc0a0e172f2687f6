"""conv_transpose2d@1 (alias deconv): a 2-D transposed convolution over [B, C, H, W]."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, Policy, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .convolution import convolution_args, transposed_relation

UP2 = Policy(
    "spatial.up2_transpose@1",
    {"kernel_size": 4, "stride": 2, "padding": 1, "dilation": 1, "output_padding": 0, "groups": 1},
)


def _validate(args) -> None:
    for j in range(2):
        padding, stride, dilation = args["output_padding"][j], args["stride"][j], args["dilation"][j]
        if padding >= stride and padding >= dilation:
            raise HNDLError(
                "E_ARGUMENT",
                f"output_padding {padding} must be smaller than stride {stride} or dilation {dilation}",
                field="output_padding",
            )


@operator(
    "deconv",
    torch=TorchSpelling(
        signature="nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0, "
                  "output_padding=0)",
        names=("conv_transpose2d", "convtranspose2d", "conv_transpose"),
        call="deconv(out_channels, kernel_size=2, stride=2)",
    ),
    identity="conv_transpose2d",
    summary="2-D transposed convolution over [B, C, H, W] with learned kernels.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=transposed_relation,
    validate=_validate,
    shape_text="O = (I - 1)s - 2p + d(k - 1) + output_padding + 1 per spatial axis, exact both ways.",
    args=convolution_args(
        transposed=True,
        output_padding=Arg("pair", 0, min=0, max=MAX_EXTENT, positional=False,
                           help="Extra size added to one side of the output."),
    ),
    policies={"up2": UP2},
    category="convolution",
    examples=(
        Example('deconv(8, policy="up2")', ("B", 16, 4, 4), ("B", 8, 8, 8),
                note="up2: kernel 4, stride 2, padding 1 doubles each spatial axis exactly."),
        Example("deconv(kernel_size=3)", ("B", 4, 5, 5), ("B", 2, 7, 7)),
    ),
    reference=lambda module: (lambda x: F.conv_transpose2d(x, module.weight, module.bias, module.stride, module.padding, module.output_padding, module.groups, module.dilation)),
)
class Deconv(nn.ConvTranspose2d):
    """A 2-D transposed convolution (torch.nn.ConvTranspose2d) with no activation inside.
    Transposed convolution does not by itself mean doubling: `policy="up2"`
    (spatial.up2_transpose@1) selects kernel 4, stride 2, padding 1, dilation 1, output
    padding 0 and groups 1, which doubles every spatial extent exactly. The policy never
    substitutes resizing, cropping or another architecture when a target does not fit."""

    def __init__(self, *, out_channels, kernel_size, in_channels, stride=(1, 1), padding=(0, 0),
                 output_padding=(0, 0), dilation=(1, 1), groups=1, bias=True) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         output_padding=output_padding, groups=groups, bias=bias, dilation=dilation)
