"""inverted_residual@1 (alias inverted_residual_v1): the inverted residual block as version 1 declared it.

Kept so that plans saved before ``inverted_residual`` registered its squeeze-and-excitation in
execution order and gained the torchvision/timm configuration (version 2) still restore, rebuild
and load their state dictionaries (the ``se`` submodule after ``conv``). New specifications use
``inverted_residual``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT

from .batch_statistics import check_batch_variance, reference_batch_norm
from .block_parts import ACTIVATION_MODULES, ACTIVATIONS, GATES, same_padding
from .convolution import SPATIAL_AXES, conv_output, window_relation
from .squeeze_excitation import SqueezeExcitation


def expanded_width(in_channels: int, expand_ratio: float) -> int:
    """The hidden width, ``int(round(C_in * expand_ratio))`` as in torchvision's MobileNetV2."""
    return int(round(in_channels * expand_ratio))


def keeps_shape(kernel_size: int, stride: int) -> bool:
    """Whether the depthwise stage keeps H and W, so the block may add its input back: stride 1
    and an odd kernel (padding ``(k - 1) // 2`` trims one row and column from an even one)."""
    return stride == 1 and kernel_size % 2 == 1


def se_width(in_channels: int, se_ratio: float) -> int:
    """The squeeze width, ``max(1, int(C_in * se_ratio))``: relative to the block's input
    channels, as in EfficientNet (``max(1, C_in // 4)`` at 0.25)."""
    return max(1, int(in_channels * se_ratio))


def _relation(s) -> None:
    """The depthwise convolution's equation per spatial axis (the 1x1 convolutions keep H and W)."""
    k, stride = s.args["kernel_size"], s.args["stride"]
    window_relation(s, ((axis, k, stride, same_padding(k), 1) for axis in SPATIAL_AXES))


def _stage(x, stage, activation, **conv_kwargs):
    conv, norm = stage[0], stage[1]
    return activation(reference_batch_norm(F.conv2d(x, conv.weight, None, **conv_kwargs), norm))


def _reference(module):
    """The block written out with torch.nn.functional over the module's parameters."""
    activation = ACTIVATIONS[module.activation]
    se_activation, se_gate = ACTIVATIONS[module.se_activation], GATES[module.se_gate]

    def forward(x):
        stages = list(module.conv)
        out = x
        if module.expand:
            out = _stage(out, stages.pop(0), activation)
        out = _stage(out, stages[0], activation, stride=module.stride, padding=same_padding(module.kernel_size),
                     groups=module.hidden_channels)
        if module.se is not None:
            scale = se_activation(F.conv2d(out.mean(dim=(2, 3), keepdim=True), module.se.fc1.weight,
                                           module.se.fc1.bias))
            out = out * se_gate(F.conv2d(scale, module.se.fc2.weight, module.se.fc2.bias))
        out = reference_batch_norm(F.conv2d(out, stages[1].weight), stages[2])
        return x + out if module.residual else out

    return forward


@operator(
    "inverted_residual_v1",
    identity="inverted_residual",
    version=1,
    summary="Version 1 of inverted_residual (squeeze-excitation registered after the projection as `se`, fixed "
            "batch-norm eps and momentum), kept so saved inverted_residual@1 plans restore.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    shape_text="H_out = floor((H + 2 * ((k - 1) // 2) - k) / stride) + 1, the same for W; inverted as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels of the projection. Omit them to infer them from what consumes "
                                 "the result."),
        "expand_ratio": Arg(float, min=1, max=MAX_EXTENT,
                            help="Hidden width = round(C_in * expand_ratio); 1 skips the expansion convolution "
                                 "(MobileNetV2 uses 1 and 6)."),
        "kernel_size": Arg(int, 3, min=1, max=MAX_EXTENT, positional=False,
                           help="Depthwise kernel extent, padded by (kernel_size - 1) // 2 (EfficientNet uses 3 and "
                                "5); an even kernel trims H and W by one, so the block has no skip."),
        "stride": Arg(int, 1, min=1, max=2, positional=False,
                      help="Depthwise stride: 1 keeps H and W with an odd kernel (and allows the skip), 2 halves "
                           "them (rounding up)."),
        "activation": Arg(str, "relu6", choices=tuple(ACTIVATIONS), positional=False,
                          help="Activation after the expansion and the depthwise stage: relu6 (MobileNetV2), silu "
                               "(EfficientNet), hardswish or relu (MobileNetV3)."),
        "se_ratio": Arg(float, 0.0, min=0, max=1, positional=False,
                        help="Squeeze-and-excitation after the depthwise stage, squeezing to max(1, int(C_in * "
                             "se_ratio)) channels (EfficientNet: 0.25); 0 leaves it out."),
        "se_activation": Arg(str, "relu", choices=tuple(ACTIVATIONS), positional=False,
                             help="Activation inside the squeeze-and-excitation (EfficientNet: silu)."),
        "se_gate": Arg(str, "sigmoid", choices=tuple(GATES), positional=False,
                       help="Gate of the squeeze-and-excitation: sigmoid, or hardsigmoid (MobileNetV3)."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    },
    category="block",
    examples=(
        Example("inverted_residual_v1(8, 6)", ("B", 8, 6, 6), ("B", 8, 6, 6),
                note="MobileNetV2: 8 -> 48 -> 8 channels with the identity skip."),
        Example("inverted_residual_v1(expand_ratio=1, stride=2)", ("B", 4, 7, 7), ("B", 8, 4, 4),
                note="No expansion; stride 2 and new channels, so no skip; 8 output channels are inferred."),
        Example('inverted_residual_v1(8, 4, kernel_size=5, activation="silu", se_ratio=0.25, se_activation="silu")',
                ("B", 8, 5, 5), ("B", 8, 5, 5), note="EfficientNet's MBConv with squeeze-and-excitation."),
    ),
    reference=_reference,
)
class InvertedResidualV1(nn.Module):
    """`inverted_residual@1`, frozen. Write `inverted_residual` (version 2) in new specifications:
    this alias exists for saved plans, which record the identity `inverted_residual@1`.

    The inverted residual block of MobileNetV2 (Sandler et al. 2018; torchvision's
    `mobilenetv2.InvertedResidual`), with the MBConv options of EfficientNet (Tan & Le
    2019), as one node with one module. With `hidden = round(C_in * expand_ratio)`:

        out = act(bn(conv1x1(x)))                  # expand C_in -> hidden (skipped if expand_ratio == 1)
        out = act(bn(depthwise(out)))              # k x k, groups = hidden, stride, padding (k - 1) // 2
        out = squeeze_excitation(out)              # only if se_ratio > 0
        out = bn(conv1x1(out))                     # project hidden -> C_out, linear (no activation)
        out = x + out                              # only if stride == 1, k is odd and C_in == C_out

    The defaults (kernel 3, relu6, no squeeze-and-excitation) are MobileNetV2's block. The
    convolutions have no bias; every batch norm is `torch.nn.BatchNorm2d` (eps 1e-5, momentum
    0.1, learned affine), so the block has running statistics and train and eval mode differ,
    as for batch_norm. Submodules are named as in torchvision (`conv.0.0` expand conv,
    `conv.0.1` its norm, then the depthwise stage, the projection conv and its norm), so a
    torchvision MobileNetV2 `InvertedResidual` state dictionary loads unchanged. The
    squeeze-and-excitation, when present, is the `se` submodule (a squeeze_excitation with
    `fc1` and `fc2`), squeezing to `max(1, int(C_in * se_ratio))` channels — relative to the
    block's input, as in EfficientNet — with `se_activation` inside and `se_gate` as its gate.
    EfficientNet's MBConv is `activation="silu", se_ratio=0.25, se_activation="silu"`; its
    hidden width rounds to a multiple of 8 instead, which agrees whenever `C_in *
    expand_ratio` is one. Stochastic depth on the branch is not part of this block (use
    convolutions, `stochastic_depth` and `add` for that).

    Whether the expansion and the skip exist is fixed at construction from the resolved
    channels, ratio, kernel and stride (the skip needs the shape kept: stride 1 and an odd
    kernel). Parameters use PyTorch's default initialization. The
    activations are part of the block's declared semantics (§6 composite operators). No
    randomness in forward; out-of-place. A training-mode call whose depthwise output holds one
    value per channel (`B * H_out * W_out == 1`) fails with `E_RUNTIME`."""

    def __init__(self, *, out_channels: int, in_channels: int, expand_ratio: float, kernel_size: int = 3,
                 stride: int = 1, activation: str = "relu6", se_ratio: float = 0.0, se_activation: str = "relu",
                 se_gate: str = "sigmoid") -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride
        self.activation, self.se_activation, self.se_gate = activation, se_activation, se_gate
        self.hidden_channels = hidden = expanded_width(in_channels, expand_ratio)
        self.expand = expand_ratio != 1
        self.residual = keeps_shape(kernel_size, stride) and in_channels == out_channels
        act = ACTIVATION_MODULES[activation]
        stages: list[nn.Module] = []
        if self.expand:
            stages.append(nn.Sequential(nn.Conv2d(in_channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), act()))
        stages.append(nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel_size, stride=stride, padding=same_padding(kernel_size), groups=hidden,
                      bias=False),
            nn.BatchNorm2d(hidden),
            act(),
        ))
        stages += [nn.Conv2d(hidden, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels)]
        self.conv = nn.Sequential(*stages)
        self.se = SqueezeExcitation(C=hidden, squeeze_channels=se_width(in_channels, se_ratio),
                                    activation=se_activation, gate=se_gate) if se_ratio > 0 else None

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        padding = same_padding(self.kernel_size)
        return tuple(conv_output(extent, self.kernel_size, self.stride, padding, 1) for extent in (height, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_batch_variance(self, x, self._output_size, "inverted_residual_v1")
        out = x
        stages = len(self.conv) - 2  # the expansion (if any) and the depthwise stage
        for index in range(stages):
            out = self.conv[index](out)
        if self.se is not None:
            out = self.se(out)
        out = self.conv[-1](self.conv[-2](out))
        return x + out if self.residual else out
