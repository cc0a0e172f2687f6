"""hndl-ops-basic: the first-party pack of general-purpose operators (pack name ``basic``)."""

from hndl.packs import hookimpl

from .add import Add
from .channel_add import ChannelAdd
from .channel_scale_shift import ChannelScaleShift
from .chunk import Chunk
from .concat import Concat
from .dropout import Dropout
from .embedding import Embedding
from .flatten import Flatten
from .gelu import GELU
from .hardsigmoid import Hardsigmoid
from .hardswish import Hardswish
from .hardtanh import Hardtanh
from .layer_norm import LayerNorm
from .leaky_relu import LeakyReLU
from .linear import Linear
from .log_softmax import LogSoftmax
from .matmul import MatMul
from .max import Max
from .mean import Mean
from .mish import Mish
from .mul import Mul
from .permute import Permute
from .quick_gelu import QuickGELU
from .relu import ReLU
from .relu6 import ReLU6
from .reshape import Reshape
from .rms_norm import RMSNorm
from .select import Select
from .sigmoid import Sigmoid
from .softmax import Softmax
from .split import Split
from .squeeze import Squeeze
from .swish import Swish
from .tanh import Tanh
from .transpose import Transpose
from .unsqueeze import Unsqueeze

OPERATORS = (
    Linear, ReLU, LeakyReLU, Tanh, Reshape, Flatten, Split, Chunk, Concat, Add, Dropout,
    Embedding, GELU, Sigmoid, Softmax, LayerNorm, RMSNorm, Mul,
    ReLU6, Hardtanh, Swish, Hardswish, Hardsigmoid, Mish, LogSoftmax,
    Transpose, Permute, Unsqueeze, Squeeze, Mean, Max, Select,
    MatMul, QuickGELU, ChannelAdd, ChannelScaleShift,
)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
