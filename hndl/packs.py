"""Operator packs: the pluggy hook a pack implements and entry-point discovery.

A pack is a plain module registered under the entry-point group ``hndl.packs``. It
implements one hook, ``hndl_register(registry)``, and adds its declared operators to the
registry it is handed. Hosts opt packs in by name; configuration can never load one.

A pack's distribution also lists the aliases its pack registers, one entry each in the group
``hndl.operators`` (``linear = "hndl_ops_basic"``: the alias, then the pack's own entry-point
reference). That list is read from the installed metadata alone, so an error about an unknown
alias can name the pack that provides it without importing or running any pack.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from typing import Iterable, NamedTuple

import pluggy

from .errors import HNDLError, listed, shown

ENTRY_POINT_GROUP = "hndl.packs"
#: Where a pack's distribution declares the aliases its pack registers: ``alias = "<the pack's reference>"``.
OPERATOR_GROUP = "hndl.operators"
FIRST_PARTY = ("basic", "vision", "transformer", "pretrained")

hookspec = pluggy.HookspecMarker("hndl")
#: Decorate a pack's ``hndl_register`` function with this marker.
hookimpl = pluggy.HookimplMarker("hndl")


class PackHooks:
    """The hooks an operator pack may implement."""

    @hookspec
    def hndl_register(self, registry) -> None:
        """Add this pack's operators (and any pretrained providers) to ``registry``."""


def installed_packs() -> dict[str, metadata.EntryPoint]:
    """Every pack installed in this environment, by entry-point name."""
    return dict(_scan(tuple(sys.path)).packs)


def declared_aliases() -> dict[str, frozenset[str]]:
    """The aliases each installed pack's distribution declares (group ``hndl.operators``), by pack.

    Read from the installed metadata only: nothing is imported and no pack code runs, so an
    error path may consult it. A pack that declares nothing maps to an empty set.
    """
    return dict(_scan(tuple(sys.path)).declared)


def installed_first_party() -> tuple[str, ...]:
    """The first-party packs installed here, in their documented order (what builtins() loads)."""
    installed = installed_packs()
    return tuple(name for name in FIRST_PARTY if name in installed)


def split_pack_names(text: str) -> tuple[str, ...]:
    """``"basic, vision"`` -> ``("basic", "vision")``: how every option naming packs is read."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


class _Installed(NamedTuple):
    """What one scan of the installed metadata found, by pack name."""

    packs: tuple[tuple[str, metadata.EntryPoint], ...]
    declared: tuple[tuple[str, frozenset[str]], ...]


@functools.lru_cache(maxsize=8)
def _scan(search_path: tuple[str, ...]) -> _Installed:
    """The packs and their declared aliases for one ``sys.path``, from one read of the entry
    points: scanning metadata is slow, and only a path change adds packs."""
    entries = metadata.entry_points()
    packs: dict[str, metadata.EntryPoint] = {}
    for entry in entries.select(group=ENTRY_POINT_GROUP):
        packs.setdefault(entry.name, entry)
    by_reference: dict[str, set[str]] = {}
    for entry in entries.select(group=OPERATOR_GROUP):
        by_reference.setdefault(entry.value, set()).add(entry.name)
    declared = tuple((name, frozenset(by_reference.get(entry.value, ()))) for name, entry in packs.items())
    return _Installed(tuple(packs.items()), declared)


def load_packs(registry, names: Iterable[str]) -> tuple[str, ...]:
    """Register the named packs into ``registry`` through a PluginManager of its own."""
    names = tuple(names)
    available = installed_packs()
    for name in names:
        if not isinstance(name, str) or name not in available:
            listing = listed(sorted(available)) or "none"
            raise HNDLError(
                "E_REGISTRY",
                f"no operator pack named {shown(name)} is installed (installed packs: {listing})",
                field="packs",
                remedies=(f"Install the pack, or choose one of: {listing}.",),
            )
    twice = _first_repeated(names)
    if twice is not None:
        raise HNDLError(
            "E_REGISTRY", f"the pack {shown(twice)} is named twice (packs named: {listed(names)})",
            field="packs", remedies=("Name each pack once.",),
        )
    manager = pluggy.PluginManager("hndl")
    manager.add_hookspecs(PackHooks)
    # pluggy calls the most recently registered plugin first, so register in reverse: packs
    # then add their operators in the order they were named.
    for name in reversed(names):
        manager.register(_load(name, available[name]), name=name)
    manager.hook.hndl_register(registry=registry)
    return names


def _first_repeated(names: tuple[str, ...]):
    """The first name that occurs a second time in ``names``, or None."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _load(name: str, entry: metadata.EntryPoint):
    try:
        return entry.load()
    except Exception as error:
        raise HNDLError(
            "E_REGISTRY",
            f"operator pack {name!r} ({getattr(entry, 'value', name)}) failed to import: {type(error).__name__}: {error}",
            field="packs",
            remedies=("Reinstall the pack, or leave it out of from_packs(...).",),
        ) from error
