"""depthwise_separable_conv@2: a depthwise convolution then a pointwise 1x1 convolution (MobileNetV1, Xception).

Version 2 adds the batch norms' ``norm_eps`` and ``norm_momentum``; ``depthwise_separable_conv_v1``
keeps version 1 for saved plans.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .batch_statistics import check_batch_variance, reference_batch_norm
from .block_parts import ACTIVATIONS, norm_args, same_padding
from .convolution import conv_output, spatial_windows, window_relation

#: Activation names accepted after each stage; "none" leaves the stages linear.
STAGE_ACTIVATIONS = ("none", *ACTIVATIONS)


def effective_padding(args) -> tuple[int, int]:
    """The written padding, or ``(k - 1) // 2 * d`` per axis when it is omitted."""
    if args["padding"] is not None:
        return args["padding"]
    return tuple(same_padding(k, d) for k, d in zip(args["kernel_size"], args["dilation"]))


def _relation(s) -> None:
    """The depthwise convolution's equation per spatial axis (the 1x1 pointwise keeps H and W)."""
    args = s.args
    padding = effective_padding(args)
    window_relation(s, spatial_windows(args["kernel_size"], args["stride"], padding, args["dilation"]))


def _stage(x, conv, norm, activation, **conv_kwargs):
    out = F.conv2d(x, conv.weight, conv.bias, **conv_kwargs)
    if norm is not None:
        out = reference_batch_norm(out, norm)
    return activation(out) if activation is not None else out


def _reference(module):
    """Both stages written out with torch.nn.functional over the module's parameters."""
    activation = ACTIVATIONS.get(module.activation)

    def forward(x):
        out = _stage(x, module.depthwise, module.depthwise_norm, activation, stride=module.stride,
                     padding=module.padding, dilation=module.dilation, groups=x.shape[1])
        return _stage(out, module.pointwise, module.pointwise_norm, activation)

    return forward


@operator(
    "depthwise_separable_conv",
    torch=TorchSpelling(
        signature="torchvision Conv2dNormActivation(in_channels, in_channels, groups=in_channels) + 1x1 "
                  "conv",
    ),
    version=2,
    summary="Depthwise separable convolution: a per-channel k x k convolution, then a 1x1 convolution mixing "
            "channels.",
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
        **norm_args(),
    },
    category="convolution",
    examples=(
        Example("depthwise_separable_conv(16)", ("B", 8, 6, 6), ("B", 16, 6, 6),
                note="Two linear convolutions with biases: 8 * 9 + 8 + 8 * 16 + 16 parameters."),
        Example('depthwise_separable_conv(stride=2, norm=True, activation="relu")', ("B", 4, 8, 8),
                ("B", 8, 4, 4), note="A MobileNetV1 layer; the 8 output channels come from the contract."),
        Example('depthwise_separable_conv(16, norm=True, activation="relu6", norm_eps=0.001, norm_momentum=0.01)',
                ("B", 8, 5, 5), ("B", 16, 5, 5), note="Batch norms configured as TensorFlow-trained models have "
                                                      "them (eps 1e-3)."),
    ),
    reference=_reference,
)
class DepthwiseSeparableConv(nn.Module):
    """A depthwise separable convolution (Howard et al. 2017, MobileNetV1; Chollet 2017,
    Xception) as one node:

        out = act(norm(depthwise(x)))     # k x k, groups = C_in: each channel filtered alone
        out = act(norm(pointwise(out)))   # 1x1, C_in -> C_out: channels mixed

    Without `norm` and `activation` (the defaults) it is exactly `conv(C_in, kernel_size=k,
    padding=p, groups=C_in)` followed by `conv(C_out, kernel_size=1)`: the existing `conv`
    operator supports `groups`, so a depthwise convolution alone is just conv with
    `groups=C_in`. This operator makes the pair one node whose channels infer in both
    directions without writing `groups=C_in` as a literal, and shares conv's spatial
    arithmetic (convolution.py). Both convolutions carry a bias. `norm=True` adds a
    `torch.nn.BatchNorm2d` (`norm_eps`, `norm_momentum`: torch's 1e-5 and 0.1 by default;
    learned affine) after each convolution and drops their biases (without `norm` the two
    norm arguments have no effect); `activation` names an activation applied after each stage, `"relu"`
    with `norm=True` being MobileNetV1's layer.
    With `norm`, train and eval mode differ as for batch_norm, and a training-mode call whose
    output holds one value per channel (`B * H_out * W_out == 1`) fails with `E_RUNTIME`.

    Only the depthwise convolution has `stride`, `padding` and `dilation`; its spatial
    equation is conv's, with `padding` defaulting to `(k - 1) // 2 * dilation` ("same" for an
    odd kernel at stride 1). Submodules, registered in execution order: `depthwise`, with
    `norm` `depthwise_norm`, then `pointwise` and with `norm` `pointwise_norm`. Parameters use
    PyTorch's default initialization. No randomness; out-of-place."""

    def __init__(self, *, out_channels: int, in_channels: int, kernel_size=(3, 3), stride=(1, 1), padding=None,
                 dilation=(1, 1), norm: bool = False, activation: str = "none", norm_eps: float = 1e-5,
                 norm_momentum: float = 0.1) -> None:
        super().__init__()
        self.stride, self.dilation = tuple(stride), tuple(dilation)
        self.padding = effective_padding({"padding": padding, "kernel_size": kernel_size, "dilation": dilation})
        self.kernel_size = tuple(kernel_size)
        self.activation = activation
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size, stride=stride, padding=self.padding,
                                   dilation=dilation, groups=in_channels, bias=not norm)
        self.depthwise_norm = nn.BatchNorm2d(in_channels, eps=norm_eps, momentum=norm_momentum) if norm else None
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=not norm)
        self.pointwise_norm = nn.BatchNorm2d(out_channels, eps=norm_eps, momentum=norm_momentum) if norm else None
        self._activation = ACTIVATIONS.get(activation)

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        return tuple(conv_output(extent, k, st, p, d) for extent, k, st, p, d in
                     zip((height, width), self.kernel_size, self.stride, self.padding, self.dilation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.depthwise_norm is not None:
            check_batch_variance(self, x, self._output_size, "depthwise_separable_conv")
        out = self.depthwise(x)
        if self.depthwise_norm is not None:
            out = self.depthwise_norm(out)
        if self._activation is not None:
            out = self._activation(out)
        out = self.pointwise(out)
        if self.pointwise_norm is not None:
            out = self.pointwise_norm(out)
        if self._activation is not None:
            out = self._activation(out)
        return out
