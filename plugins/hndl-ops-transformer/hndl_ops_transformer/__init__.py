"""hndl-ops-transformer: the first-party pack of transformer operators (pack name ``transformer``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .attention import Attention
from .feed_forward import FeedForward
from .moe import MoE
from .positional_embedding import PositionalEmbedding
from .transformer_block import TransformerBlock

OPERATORS: tuple[type, ...] = (PositionalEmbedding, Attention, FeedForward, TransformerBlock, MoE)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
