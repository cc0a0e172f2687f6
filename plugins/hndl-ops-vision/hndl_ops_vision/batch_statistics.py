"""The batch-statistics rules the vision pack's normalizing operators share."""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hndl import HNDLError

TRAIN_REMEDY = "Train with a batch of at least two examples, or call model.eval()."


def checked_in_training(module: nn.Module, x: object) -> bool:
    """Whether a training-mode call on ``x`` is one whose batch statistics can be checked.

    Only a real tensor is checked: under fx (proxies) and ``torch.jit.trace`` the check would be a
    Python branch on a traced shape, which neither can record.
    """
    return module.training and isinstance(x, torch.Tensor) and not torch.jit.is_tracing()


def one_value_per_channel(module: nn.Module, x: object) -> bool:
    """Whether a training-mode call would normalize channels that hold a single value each
    (batch statistics then have no variance)."""
    return checked_in_training(module, x) and x.numel() == x.shape[1]


def one_value_error(alias: str, module: nn.Module, shape: tuple[int, ...]) -> None:
    """The ``runtime_check`` of the batch-norm operators: E_RUNTIME when a training-mode call on an
    input of ``shape`` would normalize channels that hold a single value each.

    The runtime runs it once per input signature before the node runs, so the node itself stays
    torch's own ``nn.BatchNorm1d`` / ``nn.BatchNorm2d`` (whose ``F.batch_norm`` would raise a
    ValueError only after counting the batch in ``num_batches_tracked``).
    """
    if module.training and math.prod(shape) == shape[1]:
        raise HNDLError(
            "E_RUNTIME",
            f"{alias} in training mode needs more than one value per channel, got input {list(shape)}",
            remedies=(TRAIN_REMEDY,),
        )


def check_batch_variance(module: nn.Module, x: torch.Tensor, spatial: Callable[[int, int], tuple[int, int]],
                         alias: str) -> None:
    """In training mode, fail with E_RUNTIME before anything runs when the smallest batch norm
    of a block would see one value per channel (``B * H * W == 1``, where ``spatial`` maps
    the input's H, W to that norm's), instead of letting torch raise a ValueError halfway
    through, after earlier norms moved their running statistics."""
    if not checked_in_training(module, x):
        return
    height, width = spatial(x.shape[2], x.shape[3])
    if x.shape[0] * height * width == 1:
        raise HNDLError(
            "E_RUNTIME",
            f"{alias} in training mode needs more than one value per channel in every batch norm, but input "
            f"{list(x.shape)} leaves one at spatial size {height} x {width}",
            remedies=(TRAIN_REMEDY,),
        )


def reference_batch_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """F.batch_norm on copies of the running statistics, so a reference call never moves them
    (the momentum, ``None`` for torch's cumulative average, changes only those copies)."""
    momentum = 0.0 if norm.momentum is None else norm.momentum
    return F.batch_norm(x, norm.running_mean.clone(), norm.running_var.clone(), norm.weight, norm.bias,
                        training=norm.training, momentum=momentum, eps=norm.eps)


def batch_norm_reference(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The ``reference=`` of the batch-norm operators: ``reference_batch_norm`` with the module's own state."""
    return lambda x: reference_batch_norm(x, module)
