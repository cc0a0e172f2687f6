"""inverted_residual@2: the MobileNetV2/V3 inverted residual and EfficientNet MBConv block, one node.

Version 2 registers every stage in execution order (the squeeze-and-excitation between the
depthwise stage and the projection, as torchvision does), and configures the block the way
torchvision and timm do: an explicit hidden width or a rounded ratio, the squeeze width from the
block's input or its hidden width (rounded to a divisor), batch-norm eps and momentum, a
dilation, stochastic depth on the branch, and torchvision's MobileNetV2 or MobileNetV3/MBConv
state names. ``inverted_residual_v1`` keeps version 1 for saved plans.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .batch_statistics import check_batch_variance, reference_batch_norm
from .block_parts import ACTIVATION_MODULES, ACTIVATIONS, GATES, make_divisible, norm_args, same_padding
from .convolution import SPATIAL_AXES, conv_output, window_relation
from .squeeze_excitation import SqueezeExcitation
from .stochastic_depth import StochasticDepth, drop_paths

#: State-dictionary layouts: torchvision's MobileNetV2 ``InvertedResidual`` (``conv.*``) and its
#: MobileNetV3 ``InvertedResidual`` / EfficientNet ``MBConv`` (``block.*``).
LAYOUTS = ("mobilenet_v2", "mobilenet_v3")
#: What the squeeze-and-excitation ratio multiplies.
SE_BASES = ("input", "hidden")


def hidden_width(in_channels: int, expand_ratio: float | None, hidden_channels: int | None, divisor: int) -> int:
    """The expanded width: ``hidden_channels`` when written; otherwise ``round(C_in * expand_ratio)``
    (torchvision's MobileNetV2, ``divisor=1``) or ``make_divisible(C_in * expand_ratio, divisor)``
    (EfficientNet's ``adjust_channels``, ``divisor=8``)."""
    if hidden_channels is not None:
        return hidden_channels
    if divisor == 1:
        return int(round(in_channels * expand_ratio))
    return make_divisible(in_channels * expand_ratio, divisor)


def squeeze_width(in_channels: int, hidden: int, se_ratio: float, se_from: str, se_divisor: int) -> int:
    """``make_divisible(int(base * se_ratio), se_divisor)`` with ``base`` the block's input channels
    (EfficientNet: ``max(1, C_in // 4)``) or its hidden width (MobileNetV3:
    ``make_divisible(hidden // 4, 8)``); with ``se_divisor=1`` it is ``max(1, int(base * se_ratio))``."""
    base = in_channels if se_from == "input" else hidden
    return make_divisible(int(base * se_ratio), se_divisor)


def keeps_shape(kernel_size: int, stride: int) -> bool:
    """Whether the depthwise stage keeps H and W, so the block may add its input back: stride 1
    and an odd kernel (padding ``(k - 1) // 2 * dilation`` trims rows and columns from an even one)."""
    return stride == 1 and kernel_size % 2 == 1


def _validate(args) -> None:
    """Exactly one of expand_ratio and hidden_channels (hidden_divisor only with the ratio); an
    explicit se_channels excludes the arguments that compute a squeeze width."""
    ratio, hidden = args.get("expand_ratio"), args.get("hidden_channels")
    if (ratio is None) == (hidden is None):
        raise HNDLError(
            "E_ARGUMENT",
            "inverted_residual needs exactly one of expand_ratio and hidden_channels to know its hidden width, got "
            + ("neither" if ratio is None else "both"),
            field="expand_ratio",
            remedies=("Give expand_ratio (MobileNetV2: inverted_residual(24, 6)) or an explicit hidden width "
                      "(MobileNetV3: inverted_residual(24, hidden_channels=72)), not both.",),
        )
    if hidden is not None and args.get("hidden_divisor", 1) != 1:
        raise HNDLError(
            "E_ARGUMENT",
            "inverted_residual's hidden_divisor rounds C_in * expand_ratio, but hidden_channels gives the width "
            "itself",
            field="hidden_divisor",
            remedies=("Drop hidden_divisor=, or give expand_ratio= instead of hidden_channels=.",),
        )
    if args.get("se_channels") is not None and (args.get("se_ratio", 0.0) > 0 or args.get("se_divisor", 1) != 1
                                                or args.get("se_from", "input") != "input"):
        raise HNDLError(
            "E_ARGUMENT",
            "inverted_residual got se_channels (an explicit squeeze width) together with se_ratio, se_from or "
            "se_divisor, which compute one",
            field="se_channels",
            remedies=("Give se_channels= alone, or se_ratio= (with se_from and se_divisor) alone.",),
        )


def _relation(s) -> None:
    """The depthwise convolution's equation per spatial axis (the 1x1 convolutions keep H and W)."""
    k, stride, dilation = s.args["kernel_size"], s.args["stride"], s.args["dilation"]
    window_relation(s, ((axis, k, stride, same_padding(k, dilation), dilation) for axis in SPATIAL_AXES))


def _layers(sequence: nn.Module):
    """The block's leaves in execution order (the layout's nesting flattened)."""
    for layer in sequence:
        if isinstance(layer, nn.Sequential):
            yield from _layers(layer)
        else:
            yield layer


def _reference(module):
    """The block written out with torch.nn.functional over the module's parameters."""
    activation = ACTIVATIONS[module.activation]

    def squeeze_excitation(x, se):
        scale = ACTIVATIONS[se.activation](F.conv2d(x.mean(dim=(2, 3), keepdim=True), se.fc1.weight, se.fc1.bias))
        return x * GATES[se.gate](F.conv2d(scale, se.fc2.weight, se.fc2.bias))

    def forward(x):
        out = x
        for layer in _layers(module.body):
            if isinstance(layer, nn.Conv2d):
                out = F.conv2d(out, layer.weight, None, layer.stride, layer.padding, layer.dilation, layer.groups)
            elif isinstance(layer, nn.BatchNorm2d):
                out = reference_batch_norm(out, layer)
            elif isinstance(layer, SqueezeExcitation):
                out = squeeze_excitation(out, layer)
            else:  # the activation module after the expansion or the depthwise stage
                out = activation(out)
        if not module.residual:
            return out
        return x + drop_paths(out, module.stochastic_depth.p, "row", module.training)

    return forward


@operator(
    "inverted_residual",
    torch=TorchSpelling(signature="torchvision InvertedResidual(inp, oup, stride, expand_ratio)"),
    version=2,
    summary="MobileNetV2/V3 inverted residual (EfficientNet MBConv): 1x1 expand, depthwise k x k, optional "
            "squeeze-excitation, 1x1 linear project, and a skip (with optional stochastic depth) when the shape "
            "is kept.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    validate=_validate,
    shape_text="H_out = floor((H + 2 * ((k - 1) // 2) * d - d * (k - 1) - 1) / stride) + 1, the same for W; inverted "
               "as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels of the projection. Omit them to infer them from what consumes "
                                 "the result."),
        "expand_ratio": Arg(float, None, min=1, max=MAX_EXTENT,
                            help="Hidden width = round(C_in * expand_ratio) (MobileNetV2: 1 and 6), or "
                                 "make_divisible(C_in * expand_ratio, hidden_divisor); give this or "
                                 "hidden_channels."),
        "hidden_channels": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                               help="An explicit hidden (expanded) width, as MobileNetV3's tables give it (16 -> 72 "
                                    "-> 24); give this or expand_ratio."),
        "hidden_divisor": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                              help="Round C_in * expand_ratio to a multiple of this with torchvision's "
                                   "_make_divisible (EfficientNet: 8); 1 rounds to the nearest integer."),
        "kernel_size": Arg(int, 3, min=1, max=MAX_EXTENT, positional=False,
                           help="Depthwise kernel extent, padded by (kernel_size - 1) // 2 * dilation (EfficientNet "
                                "and MobileNetV3 use 3 and 5); an even kernel changes H and W, so the block has no "
                                "skip."),
        "stride": Arg(int, 1, min=1, max=2, positional=False,
                      help="Depthwise stride: 1 keeps H and W with an odd kernel (and allows the skip), 2 halves "
                           "them (rounding up)."),
        "dilation": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                        help="Depthwise dilation (MobileNetV3's dilated tail uses 2 at stride 1)."),
        "activation": Arg(str, "relu6", choices=tuple(ACTIVATIONS), positional=False,
                          help="Activation after the expansion and the depthwise stage: relu6 (MobileNetV2), silu "
                               "(EfficientNet), hardswish or relu (MobileNetV3)."),
        "se_ratio": Arg(float, 0.0, min=0, max=1, positional=False,
                        help="Squeeze-and-excitation after the depthwise stage, squeezing to "
                             "make_divisible(int(base * se_ratio), se_divisor) channels, base chosen by se_from "
                             "(EfficientNet: 0.25 of the input; MobileNetV3: 0.25 of the hidden width, divisor 8); "
                             "0 leaves it out unless se_channels is given."),
        "se_channels": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                           help="An explicit squeeze width (torchvision's squeeze_channels); adds the "
                                "squeeze-and-excitation. Give this or se_ratio."),
        "se_from": Arg(str, "input", choices=SE_BASES, positional=False,
                       help='What se_ratio multiplies: "input", the block\'s input channels (EfficientNet), or '
                            '"hidden", the expanded width (MobileNetV3, timm).'),
        "se_divisor": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                          help="Round the squeeze width to a multiple of this (MobileNetV3: 8); 1 keeps "
                               "max(1, int(base * se_ratio))."),
        "se_activation": Arg(str, "relu", choices=tuple(ACTIVATIONS), positional=False,
                             help="Activation inside the squeeze-and-excitation (EfficientNet: silu)."),
        "se_gate": Arg(str, "sigmoid", choices=tuple(GATES), positional=False,
                       help="Gate of the squeeze-and-excitation: sigmoid, or hardsigmoid (MobileNetV3)."),
        **norm_args(),
        "stochastic_depth_prob": Arg(float, 0.0, min=0, max=1, positional=False,
                                     help="Stochastic depth on the branch before the skip is added (torchvision's "
                                          "MBConv, mode \"row\"); training only, and only when the block has its "
                                          "skip."),
        "layout": Arg(str, "mobilenet_v2", choices=LAYOUTS, positional=False,
                      help='State names: "mobilenet_v2" (conv.0.0 ..., torchvision\'s MobileNetV2) or '
                           '"mobilenet_v3" (block.0.0 ..., torchvision\'s MobileNetV3 and EfficientNet MBConv).'),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
    },
    category="block",
    examples=(
        Example("inverted_residual(8, 6)", ("B", 8, 6, 6), ("B", 8, 6, 6),
                note="MobileNetV2: 8 -> 48 -> 8 channels with the identity skip."),
        Example("inverted_residual(expand_ratio=1, stride=2)", ("B", 4, 7, 7), ("B", 8, 4, 4),
                note="No expansion; stride 2 and new channels, so no skip; 8 output channels are inferred."),
        Example('inverted_residual(8, 4, kernel_size=5, activation="silu", se_ratio=0.25, se_activation="silu", '
                'stochastic_depth_prob=0.2, layout="mobilenet_v3")',
                ("B", 8, 5, 5), ("B", 8, 5, 5), note="EfficientNet's MBConv with squeeze-and-excitation and "
                                                     "stochastic depth, with torchvision's MBConv state names."),
        Example('inverted_residual(24, hidden_channels=88, activation="hardswish", se_ratio=0.25, se_from="hidden", '
                'se_divisor=8, se_gate="hardsigmoid", norm_eps=0.001, norm_momentum=0.01, layout="mobilenet_v3")',
                ("B", 24, 4, 4), ("B", 24, 4, 4), note="A MobileNetV3 block: 24 -> 88 -> 24, squeeze width "
                                                       "make_divisible(88 // 4, 8) = 24."),
        Example("inverted_residual(6, 6, dilation=2)", ("B", 6, 5, 5), ("B", 6, 5, 5),
                note="A dilated depthwise stage keeps H and W (padding 2)."),
    ),
    reference=_reference,
)
class InvertedResidual(nn.Module):
    """The inverted residual block of MobileNetV2 (Sandler et al. 2018) and MobileNetV3
    (Howard et al. 2019), and the MBConv block of EfficientNet (Tan & Le 2019), as one node
    with one module, configured the way torchvision's `mobilenetv2.InvertedResidual`,
    `mobilenetv3.InvertedResidual` and `efficientnet.MBConv` (and timm's
    `InvertedResidual`) are. With `hidden` the expanded width:

        out = act(bn(conv1x1(x)))              # expand C_in -> hidden (only if hidden != C_in)
        out = act(bn(depthwise(out)))          # k x k, groups = hidden, stride, dilation d,
                                               # padding (k - 1) // 2 * d
        out = squeeze_excitation(out)          # only with se_ratio > 0 or se_channels
        out = bn(conv1x1(out))                 # project hidden -> C_out, linear (no activation)
        out = x + stochastic_depth(out)        # only if stride == 1, k is odd and C_in == C_out

    **Hidden width.** `hidden_channels` gives it (MobileNetV3's tables); otherwise
    `round(C_in * expand_ratio)` (MobileNetV2) or, with `hidden_divisor > 1`,
    `make_divisible(C_in * expand_ratio, hidden_divisor)` (EfficientNet rounds to 8). The
    expansion stage exists exactly when `hidden != C_in`, torchvision's rule.

    **Squeeze-and-excitation** (a squeeze_excitation module with `fc1`, `fc2` and biases): its
    width is `se_channels`, or `make_divisible(int(base * se_ratio), se_divisor)` with `base`
    the block's input channels (`se_from="input"`, EfficientNet's `max(1, C_in // 4)`) or the
    hidden width (`se_from="hidden"`, MobileNetV3's `make_divisible(hidden // 4, 8)`);
    `se_activation` runs inside and `se_gate` gates it (MobileNetV3: relu and hardsigmoid).

    **State, in execution order.** Every stage is registered in the order it runs, so printing
    the module, `named_parameters()` and the state dictionary follow the computation.
    `layout="mobilenet_v2"` names them as torchvision's MobileNetV2 (`conv.0.0`/`conv.0.1`
    expansion, `conv.1.*` depthwise, `conv.2.fc1`... squeeze-and-excitation if any, then the
    projection conv and norm as two entries); `layout="mobilenet_v3"` as torchvision's
    MobileNetV3 `InvertedResidual` and EfficientNet `MBConv` (`block.<i>.0`/`block.<i>.1` per
    stage, the squeeze-and-excitation `block.<i>.fc1`..., the projection `block.<last>.0/1`).
    Either way a torchvision block's state dictionary loads unchanged. The submodules are
    `conv` or `block` (also reachable as `body`) and `stochastic_depth` (no state).

    The convolutions have no bias. Every batch norm is `torch.nn.BatchNorm2d` with `norm_eps`
    and `norm_momentum` (torch's 1e-5 / 0.1 by default; MobileNetV3 uses 1e-3 / 0.01) and a
    learned affine, so train and eval mode differ, as for batch_norm.

    **Stochastic depth** (`stochastic_depth_prob`, torchvision's MBConv and timm's
    `drop_path_rate`) applies to the branch of a block that has its skip, in training mode
    only, as stochastic_depth does (mode "row"): a forward-time random operator under the
    dropout rules (§6): it draws from the host's torch RNG in training mode when the
    probability is positive, and never in eval mode or at 0. A block without its skip ignores it,
    as torchvision's does, so one rate can be given to every block of a stage.

    Whether the expansion, the squeeze-and-excitation and the skip exist is fixed at
    construction from the resolved channels and arguments. Parameters use PyTorch's default
    initialization. The activations are part of the block's declared semantics (§6 composite
    operators). Out-of-place. A training-mode call whose depthwise output holds one value per
    channel (`B * H_out * W_out == 1`) fails with `E_RUNTIME`."""

    def __init__(self, *, out_channels: int, in_channels: int, expand_ratio: float | None = None,
                 hidden_channels: int | None = None, hidden_divisor: int = 1, kernel_size: int = 3, stride: int = 1,
                 dilation: int = 1, activation: str = "relu6", se_ratio: float = 0.0, se_channels: int | None = None,
                 se_from: str = "input", se_divisor: int = 1, se_activation: str = "relu", se_gate: str = "sigmoid",
                 norm_eps: float = 1e-5, norm_momentum: float = 0.1, stochastic_depth_prob: float = 0.0,
                 layout: str = "mobilenet_v2") -> None:
        super().__init__()
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        self.activation, self.layout = activation, layout
        self.hidden_channels = hidden = hidden_width(in_channels, expand_ratio, hidden_channels, hidden_divisor)
        self.expand = hidden != in_channels
        self.residual = keeps_shape(kernel_size, stride) and in_channels == out_channels
        if se_channels is None and se_ratio > 0:
            se_channels = squeeze_width(in_channels, hidden, se_ratio, se_from, se_divisor)
        self.se_channels = se_channels

        def norm(channels: int) -> nn.BatchNorm2d:
            return nn.BatchNorm2d(channels, eps=norm_eps, momentum=norm_momentum)

        act = ACTIVATION_MODULES[activation]
        layers: list[nn.Module] = []
        if self.expand:
            layers.append(nn.Sequential(nn.Conv2d(in_channels, hidden, 1, bias=False), norm(hidden), act()))
        layers.append(nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel_size, stride=stride, padding=same_padding(kernel_size, dilation),
                      dilation=dilation, groups=hidden, bias=False),
            norm(hidden),
            act(),
        ))
        if se_channels is not None:
            layers.append(SqueezeExcitation(C=hidden, squeeze_channels=se_channels, activation=se_activation,
                                            gate=se_gate))
        projection = [nn.Conv2d(hidden, out_channels, 1, bias=False), norm(out_channels)]
        if layout == "mobilenet_v2":
            self.conv = nn.Sequential(*layers, *projection)
        else:
            self.block = nn.Sequential(*layers, nn.Sequential(*projection))
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    @property
    def body(self) -> nn.Sequential:
        """The stages in execution order: ``conv`` or ``block``, as ``layout`` names them."""
        return self.conv if self.layout == "mobilenet_v2" else self.block

    @property
    def se(self) -> SqueezeExcitation | None:
        """The squeeze-and-excitation stage, or None."""
        return next((layer for layer in self.body if isinstance(layer, SqueezeExcitation)), None)

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        padding = same_padding(self.kernel_size, self.dilation)
        return tuple(conv_output(extent, self.kernel_size, self.stride, padding, self.dilation)
                     for extent in (height, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_batch_variance(self, x, self._output_size, "inverted_residual")
        out = self.body(x)
        return x + self.stochastic_depth(out) if self.residual else out
