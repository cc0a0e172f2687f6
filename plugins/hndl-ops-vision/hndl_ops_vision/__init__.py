"""hndl-ops-vision: the first-party pack of vision operators (pack name ``vision``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .adaptive_avg_pool import AdaptiveAvgPool
from .adaptive_norm import AdaptiveNorm
from .avg_pool import AvgPool
from .batch_norm import BatchNorm
from .conv import Conv
from .conv1d import Conv1d
from .deconv import Deconv
from .group_norm import GroupNorm
from .instance_norm import InstanceNorm
from .max_pool import MaxPool
from .residual_block import ResidualBlock
from .upsample import Upsample

OPERATORS = (
    Conv, Deconv, AdaptiveNorm,
    Conv1d, BatchNorm, GroupNorm, InstanceNorm, MaxPool, AvgPool, AdaptiveAvgPool, Upsample, ResidualBlock,
)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
