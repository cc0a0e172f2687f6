"""hndl-ops-transformer: the first-party pack of transformer operators (pack name ``transformer``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .attention import Attention
from .attention_v1 import AttentionV1
from .feed_forward import FeedForward
from .feed_forward_v1 import FeedForwardV1
from .learned_tokens import LearnedTokens
from .moe import MoE
from .positional_embedding import PositionalEmbedding
from .positional_embedding_v1 import PositionalEmbeddingV1
from .transformer_block import TransformerBlock
from .transformer_block_v1 import TransformerBlockV1

OPERATORS: tuple[type, ...] = (PositionalEmbedding, Attention, FeedForward, TransformerBlock, MoE, LearnedTokens,
                               PositionalEmbeddingV1, FeedForwardV1, TransformerBlockV1, AttentionV1)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
