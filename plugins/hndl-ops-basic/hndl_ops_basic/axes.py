"""Shared axis rules for the shape, reduction and axis-wise operators of this pack."""

from __future__ import annotations

from typing import Iterable, Optional

from hndl import HNDLError


def rank_of(s, ports: Iterable[str]) -> Optional[int]:
    """The rank every listed port must share, asserting it on the others once one is known."""
    ports = tuple(ports)
    rank = next((len(s.shape(port)) for port in ports if s.shape(port) is not None), None)
    if rank is not None:
        for port in ports:
            s.rank(port, rank)
    return rank


def matching_axes(s, source: str, others: Iterable[str], rank: int, *, skip: int) -> None:
    """Every axis except ``skip`` (batch included) is equal on ``source`` and ``others``."""
    for port in others:
        for axis in range(rank):
            if axis != skip:
                s.scale(port, axis, source, axis)


def batch_symbol(entry: str) -> str:
    """The plan's batch symbol, read off an entry ``B`` or ``k*B``."""
    return entry.partition("*")[2] or entry


def batch_entry(multiple: int, like: str) -> str:
    """Spell ``multiple`` batches with the batch symbol used in ``like``."""
    symbol = batch_symbol(like)
    return symbol if multiple == 1 else f"{multiple}*{symbol}"


# -- one named non-batch axis (log_softmax, transpose, permute, squeeze, unsqueeze, mean, max, select) --
#: The ranks a tensor may have (§3): [B, F], [B, T, D] and [B, C, H, W].
RANKS = (2, 3, 4)


def batch_axis_error(alias: str, field: str, value: int, rank: Optional[int] = None) -> HNDLError:
    """The E_ARGUMENT failure for an axis argument that names the batch axis."""
    spelled = f"{field}={value}" + (f" (rank {rank})" if rank is not None else "")
    return HNDLError(
        "E_ARGUMENT",
        f"{alias} {spelled} names the batch axis; batch stays on axis 0 and is never moved, "
        "reduced or mixed",
        field=field,
        remedies=(f"Name a non-batch axis: 1 <= {field} < rank, or -1 for the last axis.",),
    )


def reject_batch(alias: str, args, *fields: str) -> None:
    """A ``validate=`` helper: an axis argument written as 0 names the batch axis (E_ARGUMENT)."""
    for field in fields:
        if args[field] == 0:
            raise batch_axis_error(alias, field, 0)


def axis_index(alias: str, field: str, dim: int, rank: int) -> int:
    """``dim`` counted on a tensor of ``rank`` (negative from the end), as a non-batch index.

    Out of range is E_CONSTRAINT (the rank came from the shapes, not from the argument); an index
    that lands on the batch axis, such as ``-rank``, is E_ARGUMENT.
    """
    if not -rank <= dim < rank:
        raise HNDLError(
            "E_CONSTRAINT",
            f"{alias} {field}={dim} is out of range for rank {rank}; use 1 <= {field} < {rank} or "
            f"-{rank - 1} <= {field} <= -1",
            field=field,
            remedies=(f"Name an axis that exists on a rank-{rank} tensor, or change the rank that reaches {alias}.",),
        )
    if dim % rank == 0:
        raise batch_axis_error(alias, field, dim, rank)
    return dim % rank


def related_ranks(s, alias: str, source: str, target: str, delta: int) -> Optional[int]:
    """The rank of ``source`` when ``rank(target) == rank(source) + delta`` is known from either
    port, or None; both ranks must be supported (E_CONSTRAINT). Nothing is asserted yet: check
    the axis arguments against it first (their errors name the cause), then ``assert_ranks``."""
    x, out = s.shape(source), s.shape(target)
    if x is None and out is None:
        return None
    rank = len(x) if x is not None else len(out) - delta
    for port, value in ((source, rank), (target, rank + delta)):
        if value not in RANKS:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{alias} would make port {port!r} rank {value} ({source} rank {rank}, {target} rank "
                f"{rank + delta}); supported ranks are 2, 3 and 4",
                remedies=(f"Feed {alias} a tensor whose result has rank 2 [B, F], 3 [B, T, D] or 4 [B, C, H, W].",),
            )
    return rank


def assert_ranks(s, source: str, target: str, rank: int, delta: int) -> None:
    """Give ``source`` rank ``rank`` and ``target`` rank ``rank + delta`` (both directions)."""
    s.rank(source, rank)
    s.rank(target, rank + delta)


def gather_axes(s, target: str, source: str, order: Iterable[Optional[int]]) -> None:
    """``target[i] == source[order[i]]`` in both directions for every non-batch axis ``i``
    whose entry is not None (batch is shared by the declaration itself)."""
    for axis, taken in enumerate(order):
        if axis and taken is not None:
            s.scale(target, axis, source, taken)


def reduced_axis(s, alias: str, keepdim: bool) -> Optional[int]:
    """``out`` is ``x`` with axis ``dim`` reduced: kept as extent 1, or removed.

    The rank and every other extent infer in both directions; the reduced extent of ``x`` is
    never read off the output (any extent reduces to the same result). Returns the reduced
    axis of ``x`` once the rank is known.
    """
    delta = 0 if keepdim else -1
    rank = related_ranks(s, alias, "x", "out", delta)
    if rank is None:
        return None
    axis = axis_index(alias, "dim", s.args["dim"], rank)
    assert_ranks(s, "x", "out", rank, delta)
    if keepdim:
        s.axis("out", axis, 1)
        gather_axes(s, "out", "x", [None if index == axis else index for index in range(rank)])
    else:
        gather_axes(s, "out", "x", [index if index < axis else index + 1 for index in range(rank - 1)])
    return axis
