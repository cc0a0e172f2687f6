"""Pieces shared by the composite CNN blocks of this pack (squeeze_excitation,
depthwise_separable_conv, inverted_residual, bottleneck): the named activations and gates a
block may be asked for, a batch norm for handwritten references that leaves the running
statistics alone, and the training-mode check that every batch norm inside a block has more
than one value per channel.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hndl import HNDLError

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


def reference_batch_norm(x: torch.Tensor, norm: nn.BatchNorm2d) -> torch.Tensor:
    """F.batch_norm on copies of the running statistics, so a reference call never moves them."""
    return F.batch_norm(x, norm.running_mean.clone(), norm.running_var.clone(), norm.weight, norm.bias,
                        training=norm.training, momentum=norm.momentum, eps=norm.eps)


def check_batch_variance(module: nn.Module, x: torch.Tensor, spatial: Callable[[int, int], tuple[int, int]],
                         alias: str) -> None:
    """In training mode, fail with E_RUNTIME before anything runs when the smallest batch norm
    of the block would see one value per channel (``B * H * W == 1``, where ``spatial`` maps
    the input's H, W to that norm's), instead of letting torch raise a ValueError halfway
    through, after earlier norms moved their running statistics. Tracers record no Python
    branch, so only a real tensor is checked."""
    if not module.training or not isinstance(x, torch.Tensor) or torch.jit.is_tracing():
        return
    height, width = spatial(x.shape[2], x.shape[3])
    if x.shape[0] * height * width == 1:
        raise HNDLError(
            "E_RUNTIME",
            f"{alias} in training mode needs more than one value per channel in every batch norm, but input "
            f"{list(x.shape)} leaves one at spatial size {height} x {width}",
            remedies=("Train with a batch of at least two examples, or call model.eval().",),
        )
