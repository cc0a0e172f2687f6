"""residual_block@2: the ResNet basic block (two 3x3 convolutions with batch norm, and a skip).

Version 2 adds the batch norms' ``norm_eps``/``norm_momentum`` and stochastic depth on the branch
(timm's ``drop_path_rate``); ``residual_block_v1`` keeps version 1 for saved plans.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .batch_statistics import TRAIN_REMEDY, one_value_per_channel, reference_batch_norm
from .block_parts import norm_args, stochastic_depth_arg
from .convolution import SPATIAL_AXES, window_relation
from .stochastic_depth import drop_paths


def _relation(s) -> None:
    """Both paths use O = floor((I - 1) / stride) + 1 per spatial axis (3x3 padding 1, or 1x1
    padding 0, at the block's stride), inverted as an interval."""
    stride = s.args["stride"]
    window_relation(s, ((axis, 3, stride, 1, 1) for axis in SPATIAL_AXES))


def _reference(module):
    """The basic block written out with torch.nn.functional over the module's own parameters."""
    stride = module.stride

    def forward(x):
        out = F.conv2d(x, module.conv1.weight, None, stride, 1)
        out = torch.relu(reference_batch_norm(out, module.bn1))
        out = reference_batch_norm(F.conv2d(out, module.conv2.weight, None, 1, 1), module.bn2)
        if module.downsample is None:
            skip = x
        else:
            projection, norm = module.downsample
            skip = reference_batch_norm(F.conv2d(x, projection.weight, None, stride, 0), norm)
        out = drop_paths(out, module.stochastic_depth_prob, "row", module.training)
        return torch.relu(out + skip)

    return forward


@operator(
    "residual_block",
    torch=TorchSpelling(signature="torchvision BasicBlock(inplanes, planes, stride=1, downsample=None)"),
    version=2,
    summary="ResNet basic block: two 3x3 convolutions with batch norm and ReLU, plus an identity or projected skip.",
    shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
    relation=_relation,
    shape_text="H_out = floor((H - 1) / stride) + 1, the same for W; inverted as an interval.",
    args={
        "out_channels": Arg(int, min=1, inferable=True, dim="C_out",
                            help="Output channels of both convolutions. Omit them to infer them from what consumes "
                                 "the result."),
        "stride": Arg(int, 1, min=1, max=2, positional=False,
                      help="Stride of the first convolution and of the projection: 1 keeps H and W, 2 halves them "
                           "(rounding up)."),
        "in_channels": Arg(int, min=1, inferable=True, dim="C_in", positional=False,
                           help="Input channels; normally inferred from the producer."),
        **norm_args(),
        "stochastic_depth_prob": stochastic_depth_arg(),
    },
    category="block",
    examples=(
        Example("residual_block(16, stride=2, norm_eps=0.001, norm_momentum=0.01, stochastic_depth_prob=0.1)",
                ("B", 8, 8, 8), ("B", 16, 4, 4), note="timm-style: configured batch norms and a drop path."),
        Example("residual_block(16, stride=2)", ("B", 8, 8, 8), ("B", 16, 4, 4),
                note="Channels and stride change, so the skip is a 1x1 convolution with batch norm."),
        Example("conv(8, kernel_size=3, padding=1)\nresidual_block(8)\nresidual_block()", ("B", 3, 6, 6),
                ("B", 8, 6, 6), note="Identity skips; the last block infers its 8 output channels."),
    ),
    reference=_reference,
)
class ResidualBlock(nn.Module):
    """The basic block of ResNet-18/34 (He et al. 2016; torchvision's `BasicBlock`) as one
    node with one module:

        out  = relu(bn1(conv1(x)))          # conv1: 3x3, stride `stride`, padding 1
        out  = bn2(conv2(out))              # conv2: 3x3, stride 1, padding 1
        skip = x                            if stride == 1 and C_in == C_out
        skip = bn(conv1x1(x))               otherwise (stride `stride`)
        out  = relu(stochastic_depth(out) + skip)

    The convolutions have no bias (the batch norms that follow carry the shift). Every batch
    norm is `torch.nn.BatchNorm2d` with `norm_eps` and `norm_momentum` (torch's 1e-5 and 0.1 by
    default, as torchvision's ResNet) and a learned affine, so the block has running statistics
    and behaves differently in train and eval mode, as batch_norm does.
    `stochastic_depth_prob` drops the branch of whole examples in training mode, before the skip
    is added, as timm's ResNet `drop_path_rate` does (also on a block with a projection); it is a
    forward-time random operator under the dropout rules (§6) when positive, and draws nothing in
    eval mode or at 0. Submodules are named as in torchvision (`conv1`, `bn1`, `conv2`, `bn2`,
    `downsample.0`, `downsample.1`, registered in the order torchvision registers them), so a
    torchvision or timm `BasicBlock` state dictionary loads unchanged, and `init=`/`trainable=`
    paths such as `"conv1.weight"` reach them (stochastic depth adds no submodule). Whether the
    projection exists is fixed at construction from the resolved channels and stride.
    Parameters use PyTorch's default initialization. The activations are part of the block's
    declared semantics (§6 composite operators); none is inserted around it. Out-of-place. A
    training-mode call whose first convolution leaves one value per channel
    (`B * H_out * W_out == 1`) has no batch variance and fails with `E_RUNTIME`."""

    def __init__(self, *, out_channels: int, in_channels: int, stride: int = 1, norm_eps: float = 1e-5,
                 norm_momentum: float = 0.1, stochastic_depth_prob: float = 0.0) -> None:
        super().__init__()
        self.stride = stride

        def norm(channels: int) -> nn.BatchNorm2d:
            return nn.BatchNorm2d(channels, eps=norm_eps, momentum=norm_momentum)

        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = norm(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                norm(out_channels),
            )
        else:
            self.downsample = None
        self.stochastic_depth_prob = stochastic_depth_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        if one_value_per_channel(self, out):
            raise HNDLError(
                "E_RUNTIME",
                f"residual_block in training mode needs more than one value per channel after its first "
                f"convolution, got {list(out.shape)}",
                remedies=(TRAIN_REMEDY,),
            )
        out = torch.relu(self.bn1(out))
        out = drop_paths(self.bn2(self.conv2(out)), self.stochastic_depth_prob, "row", self.training)
        skip = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + skip)
