"""chunk@1: equal sections of one axis; on axis 0 it divides stacked batches."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling

from .axes import rank_of


def _relation(s) -> None:
    rank = rank_of(s, ("x", *s.outputs))
    if rank is None:
        return
    dim, chunks = s.args["dim"], s.args["chunks"]
    if dim >= rank:
        s.error("E_CONSTRAINT", f"chunk dim={dim} is out of range for rank {rank}; use 0 <= dim < {rank}")
    for port in s.outputs:
        for axis in range(rank):
            s.scale("x", axis, port, axis, chunks if axis == dim else 1)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def torch_axis_habit(alias: str, author: Mapping[str, Any]) -> Optional[tuple[str, str, tuple[str, ...]]]:
    """torch.chunk / torch.split habits (the ``habit`` of both declarations): a negative or batch
    axis, and split's list of sections; None when the call means what it means in torch."""
    first = "chunks" if alias == "chunk" else "size"
    count = author.get(first)
    dim = author.get("dim", 1)
    if alias == "split" and isinstance(count, (list, tuple)) and count and all(map(_is_int, count)):
        return ("size",
                f"split({list(count)!r}): torch's list of section sizes; HNDL's split takes the first part's "
                f"size and returns two tensors, first and rest",
                (f"Write first, rest = split({count[0]}, dim) and split rest again for more parts, or use "
                 f"chunk(n, dim) for n equal parts.",))
    if _is_int(dim) and (dim < 0 or (dim == 0 and alias == "split")):  # chunk(n, 0) divides stacked batches
        shown_count = count if _is_int(count) else "n"
        if dim == 0:
            problem = "axis 0 is the batch axis, which HNDL never splits (torch's default dim=0 splits the batch)"
            fix = f"Split a non-batch axis: {alias}({shown_count}, 1) (axis 1 is also the default)."
        else:
            problem = "negative axes are not counted from the end here; axes are numbered on the whole shape"
            fix = (f"Write the axis from the front, batch being 0: for the last axis of [B, T, D] write "
                   f"{alias}({shown_count}, 2).")
        return ("dim", f"{alias}(..., dim={dim}): {problem}", (fix,))
    return None


def _torch_habit(author: Mapping[str, Any]) -> Optional[tuple[str, str, tuple[str, ...]]]:
    return torch_axis_habit("chunk", author)


@operator(
    "chunk",
    torch=TorchSpelling(
        signature="torch.chunk(input, chunks, dim=0)",
        habit=_torch_habit,
    ),
    summary="Divide one axis into a fixed number of equal sections.",
    shape="x[B, ...] -> out*",
    relation=_relation,
    outputs_from="chunks",
    batch="relation",
    shape_text="x[dim] = chunks * out_i[dim] exactly; dim=0 divides stacked batches (2*B -> B, B).",
    args={
        "chunks": Arg(int, min=1, max=32, help="Number of equal sections (ports out0 ... outN-1)."),
        "dim": Arg(int, 1, min=0, help="The axis to divide; 0 divides the batch axis."),
    },
    category="shape",
    examples=(
        Example("a, b = chunk(2)\nadd(a, b)", ("B", 8), ("B", 4), note="[B,8] gives [B,4] and [B,4]."),
        Example(
            "both = concat(x, x, axis=0)\na, b = chunk(both, 2, dim=0)\nadd(a, b)",
            ("B", 4), ("B", 4), note="chunk(dim=0) inverts concat(axis=0).",
        ),
    ),
    reference=lambda module: (lambda x: tuple(x.narrow(module.dim, index * (x.shape[module.dim] // module.chunks), x.shape[module.dim] // module.chunks) for index in range(module.chunks))),
)
class Chunk(nn.Module):
    """Splits `dim` into exactly `chunks` equal sections, returned as views so first and
    second derivatives reach the input through every one. The division must be exact; an
    uneven one fails at resolution. With `dim=0` the input's batch entry must be a whole
    multiple of `chunks` plan batches. `chunks=1` returns a one-tuple, which clears current.

    **Torch spelling.** `chunk(chunks, dim)` is `torch.chunk(x, chunks, dim)` with axes counted
    on the whole shape from the front; a negative axis is refused (E_ARGUMENT) naming the axis
    to write. Unlike torch, the default `dim` is 1, not 0: write `chunk(2, 0)` to divide the
    batch axis (classifier-free guidance's `x.chunk(2)`)."""

    def __init__(self, chunks: int, dim: int = 1) -> None:
        super().__init__()
        self.chunks = chunks
        self.dim = dim

    def forward(self, x):
        # Under torch.jit.trace the extent is a traced value and under fx a proxy: the plan already proved
        # it divides, and torch.chunk records the section count rather than a size fixed at the traced batch.
        extent = x.shape[self.dim]
        if isinstance(extent, int) and not torch.jit.is_tracing() and extent % self.chunks:
            raise HNDLError(
                "E_RUNTIME",
                f"chunk cannot divide extent {extent} on dim {self.dim} into {self.chunks} equal sections",
            )
        return torch.chunk(x, self.chunks, dim=self.dim)  # a tuple of views (a proxy under fx)
