"""Pieces shared by the composite CNN blocks of this pack (squeeze_excitation,
depthwise_separable_conv, inverted_residual, bottleneck): the named activations and gates a
block may be asked for, and its padding rule. The batch-statistics rules live in
``batch_statistics``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg


#: Activations a block accepts by name; every one is out-of-place.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "relu6": F.relu6,
    "silu": F.silu,
    "hardswish": F.hardswish,
}
#: The same activations as modules (for nn.Sequential stages), never in place.
ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "hardswish": nn.Hardswish,
}


def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``relu6(x + 3) / 6``, the values of F.hardsigmoid, written with clamp so that second
    derivatives exist (torch implements no derivative of hardsigmoid's backward)."""
    return torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


#: Gates (values in [0, 1]) a squeeze-and-excitation accepts by name.
GATES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "hardsigmoid": hard_sigmoid,
}


def same_padding(kernel: int, dilation: int = 1) -> int:
    """``(kernel - 1) // 2 * dilation``: keeps the extent of an odd kernel at stride 1
    (torchvision's Conv2dNormActivation pads this way)."""
    return (kernel - 1) // 2 * dilation




def make_divisible(value: float, divisor: int) -> int:
    """The nearest multiple of ``divisor`` to ``value``, at least ``divisor`` and never more than
    10% below ``value``: torchvision's and timm's ``_make_divisible`` / ``make_divisible``, the
    channel rounding of MobileNetV3 and EfficientNet. ``divisor=1`` gives ``max(1, round(value))``
    with halves rounded up."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def norm_args() -> dict[str, Arg]:
    """The ``norm_eps`` and ``norm_momentum`` arguments of a block whose batch norms torchvision
    and timm configure (``norm_layer=partial(nn.BatchNorm2d, eps=..., momentum=...)``)."""
    return {
        "norm_eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                        help="eps of every batch norm of the block (torch's default 1e-5; MobileNetV3 and "
                             "EfficientNet-B5..B7/V2 use 1e-3)."),
        "norm_momentum": Arg(float, 0.1, min=0, max=1, positional=False,
                             help="momentum of every batch norm's running statistics (torch's default 0.1; "
                                  "MobileNetV3 uses 0.01)."),
    }


def stochastic_depth_arg() -> Arg:
    """``stochastic_depth_prob`` of the ResNet blocks (residual_block, bottleneck): timm's
    ``drop_path_rate`` for one block."""
    return Arg(float, 0.0, min=0, max=1, positional=False,
               help="Stochastic depth on the residual branch before the skip is added (timm's ResNet drop path, "
                    'mode "row"): training only; 0 leaves it out.')
