"""embedding@1: a learned lookup table from integer token ids to vectors."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

#: The port dtypes accepted as token ids (what torch.nn.functional.embedding indexes with).
ID_DTYPES = ("int64", "int32")


def _validate(args) -> None:
    padding_idx, count = args["padding_idx"], args["num_embeddings"]
    if padding_idx is not None and padding_idx >= count:
        raise HNDLError(
            "E_ARGUMENT",
            f"embedding padding_idx={padding_idx} is not a row of a table with num_embeddings={count}",
            field="padding_idx",
            remedies=(f"Give padding_idx in [0, {count - 1}], or omit it.",),
        )


def _relation(s) -> None:
    dtype = s.dtype("ids")
    if dtype not in ID_DTYPES:
        s.error(
            "E_DTYPE",
            f"embedding port 'ids' expects int64 or int32 token ids but receives {dtype}; "
            "HNDL never casts silently",
        )


@operator(
    "embedding",
    torch=TorchSpelling(
        signature="nn.Embedding(num_embeddings, embedding_dim, padding_idx=None)",
        hint="embedding takes torch's order: embedding(num_embeddings, embedding_dim, "
             "padding_idx=...); the padding index goes by keyword.",
    ),
    summary="Look up a learned vector for every integer token id: [B, T] ids give [B, T, D].",
    shape="ids[B, T]:any -> out[B, T, D]",
    relation=_relation,
    validate=_validate,
    shape_text="ids [B, T] of dtype int64 or int32 -> out [B, T, embedding_dim] in the compute dtype.",
    args={
        "num_embeddings": Arg(int, min=1, max=MAX_EXTENT,
                              help="Vocabulary size: the number of rows, valid ids are 0 ... num_embeddings - 1. "
                                   "Required; no shape can reveal it."),
        "embedding_dim": Arg(int, min=1, inferable=True, dim="D",
                             help="Width of each vector. Omit it to infer it from what consumes the output."),
        "padding_idx": Arg(int, None, min=0, max=MAX_EXTENT, positional=False,
                           help="Optional id whose row starts at zeros and never receives a gradient."),
    },
    category="embedding",
    examples=(
        Example("embedding(1000, 64)", ("B", 16), ("B", 16, 64), input_dtype="int64",
                note="16 token ids per example from a 1000-word vocabulary, 64 features each."),
        Example("embedding(1000)\nlayer_norm()", ("B", 12), ("B", 12, 32), input_dtype="int64",
                note="embedding_dim = 32 is inferred backward from the output contract through layer_norm."),
    ),
    reference=lambda module: (lambda ids: F.embedding(ids, module.weight, module.padding_idx)),
)
class Embedding(nn.Embedding):
    """Maps every token id of an integer `[B, T]` tensor to row `id` of a learned
    `[num_embeddings, embedding_dim]` table, giving `[B, T, embedding_dim]` in the plan's
    compute dtype. The table is initialized from N(0, 1), as in PyTorch; the `padding_idx`
    row, if any, starts at zeros and its gradient is always zero.

    **Inferred width rules.**

    * `embedding_dim` is inferable: omit it and the resolver reads it off whatever consumes
      the output (a layer_norm or add tied to the output contract, a linear with an explicit
      `in_features`, ...). If nothing fixes the last axis, resolution fails with
      E_AMBIGUOUS rather than guessing a width.
    * `num_embeddings` is never inferred. The vocabulary size appears in no tensor shape
      (the ids are `[B, T]` whatever the vocabulary), so it is a required argument and
      omitting it fails with E_ARGUMENT.

    The `ids` port accepts only `int64` or `int32` (declare the plan input with
    `input_dtype="int64"`); a floating or bool tensor reaching it fails with E_DTYPE at
    resolution, since HNDL never casts silently. Ids must lie in `0 ... num_embeddings - 1`;
    this range is not checked in forward (that would force a device synchronization), so an
    out-of-range id raises PyTorch's own indexing error. No randomness in forward; identical
    in train and eval mode."""

    def __init__(self, num_embeddings: int, *, embedding_dim: int, padding_idx: int | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx)
