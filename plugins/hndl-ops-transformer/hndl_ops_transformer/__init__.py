"""hndl-ops-transformer: the first-party pack of transformer operators (pack name ``transformer``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .attention import Attention
from .attention_v1 import AttentionV1
from .feed_forward import FeedForward
from .feed_forward_v1 import FeedForwardV1
from .feed_forward_v2 import FeedForwardV2
from .learned_tokens import LearnedTokens
from .merge_heads import MergeHeads
from .moe import MoE
from .positional_embedding import PositionalEmbedding
from .positional_embedding_v1 import PositionalEmbeddingV1
from .relative_position_bias import RelativePositionBias
from .relative_position_table import RelativePositionTable
from .rotary_embedding import RotaryEmbedding
from .rotary_op import Rotary
from .scaled_dot_product_attention import ScaledDotProductAttention
from .split_heads import SplitHeads
from .timestep_embedding import TimestepEmbedding
from .transformer_block import TransformerBlock
from .transformer_block_v1 import TransformerBlockV1
from .transformer_block_v2 import TransformerBlockV2

OPERATORS: tuple[type, ...] = (PositionalEmbedding, Attention, FeedForward, TransformerBlock, MoE, LearnedTokens,
                               PositionalEmbeddingV1, FeedForwardV1, TransformerBlockV1, AttentionV1,
                               FeedForwardV2, TransformerBlockV2,
                               SplitHeads, MergeHeads, ScaledDotProductAttention, RotaryEmbedding, Rotary,
                               RelativePositionBias, TimestepEmbedding, RelativePositionTable)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
