"""bottleneck@2: the ResNet-50 bottleneck block (1x1, 3x3, 1x1 with batch norm, and a skip).

Version 2 adds the batch norms' ``norm_eps``/``norm_momentum``, the 3x3 convolution's
``dilation`` (torchvision's ``replace_stride_with_dilation``) and stochastic depth on the branch
(timm's ``drop_path_rate``); ``bottleneck_v1`` keeps version 1 for saved plans.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .batch_statistics import check_batch_variance, reference_batch_norm
from .block_parts import norm_args, stochastic_depth_arg
from .convolution import SPATIAL_AXES, window_relation
from .stochastic_depth import drop_paths


def _relation(s) -> None:
    """Spatial: O = floor((I - 1) / stride) + 1 per axis (the strided 3x3 with padding and dilation
    d, and the 1x1 projection at the same stride), inverted as an interval. Channels: C_out =
    expansion * width, solved in either direction, with width divisible by groups."""
    stride, dilation = s.args["stride"], s.args.get("dilation", 1)
    window_relation(s, ((axis, 3, stride, dilation, dilation) for axis in SPATIAL_AXES))
    expansion, groups = s.args["expansion"], s.args["groups"]
    width = s.args.get("width")
    if width is not None:
        s.axis("out", 1, expansion * width)
    else:
        out = s.shape("out")[1]
        if out is not None:
            if out % expansion:
                s.error("E_CONSTRAINT", f"bottleneck output channels {out} are not a multiple of expansion="
                                        f"{expansion}, so no width gives them")
            s.arg("width", out // expansion)
    width = s.args.get("width")
    if width is not None and width % groups:
        s.error("E_CONSTRAINT", f"bottleneck width {width} is not divisible by groups={groups}")


def _reference(module):
    """The block written out with torch.nn.functional over the module's own parameters."""
    stride, groups, dilation = module.stride, module.groups, module.dilation

    def forward(x):
        out = torch.relu(reference_batch_norm(F.conv2d(x, module.conv1.weight), module.bn1))
        out = torch.relu(reference_batch_norm(F.conv2d(out, module.conv2.weight, None, stride, dilation, dilation,
                                                       groups), module.bn2))
        out = reference_batch_norm(F.conv2d(out, module.conv3.weight), module.bn3)
        if module.downsample is None:
            skip = x
        else:
            projection, norm = module.downsample
            skip = reference_batch_norm(F.conv2d(x, projection.weight, None, stride), norm)
        out = drop_paths(out, module.stochastic_depth_prob, "row", module.training)
        return torch.relu(out + skip)

    return forward


@operator(
    "bottleneck",
    torch=TorchSpelling(signature="torchvision Bottleneck(inplanes, planes, stride=1, downsample=None, groups=1, "
                                 "base_width=64)"),
    version=2,
    summary="ResNet bottleneck block: 1x1 reduce, 3x3 (strided), 1x1 expand, each with batch norm, plus an "
            "identity or projected skip and a final ReLU.",
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
        "dilation": Arg(int, 1, min=1, max=MAX_EXTENT, positional=False,
                        help="Dilation (and padding) of the 3x3 convolution: torchvision's "
                             "replace_stride_with_dilation uses 2, 4 at stride 1 in segmentation backbones; H and W "
                             "are kept as at dilation 1."),
        **norm_args(),
        "stochastic_depth_prob": stochastic_depth_arg(),
    },
    category="block",
    examples=(
        Example("bottleneck(16)", ("B", 8, 6, 6), ("B", 16, 6, 6),
                note="width 4 = 16 / 4; the channels change, so the skip is a 1x1 convolution with batch norm."),
        Example("bottleneck(width=4)\nbottleneck()", ("B", 16, 6, 6), ("B", 16, 6, 6),
                note="Identity skips; the second block infers its 16 channels and width 4."),
        Example("bottleneck(stride=2, expansion=2, groups=2)", ("B", 8, 7, 7), ("B", 16, 4, 4),
                note="A ResNeXt-style block: width 8 in 2 groups, spatial halved, channels doubled."),
        Example("bottleneck(16, dilation=2, norm_eps=0.001, stochastic_depth_prob=0.1)", ("B", 16, 5, 5),
                ("B", 16, 5, 5), note="A dilated 3x3, configured batch norms and a drop path on the branch."),
    ),
    reference=_reference,
)
class Bottleneck(nn.Module):
    """The bottleneck block of ResNet-50/101/152 (He et al. 2016; torchvision's
    `resnet.Bottleneck`, the "ResNet v1.5" placement of the stride on the 3x3 convolution) as
    one node with one module:

        out  = relu(bn1(conv1(x)))          # conv1: 1x1, C_in -> width
        out  = relu(bn2(conv2(out)))        # conv2: 3x3, stride, padding = dilation = d, `groups`
        out  = bn3(conv3(out))              # conv3: 1x1, width -> expansion * width = C_out
        skip = x                            if stride == 1 and C_in == C_out
        skip = bn(conv1x1(x))               otherwise (stride `stride`)
        out  = relu(stochastic_depth(out) + skip)

    `width` is torchvision's `int(planes * base_width / 64) * groups`; with the defaults
    (`expansion=4`, `groups=1`) it is `planes`. Either channel count infers the other:
    `bottleneck(256)` has width 64, `bottleneck(width=64)` has 256 output channels, and
    `bottleneck()` takes `C_out` from what consumes it. `groups > 1` gives ResNeXt's grouped
    3x3 convolution. The convolutions have no bias (the batch norms that follow carry the
    shift). Every batch norm is `torch.nn.BatchNorm2d` with `norm_eps` and `norm_momentum`
    (torch's 1e-5 and 0.1 by default, as torchvision's ResNet) and a learned affine, so the block
    has running statistics and train and eval mode differ, as for batch_norm. `dilation` dilates
    (and pads) the 3x3 convolution as torchvision's `replace_stride_with_dilation` does, keeping
    the spatial arithmetic. `stochastic_depth_prob` drops the branch of whole examples in
    training mode before the skip is added, as timm's ResNet `drop_path_rate` does (also beside a
    projection): a forward-time random operator under the dropout rules (§6) when positive,
    drawing nothing in eval mode or at 0; it adds no submodule. Submodules are named and
    registered as in torchvision (`conv1` … `bn3`, `downsample.0`, `downsample.1`), so a
    torchvision or timm `Bottleneck` state dictionary loads unchanged, and
    `init=` paths such as `"bn3.weight"` (zero for torchvision's `zero_init_residual`) reach
    them. Whether the projection exists is fixed at construction from the resolved channels
    and stride; it follows the structure of residual_block, the basic block. Parameters use
    PyTorch's default initialization. The activations are part of the block's declared
    semantics (§6 composite operators). Out-of-place. A training-mode
    call whose strided convolution leaves one value per channel (`B * H_out * W_out == 1`)
    fails with `E_RUNTIME`."""

    def __init__(self, *, out_channels: int, in_channels: int, width: int, stride: int = 1, expansion: int = 4,
                 groups: int = 1, dilation: int = 1, norm_eps: float = 1e-5, norm_momentum: float = 0.1,
                 stochastic_depth_prob: float = 0.0) -> None:
        super().__init__()
        self.stride, self.groups, self.expansion, self.dilation = stride, groups, expansion, dilation
        self.stochastic_depth_prob = stochastic_depth_prob

        def norm(channels: int) -> nn.BatchNorm2d:
            return nn.BatchNorm2d(channels, eps=norm_eps, momentum=norm_momentum)

        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = norm(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=dilation, dilation=dilation, groups=groups,
                               bias=False)
        self.bn2 = norm(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = norm(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                norm(out_channels),
            )
        else:
            self.downsample = None

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        return (height - 1) // self.stride + 1, (width - 1) // self.stride + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_batch_variance(self, x, self._output_size, "bottleneck")
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = drop_paths(self.bn3(self.conv3(out)), self.stochastic_depth_prob, "row", self.training)
        skip = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + skip)
