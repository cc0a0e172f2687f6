"""bottleneck@1: the ResNet-50 bottleneck block (1x1, 3x3, 1x1 with batch norm, and a skip)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator
from hndl.arg import MAX_EXTENT

from .batch_statistics import check_batch_variance, reference_batch_norm
from .convolution import SPATIAL_AXES, window_relation


def _relation(s) -> None:
    """Spatial: O = floor((I - 1) / stride) + 1 per axis (the strided 3x3 with padding 1, and the
    1x1 projection at the same stride), inverted as an interval. Channels: C_out = expansion *
    width, solved in either direction, with width divisible by groups."""
    stride = s.args["stride"]
    window_relation(s, ((axis, 3, stride, 1, 1) for axis in SPATIAL_AXES))
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
    stride, groups = module.stride, module.groups

    def forward(x):
        out = torch.relu(reference_batch_norm(F.conv2d(x, module.conv1.weight), module.bn1))
        out = torch.relu(reference_batch_norm(F.conv2d(out, module.conv2.weight, None, stride, 1, 1, groups),
                                              module.bn2))
        out = reference_batch_norm(F.conv2d(out, module.conv3.weight), module.bn3)
        if module.downsample is None:
            skip = x
        else:
            projection, norm = module.downsample
            skip = reference_batch_norm(F.conv2d(x, projection.weight, None, stride), norm)
        return torch.relu(out + skip)

    return forward


@operator(
    "bottleneck",
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
    },
    category="block",
    examples=(
        Example("bottleneck(16)", ("B", 8, 6, 6), ("B", 16, 6, 6),
                note="width 4 = 16 / 4; the channels change, so the skip is a 1x1 convolution with batch norm."),
        Example("bottleneck(width=4)\nbottleneck()", ("B", 16, 6, 6), ("B", 16, 6, 6),
                note="Identity skips; the second block infers its 16 channels and width 4."),
        Example("bottleneck(stride=2, expansion=2, groups=2)", ("B", 8, 7, 7), ("B", 16, 4, 4),
                note="A ResNeXt-style block: width 8 in 2 groups, spatial halved, channels doubled."),
    ),
    reference=_reference,
)
class Bottleneck(nn.Module):
    """The bottleneck block of ResNet-50/101/152 (He et al. 2016; torchvision's
    `resnet.Bottleneck`, the "ResNet v1.5" placement of the stride on the 3x3 convolution) as
    one node with one module:

        out  = relu(bn1(conv1(x)))          # conv1: 1x1, C_in -> width
        out  = relu(bn2(conv2(out)))        # conv2: 3x3, stride `stride`, padding 1, `groups`
        out  = bn3(conv3(out))              # conv3: 1x1, width -> expansion * width = C_out
        skip = x                            if stride == 1 and C_in == C_out
        skip = bn(conv1x1(x))               otherwise (stride `stride`)
        out  = relu(out + skip)

    `width` is torchvision's `int(planes * base_width / 64) * groups`; with the defaults
    (`expansion=4`, `groups=1`) it is `planes`. Either channel count infers the other:
    `bottleneck(256)` has width 64, `bottleneck(width=64)` has 256 output channels, and
    `bottleneck()` takes `C_out` from what consumes it. `groups > 1` gives ResNeXt's grouped
    3x3 convolution. The convolutions have no bias (the batch norms that follow carry the
    shift). Every batch norm is `torch.nn.BatchNorm2d` with eps 1e-5, momentum 0.1 and a
    learned affine, so the block has running statistics and train and eval mode differ, as for
    batch_norm. Submodules are named as in torchvision (`conv1` … `bn3`, `downsample.0`,
    `downsample.1`), so a torchvision `Bottleneck` state dictionary loads unchanged, and
    `init=` paths such as `"bn3.weight"` (zero for torchvision's `zero_init_residual`) reach
    them. Whether the projection exists is fixed at construction from the resolved channels
    and stride; it follows the structure of residual_block, the basic block. Parameters use
    PyTorch's default initialization. The activations are part of the block's declared
    semantics (§6 composite operators). No randomness in forward; out-of-place. A training-mode
    call whose strided convolution leaves one value per channel (`B * H_out * W_out == 1`)
    fails with `E_RUNTIME`."""

    def __init__(self, *, out_channels: int, in_channels: int, width: int, stride: int = 1, expansion: int = 4,
                 groups: int = 1) -> None:
        super().__init__()
        self.stride, self.groups, self.expansion = stride, groups, expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )
        else:
            self.downsample = None

    def _output_size(self, height: int, width: int) -> tuple[int, int]:
        return (height - 1) // self.stride + 1, (width - 1) // self.stride + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_batch_variance(self, x, self._output_size, "bottleneck")
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        skip = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + skip)
