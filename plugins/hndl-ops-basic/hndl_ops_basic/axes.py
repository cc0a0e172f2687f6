"""Shared axis rules for the shape operators of this pack (split, chunk, concat)."""

from __future__ import annotations

from typing import Iterable, Optional


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
