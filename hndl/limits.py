"""The resource limits every entry point accepts (§5), validated into a frozen mapping.

Limits bound graph size, dimension products, solver sweeps and registered state. Exceeding
one fails with E_RESOURCE; nothing is silently truncated. Loading budgets for configuration
source (§7) live here too so every bound has one home.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Iterator, Mapping, Optional

from .errors import HNDLError, shown

DEFAULT_LIMITS: Mapping[str, int] = MappingProxyType(
    {
        # A plan must stay within the 16 MiB a saved plan may hold: 10,000 ordinary nodes are
        # 3-7 MiB, and resolution refuses any plan whose encoding would exceed the bound.
        "max_nodes": 10_000,
        "max_edges": 200_000,
        "max_dimension": 2**31 - 1,
        "max_elements": 2**40,
        "max_state_bytes": 64 * 2**30,  # a build lowers this default to the target device's memory
        "max_iterations": 1_000,
        "max_node_modules": 4_096,
        # Whole-graph trial solves the rank search may spend settling ranks the sweep left open.
        "max_rank_trials": 256,
    }
)

#: Budgets for declarative source, applied before and during parsing (§7).
SOURCE_BUDGETS: Mapping[str, int] = MappingProxyType(
    {
        "max_source_bytes": 1 * 2**20,
        "max_source_lines": 10_000,
        "max_ast_nodes": 200_000,
        "max_ast_depth": 64,
        "max_literal_items": 4_096,
        "max_literal_depth": 8,
        "max_string_bytes": 16_384,
        "max_int_digits": 20,
    }
)


def validate_limits(limits: Optional[Mapping[str, int]] = None) -> Mapping[str, int]:
    """Merge caller limits over the defaults; unknown keys or non-positive ints are E_SCHEMA."""
    return merge_bounds(limits, DEFAULT_LIMITS, "limits")


def merge_bounds(given: Optional[Mapping[str, int]], defaults: Mapping[str, int], field: str) -> Mapping[str, int]:
    """``defaults`` with the positive-int overrides in ``given``; anything else is E_SCHEMA."""
    if given is None or given is defaults:
        return defaults
    if not isinstance(given, Mapping):
        raise HNDLError(
            "E_SCHEMA",
            f"{field} must be a mapping, not {type(given).__name__}",
            field=field,
            remedies=(f"Pass a dict with some of the keys {', '.join(defaults)}.",),
        )
    merged = dict(defaults)
    for key, value in given.items():
        if key not in defaults:
            raise HNDLError(
                "E_SCHEMA",
                f"unknown {field} key {shown(key)}",
                field=field,
                remedies=(f"Use only the keys {', '.join(defaults)}.",),
            )
        if type(value) is not int or value <= 0:
            raise HNDLError(
                "E_SCHEMA",
                f"{field} {shown(key)} must be a positive integer, got {shown(value)}",
                field=f"{field}.{key}",
                remedies=("Give a positive int.",),
            )
        merged[key] = value
    return MappingProxyType(merged)


_IN_FORCE: ContextVar[Mapping[str, int]] = ContextVar("hndl_limits_in_force", default=DEFAULT_LIMITS)


@contextmanager
def limits_in_force(limits: Mapping[str, int]) -> Iterator[None]:
    """Make validated ``limits`` the ones operator code reads with ``active_limits()`` (resolution,
    revalidation and construction set them; a relation that does real work, such as tracing a
    pretrained architecture, bounds that work by them)."""
    token = _IN_FORCE.set(limits)
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


def active_limits() -> Mapping[str, int]:
    """The limits of the resolution, revalidation or build in progress (the defaults outside one)."""
    return _IN_FORCE.get()
