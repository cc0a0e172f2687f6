"""rotary_embedding@1: the cos/sin tables of rotary position embedding (RoPE) for a sequence, as
one [B, 2, T, R] tensor that ``rotary`` (or the fused ``attention``) applies to queries and keys."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .rotary import apply_keeping_float32, rotary_frequencies, rotary_tables


def _odd(dims: int) -> str:
    return f"rotary_embedding rotates dimension pairs, so its rotated width R={dims} must be even"


_REMEDY = "Rotate an even number of dimensions (transformers' head_dim * partial_rotary_factor is even)."


def _validate(args) -> None:
    dims = args.get("dims")
    if dims is not None and dims % 2:
        raise HNDLError("E_ARGUMENT", _odd(dims), field="dims", remedies=(_REMEDY,))


def _relation(s) -> None:
    """R must be even, whichever side fixed it (E_CONSTRAINT for an inferred odd R)."""
    shape = s.shape("out")
    rotated = shape[3] if shape else None
    if rotated is not None and rotated % 2:
        s.error("E_CONSTRAINT", f"{_odd(rotated)}. {_REMEDY}")


def _reference(module):
    """transformers' LlamaRotaryEmbedding.forward for positions 0..T-1, written out."""

    def forward(x):
        batch, length = x.shape[0], x.shape[1]
        positions = torch.arange(length, device=x.device).float()
        inv_freq = 1.0 / (module.theta ** (torch.arange(0, module.dims, 2, dtype=torch.float32,
                                                        device=x.device) / module.dims))
        angles = positions[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        table = torch.stack((angles.cos(), angles.sin())).to(x.dtype)
        return table.unsqueeze(0).expand(batch, 2, length, module.dims)

    return forward


@operator(
    "rotary_embedding",
    torch=TorchSpelling(signature="transformers LlamaRotaryEmbedding(config)"),
    summary="The cos/sin tables of rotary position embedding (RoPE) for positions 0..T-1, as [B, 2, T, R].",
    shape="x[B, T, D] -> out[B, 2, T, R]",
    relation=_relation,
    validate=_validate,
    shape_text="x is [B, T, D] (only T is read), out is [B, 2, T, R]: out[:, 0] the cosines, out[:, 1] the "
               "sines; R is dims, or inferred from the consumer (rotary, attention) or the output contract; "
               "R is even.",
    args={
        "dims": Arg(int, inferable=True, min=2, max=MAX_EXTENT, dim="R",
                    help="Rotated width R (even): the head width for full rotary (LLaMA), a part of it for "
                         "partial rotary (GPT-NeoX, Phi); normally inferred from the consumer."),
        "theta": Arg(float, 10000.0, min=0, exclusive_min=True, positional=False,
                     help="Frequency base (transformers' rope_theta): 10000 in the RoPE paper and LLaMA 1/2, "
                          "500000 in LLaMA 3."),
    },
    category="embedding",
    examples=(
        Example("rope = rotary_embedding(x)\nq = split_heads(x, 4)\nout = merge_heads(rotary(q, rope))",
                ("B", 10, 32), ("B", 10, 32),
                note="R = 8 is inferred from the per-head width of the rotated queries (full rotary)."),
        Example("rotary_embedding(16, theta=500000.0)", ("B", 12, 64), ("B", 2, 12, 16),
                note="LLaMA 3's base over a 16-wide head."),
    ),
    reference=_reference,
)
class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al., RoFormer) as a table producer: for the `T`
    positions of `x[B, T, D]` it returns `out[B, 2, T, R]` with `out[:, 0]` the cosines and
    `out[:, 1]` the sines of the angles `t * inv_freq`, each `inv_freq` repeated twice, in the
    "rotate half" layout of transformers' `LlamaRotaryEmbedding` (what `rotary` and the fused
    `attention` apply to queries and keys). Only `T`, the dtype and the device of `x` are read;
    its values do not matter and receive no gradient.

    Rank 4 is read here as `[B, 2, T, R]`: a pair of tables (cos, sin) per example, the same
    for every example (a batch-expanded view, nothing copied per example).

    * **Frequencies.** `inv_freq[i] = 1 / theta ** (2i / R)` for `i < R/2`, a
      **non-persistent buffer** computed at construction exactly as transformers computes it
      (so state dicts carry no entry for it, as transformers' do not). It stays float32 under
      `.to(dtype)`, `.half()` or `.double()` (device moves apply): the angles are always
      computed in float32 and only the tables are cast to the compute dtype, as transformers
      does, so a bfloat16 plan rotates by the same angles as its float32 twin.
    * **Positions** are `0 .. T-1` (no offset for a key/value cache, no per-example position
      ids). `R` is `dims`, normally inferred from what consumes the table; it must be even
      (E_ARGUMENT for an explicit odd value, E_CONSTRAINT for an inferred one).
    * No parameters, no randomness: identical in train and eval mode.
    """

    def __init__(self, dims: int, theta: float = 10000.0, *, T: int) -> None:
        super().__init__()
        if dims % 2:
            raise HNDLError("E_ARGUMENT", _odd(dims), field="dims", remedies=(_REMEDY,))
        self.dims = dims
        self.theta = theta
        self.length = T
        self.register_buffer("inv_freq", rotary_frequencies(dims, theta), persistent=False)

    def _apply(self, fn, recurse: bool = True):
        return apply_keeping_float32(self, "inv_freq", super()._apply, fn, recurse)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin = rotary_tables(self.inv_freq, x.shape[1], x.dtype)
        return torch.stack((cos, sin)).unsqueeze(0).expand(x.shape[0], 2, x.shape[1], self.dims)

    def extra_repr(self) -> str:
        return f"dims={self.dims}, theta={self.theta}"
