"""split@1: two sections of one axis, the first of a given size and the remainder."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .axes import matching_axes, rank_of
from .chunk import torch_axis_habit


def _relation(s) -> None:
    rank = rank_of(s, ("x", "first", "rest"))
    if rank is None:
        return
    dim = s.args["dim"]
    if dim >= rank:
        s.error("E_CONSTRAINT", f"split dim={dim} is out of range for rank {rank}; use 1 <= dim < {rank}")
    matching_axes(s, "x", ("first", "rest"), rank, skip=dim)
    if "size" in s.args:
        s.axis("first", dim, s.args["size"])
    total, first, rest = (s.shape(port)[dim] for port in ("x", "first", "rest"))
    if total is not None and first is not None:
        if not 0 < first < total:
            s.error("E_CONSTRAINT", f"split size {first} must leave a non-empty remainder of {total}")
        s.axis("rest", dim, total - first)
    elif total is not None and rest is not None:
        if not 0 < rest < total:
            s.error("E_CONSTRAINT", f"split remainder {rest} must be smaller than the extent {total}")
        s.axis("first", dim, total - rest)
    elif first is not None and rest is not None:
        s.axis("x", dim, first + rest)
    first = s.shape("first")[dim]
    if first is not None:
        s.arg("size", first)


def _torch_habit(author: Mapping[str, Any]) -> Optional[tuple[str, str, tuple[str, ...]]]:
    return torch_axis_habit("split", author)


@operator(
    "split",
    torch=TorchSpelling(
        signature="torch.split(tensor, split_size_or_sections, dim=0)",
        habit=_torch_habit,
    ),
    summary="Split one axis into a first section of a given size and the remainder.",
    shape="x[B, ...] -> first, rest",
    relation=_relation,
    shape_text="first[dim] = size, rest[dim] = x[dim] - size; every other axis is shared.",
    args={
        "size": Arg(int, min=1, max=MAX_EXTENT, inferable=True,
                    help="Extent of the first section; omitted, it is inferred."),
        "dim": Arg(int, 1, min=1, help="The non-batch axis to split (1 <= dim < rank)."),
    },
    category="shape",
    examples=(
        Example('z1, z2 = split(64)\nadd(z1, z2)', ("B", 128), ("B", 64), note="[B,128] gives [B,64] and [B,64]."),
        Example('z1, z2 = split(64)\nout = z2', ("B", 160), ("B", 96), note="[B,160] gives [B,64] and [B,96]."),
    ),
    reference=lambda module: (lambda x: (x.narrow(module.dim, 0, module.sections[0]), x.narrow(module.dim, module.sections[0], module.sections[1]))),
)
class Split(nn.Module):
    """Creates exactly two views along `dim`: the first `size` elements, then all remaining
    elements. It does not repeatedly chunk at `size`. Both outputs are views of the input, so
    gradients reach it through either; batch splitting and empty sections are rejected.

    **Torch spelling.** `split(size, dim)` is `torch.split(x, [size, rest], dim)`: torch's list
    of section sizes, a negative axis and axis 0 are refused (E_ARGUMENT) naming the HNDL
    spelling. The default `dim` is 1 (torch's is 0, the batch, which split never divides)."""

    def __init__(self, size: int, dim: int = 1, *, input_shapes) -> None:
        super().__init__()
        self.sections = [size, input_shapes["x"][dim] - size]
        self.dim = dim

    def forward(self, x):
        first, rest = torch.split(x, self.sections, dim=self.dim)
        return first, rest
