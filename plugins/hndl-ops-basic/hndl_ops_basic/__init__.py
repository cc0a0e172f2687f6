"""hndl-ops-basic: the first-party pack of general-purpose operators (pack name ``basic``)."""

from hndl.packs import hookimpl

from .add import Add
from .chunk import Chunk
from .concat import Concat
from .dropout import Dropout
from .flatten import Flatten
from .leaky_relu import LeakyReLU
from .linear import Linear
from .relu import ReLU
from .reshape import Reshape
from .split import Split
from .tanh import Tanh

OPERATORS = (Linear, ReLU, LeakyReLU, Tanh, Reshape, Flatten, Split, Chunk, Concat, Add, Dropout)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
