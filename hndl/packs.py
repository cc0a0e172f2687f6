"""Operator packs: the pluggy hook a pack implements and entry-point discovery.

A pack is a plain module registered under the entry-point group ``hndl.packs``. It
implements one hook, ``hndl_register(registry)``, and adds its declared operators to the
registry it is handed. Hosts opt packs in by name; configuration can never load one.
"""

from __future__ import annotations

import functools
import sys
from importlib import metadata
from typing import Iterable

import pluggy

from .errors import HNDLError

ENTRY_POINT_GROUP = "hndl.packs"
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
    return dict(_scan(tuple(sys.path)))


def installed_first_party() -> tuple[str, ...]:
    """The first-party packs installed here, in their documented order (what builtins() loads)."""
    installed = installed_packs()
    return tuple(name for name in FIRST_PARTY if name in installed)


def split_pack_names(text: str) -> tuple[str, ...]:
    """``"basic, vision"`` -> ``("basic", "vision")``: how every option naming packs is read."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


@functools.lru_cache(maxsize=8)
def _scan(search_path: tuple[str, ...]) -> tuple[tuple[str, metadata.EntryPoint], ...]:
    """Entry points for one ``sys.path``: scanning metadata is slow, and only a path change adds packs."""
    found: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry)
    return tuple(found.items())


def load_packs(registry, names: Iterable[str]) -> tuple[str, ...]:
    """Register the named packs into ``registry`` through a PluginManager of its own."""
    names = tuple(names)
    available = installed_packs()
    for name in names:
        if not isinstance(name, str) or name not in available:
            listing = ", ".join(sorted(available)) or "none"
            raise HNDLError(
                "E_REGISTRY",
                f"no operator pack named {name!r} is installed (installed packs: {listing})",
                field="packs",
                remedies=(f"Install the pack, or choose one of: {listing}.",),
            )
    if len(set(names)) != len(names):
        raise HNDLError(
            "E_REGISTRY", f"a pack is named twice in {names!r}", field="packs",
            remedies=("Name each pack once.",),
        )
    manager = pluggy.PluginManager("hndl")
    manager.add_hookspecs(PackHooks)
    # pluggy calls the most recently registered plugin first, so register in reverse: packs
    # then add their operators in the order they were named.
    for name in reversed(names):
        manager.register(_load(name, available[name]), name=name)
    manager.hook.hndl_register(registry=registry)
    return names


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
