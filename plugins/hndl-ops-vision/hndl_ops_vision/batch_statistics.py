"""The one batch-statistics rule the vision pack's normalizing operators share."""

from __future__ import annotations

import torch
from torch import nn


def one_value_per_channel(module: nn.Module, x: object) -> bool:
    """Whether a training-mode call would normalize channels that hold a single value each.

    Batch statistics then have no variance. Only a real tensor is checked: under fx (proxies) and
    ``torch.jit.trace`` the check would be a Python branch on a traced shape, which neither can record.
    """
    return (module.training and isinstance(x, torch.Tensor) and not torch.jit.is_tracing()
            and x.numel() == x.shape[1])
