"""reshape@1: new leading non-batch axes with the same element count per example."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

MAX_PREFIX = 3


def _validate(args) -> None:
    if len(args["shape"]) > MAX_PREFIX:
        raise HNDLError(
            "E_ARGUMENT",
            f"reshape takes at most {MAX_PREFIX} leading dimensions (rank 4), got {len(args['shape'])}",
            field="shape",
        )


def _relation(s) -> None:
    prefix = s.args["shape"]
    out = s.shape("out")
    if out is None and len(prefix) == MAX_PREFIX:
        out = s.rank("out", MAX_PREFIX + 1)
    if out is not None:
        if len(out) - 1 < len(prefix):
            s.error(
                "E_CONSTRAINT",
                f"a reshape prefix of {len(prefix)} dimensions needs an output of rank at least "
                f"{len(prefix) + 1}, but the output has rank {len(out)}",
            )
        for axis, extent in enumerate(prefix, start=1):
            s.axis("out", axis, extent)
    s.product("x", "out")


def _torch_habit(author: Mapping[str, Any]) -> Optional[tuple[str, str, tuple[str, ...]]]:
    """torch's ``reshape(-1, 16)``: -1 and 0 are never written here (the declaration's ``habit``)."""
    shape = author.get("shape", ())
    if isinstance(shape, (list, tuple)) and any(isinstance(v, int) and not isinstance(v, bool) and v <= 0
                                                for v in shape):
        kept = [v for v in shape if not (isinstance(v, int) and not isinstance(v, bool) and v <= 0)]
        example = f"reshape({', '.join(map(str, kept))})" if kept else "reshape()"
        return ("shape",
                f"reshape({', '.join(map(str, shape))}): -1 and 0 are never written; reshape's values are "
                f"the leading non-batch dimensions (the batch axis is implicit) and an omitted trailing "
                f"factor is inferred from the element count",
                (f"Leave the -1 out: {example} writes the leading dimensions and infers the rest from the "
                 f"element count and the output contract or consumer; to fix the last factor instead, "
                 f"write the leading one (torch's x.reshape(B, -1, 16) on [B, 64] is reshape(4)).",))
    return None


@operator(
    "reshape",
    torch=TorchSpelling(
        signature="torch.reshape(input, shape)",
        names=("view",),
        call="reshape(...)",
        habit=_torch_habit,
    ),
    summary="Reshape every example to new leading axes, keeping its element count.",
    shape="x[B, ...] -> out",
    relation=_relation,
    shape_text="out[1:len(shape)+1] = shape; prod(out[1:]) = prod(x[1:]); rank from the prefix or neighbours.",
    positional_rest="shape",
    validate=_validate,
    args={
        "shape": Arg("ints", (), min=1, max=MAX_EXTENT,
                     help="Leading non-batch output dimensions; the rest is inferred."),
    },
    category="shape",
    examples=(
        Example("reshape(64, 4, 4)", ("B", 1024), ("B", 64, 4, 4), note="Three entries fix rank 4."),
        Example("reshape()\nlinear()", ("B", 2, 4, 4), ("B", 10), note="Bare reshape takes its rank from linear."),
    ),
    reference=lambda module: (lambda x: torch.reshape(x, (x.shape[0], *module.target))),
)
class Reshape(nn.Module):
    """Reshapes each example to the resolved output shape, preserving the batch axis and
    the per-example element count. A prefix of three entries fixes rank 4; a shorter prefix
    takes its rank from the neighbouring operations, and exactly one unknown factor is solved
    from the element count. An ambiguous rank or factorization fails instead of guessing.

    **Torch spelling.** The values are the leading non-batch dimensions; the batch axis is never
    written and `-1` never is either: the omitted factor is inferred. torch's
    `x.reshape(B, -1, 16)` on `[B, 64]` is `reshape(4)`, and `reshape(-1, 16)` is refused with
    E_ARGUMENT naming the spelling without the `-1`."""

    def __init__(self, shape: tuple = (), *, output_shapes) -> None:
        super().__init__()
        self.target = tuple(output_shapes["out"][1:])

    def forward(self, x):
        return x.reshape(x.shape[0], *self.target)

    def extra_repr(self) -> str:
        return f"target={self.target}"
