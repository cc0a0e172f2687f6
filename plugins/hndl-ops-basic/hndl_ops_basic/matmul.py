"""matmul@1: the batched matrix product of two activations, torch.matmul without broadcasting."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Example, operator
from hndl.declaration import TorchSpelling


@operator(
    "matmul",
    torch=TorchSpelling(signature="torch.matmul(input, other)"),
    summary="Batched matrix product of two activations: [B, ..., T, K] @ [B, ..., K, S] -> [B, ..., T, S].",
    shape="x[B, ..., T, K], y[B, ..., K, S] -> out[B, ..., T, S]",
    shape_text="Rank 3 [B, T, K] @ [B, K, S] or rank 4 [B, H, T, K] @ [B, H, K, S]; the leading axes agree "
               "exactly (never broadcast); T and S infer between the inputs and out both ways, K between the "
               "two inputs.",
    category="attention",
    examples=(
        Example("k = transpose(x, -1, -2)\nmatmul(x, k)", ("B", 6, 8), ("B", 6, 6),
                note="Self-similarity x @ x^T of a [B, T, D] sequence: [B, 6, 8] @ [B, 8, 6]."),
        Example("matmul(x, y)", {"x": ("B", 2, 5, 4), "y": ("B", 2, 4, 3)}, ("B", 2, 5, 3),
                note="Per head: [B, H, T, K] @ [B, H, K, S]."),
    ),
    reference=lambda module: torch.matmul,
)
class MatMul(nn.Module):
    """The batched product of two activations, `out[b, ..., t, s] = sum_k x[b, ..., t, k] *
    y[b, ..., k, s]`, as `torch.matmul` computes it. It is the attention primitive: scores are
    `matmul(q, transpose(k, -1, -2))` and the attended values `matmul(weights, v)` over
    `[B, H, T, D]` tensors (heads folded into the non-batch axes, §3's rank 4 read as
    `[B, H, T, D]`).

    Rank 3 multiplies `[B, T, K]` by `[B, K, S]`; rank 4 multiplies `[B, H, T, K]` by
    `[B, H, K, S]` for each of the `H` leading slices. Both inputs have the same rank and every
    axis before the last two agrees exactly: nothing is broadcast, so a shared `[K, S]` weight is
    a `linear`, not a matmul. Rank 2 (`[B, K]`, a vector per example) has no matrix axes and is
    rejected with E_CONSTRAINT, as is a contraction width `K` that differs between `x` and `y`.
    `T` and `S` infer in both directions between the inputs and the output; `K` infers from
    either input to the other. No parameters, no buffers, identical in train and eval mode."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, y)
