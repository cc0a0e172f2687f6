"""hndl-ops-vision: the first-party pack of vision operators (pack name ``vision``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .adaptive_avg_pool import AdaptiveAvgPool
from .adaptive_avg_pool1d import AdaptiveAvgPool1d
from .adaptive_norm import AdaptiveNorm
from .avg_pool import AvgPool
from .avg_pool_v1 import AvgPoolV1
from .avg_pool1d import AvgPool1d
from .avg_pool1d_v1 import AvgPool1dV1
from .batch_norm import BatchNorm
from .batch_norm1d import BatchNorm1d
from .bottleneck import Bottleneck
from .bottleneck_v1 import BottleneckV1
from .channel_layer_norm import ChannelLayerNorm
from .channel_shuffle import ChannelShuffle
from .conv import Conv
from .conv1d import Conv1d
from .conv1d_v1 import Conv1dV1
from .conv_v1 import ConvV1
from .crop import Crop
from .deconv import Deconv
from .depthwise_separable_conv import DepthwiseSeparableConv
from .depthwise_separable_conv_v1 import DepthwiseSeparableConvV1
from .group_norm import GroupNorm
from .instance_norm import InstanceNorm
from .inverted_residual import InvertedResidual
from .inverted_residual_v1 import InvertedResidualV1
from .layer_scale import LayerScale
from .max_pool import MaxPool
from .max_pool_v1 import MaxPoolV1
from .max_pool1d import MaxPool1d
from .max_pool1d_v1 import MaxPool1dV1
from .residual_block import ResidualBlock
from .residual_block_v1 import ResidualBlockV1
from .squeeze_excitation import SqueezeExcitation
from .stochastic_depth import StochasticDepth
from .upsample import Upsample
from .patch_merging import PatchMerging
from .swin_block import SwinBlock
from .window_attention import WindowAttention
from .window_merge import WindowMerge
from .window_partition import WindowPartition

OPERATORS = (
    Conv, Deconv, AdaptiveNorm,
    Conv1d, BatchNorm, GroupNorm, InstanceNorm, MaxPool, AvgPool, AdaptiveAvgPool, Upsample, ResidualBlock,
    BatchNorm1d, MaxPool1d, AvgPool1d, AdaptiveAvgPool1d, Crop, ChannelLayerNorm,
    SqueezeExcitation, LayerScale, StochasticDepth, DepthwiseSeparableConv, InvertedResidual, Bottleneck,
    MaxPoolV1, AvgPoolV1, MaxPool1dV1, AvgPool1dV1, ChannelShuffle,
    WindowPartition, WindowMerge, WindowAttention, PatchMerging, SwinBlock,
    InvertedResidualV1, ResidualBlockV1, BottleneckV1, DepthwiseSeparableConvV1,
    ConvV1, Conv1dV1,
)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
