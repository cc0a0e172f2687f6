"""hndl-ops-basic: the first-party pack of general-purpose operators (pack name ``basic``)."""

from hndl.packs import hookimpl

from .add import Add
from .chunk import Chunk
from .concat import Concat
from .dropout import Dropout
from .embedding import Embedding
from .flatten import Flatten
from .gelu import GELU
from .layer_norm import LayerNorm
from .leaky_relu import LeakyReLU
from .linear import Linear
from .mul import Mul
from .relu import ReLU
from .reshape import Reshape
from .rms_norm import RMSNorm
from .sigmoid import Sigmoid
from .softmax import Softmax
from .split import Split
from .tanh import Tanh

OPERATORS = (
    Linear, ReLU, LeakyReLU, Tanh, Reshape, Flatten, Split, Chunk, Concat, Add, Dropout,
    Embedding, GELU, Sigmoid, Softmax, LayerNorm, RMSNorm, Mul,
)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
