"""concat@1: join tensors along one axis; on axis 0 it stacks batches."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling
from hndl.contracts import batch_multiple

from .axes import batch_entry, batch_symbol, matching_axes, rank_of


def _relation(s) -> None:
    ports = (*s.inputs, "out")
    rank = rank_of(s, ports)
    if rank is None:
        return
    axis = s.args["axis"]
    if axis >= rank:
        s.error("E_CONSTRAINT", f"concat axis={axis} is out of range for rank {rank}; use 0 <= axis < {rank}")
    matching_axes(s, s.inputs[0], (*s.inputs[1:], "out"), rank, skip=axis)
    if axis == 0:
        _sum(s, [s.batch(port) for port in s.inputs], s.batch("out"), axis, batch=True)
    else:
        _sum(s, [s.shape(port)[axis] for port in s.inputs], s.shape("out")[axis], axis, batch=False)


def _sum(s, parts, total, axis, *, batch) -> None:
    """out[axis] = sum of the inputs' extents; one unknown term is solved from the others."""
    like = next((entry for entry in (*parts, total) if entry is not None), None)
    value = (lambda entry: batch_multiple(entry, batch_symbol(like))) if batch else (lambda entry: entry)
    spell = (lambda n: batch_entry(n, like)) if batch else (lambda n: n)
    unknown = [i for i, part in enumerate(parts) if part is None]
    known = sum(value(part) for part in parts if part is not None)
    if not unknown:
        s.axis("out", axis, spell(known))
    elif total is not None and len(unknown) == 1:
        remaining = value(total) - known
        if remaining < 1:
            s.error("E_CONSTRAINT", f"concat output extent {total} on axis {axis} leaves nothing for input {s.inputs[unknown[0]]!r}")
        s.axis(s.inputs[unknown[0]], axis, spell(remaining))


@operator(
    "concat",
    torch=TorchSpelling(
        signature="torch.cat(tensors, dim=0)",
        hint="Pass the tensors as separate arguments and the axis by keyword: concat(a, b, axis=1).",
        names=("cat", "concatenate"),
        call="concat(a, b, axis=1)",
    ),
    summary="Join two or more tensors along one axis; axis 0 stacks examples.",
    shape="x* -> out",
    relation=_relation,
    batch="relation",
    shape_text="out[axis] = sum of x_i[axis]; every other axis must agree exactly; B + B is 2*B on axis 0.",
    args={
        "input_count": Arg(int, min=2, max=32, positional=False,
                           help="Number of joined tensors; set from the call, never written by hand."),
        "axis": Arg(int, 1, min=0, positional=False,
                    help="Axis of the complete shape to join along; negative axes are rejected."),
    },
    category="join",
    examples=(
        Example("a = linear(x, 3)\nconcat(x, a)", ("B", 5), ("B", 8), note="Widths add: 5 + 3."),
        Example(
            "both = concat(x, x, axis=0)\na, b = chunk(both, 2, dim=0)\nadd(a, b)",
            ("B", 4), ("B", 4), note="[B,4] twice gives [2*B,4].",
        ),
    ),
    reference=lambda module: (lambda *tensors: torch.cat(tensors, module.axis)),
)
class Concat(nn.Module):
    """Concatenates its inputs along `axis` of the complete shape. Every other axis must
    agree exactly: nothing is resized, cast or broadcast. On axis 0 the result holds several
    batches at once (B + B is 2*B); chunk it back before publishing an output.

    **Torch spelling.** torch's `torch.cat([a, b], dim=1)` is `concat(a, b, axis=1)`: the
    tensors are separate arguments (a list of tensors is refused naming that spelling) and the
    axis is the keyword `axis=` (`dim=` and a positional axis are refused naming it)."""

    def __init__(self, input_count: int, axis: int = 1) -> None:
        super().__init__()
        self.axis = axis

    def forward(self, *tensors):
        return torch.cat(tensors, dim=self.axis)
