"""Remedies that name the fix for an unknown name: the closest spellings, and the installed pack
that provides an operator alias the registry in use lacks.

Everything here runs only on an error path, in the host process. Finding which pack provides an
alias loads each installed pack (a fixed set: the environment's ``hndl.packs`` entry points, never
chosen by configuration text) into a scratch registry of its own, once per set of installed packs.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Iterable, Optional

from .packs import installed_packs

#: How many close spellings a remedy offers.
MAX_SUGGESTIONS = 3
#: difflib's similarity ratio a spelling must reach to be offered (its own default).
SIMILARITY = 0.6


def closest(name: Any, candidates: Iterable[str], *, limit: int = MAX_SUGGESTIONS) -> tuple[str, ...]:
    """The registered names most like ``name``, best first; none for a name that is not text."""
    if not isinstance(name, str):
        return ()
    pool = [candidate for candidate in dict.fromkeys(candidates) if isinstance(candidate, str)]
    return tuple(difflib.get_close_matches(name, pool, n=limit, cutoff=SIMILARITY))


def did_you_mean(name: Any, candidates: Iterable[str]) -> Optional[str]:
    """``"Did you mean linear?"`` (or ``"... a, b or c?"``), or None when nothing is close."""
    matches = closest(name, candidates)
    if not matches:
        return None
    if len(matches) == 1:
        return f"Did you mean {matches[0]}?"
    return f"Did you mean {', '.join(matches[:-1])} or {matches[-1]}?"


def providing_packs(alias: Any, registry: Any) -> tuple[str, ...]:
    """Installed packs that ``registry`` was not built from and whose operators include ``alias``."""
    if not isinstance(alias, str):
        return ()
    installed = tuple(sorted((name, entry.value) for name, entry in installed_packs().items()))
    held = set(registry.packs)
    return tuple(pack for pack, aliases in _alias_index(type(registry), installed)
                 if pack not in held and alias in aliases)


def missing_pack_remedies(alias: Any, registry: Any) -> tuple[str, ...]:
    """One remedy per installed pack that provides ``alias``, spelling the registry that has it."""
    remedies = []
    for pack in providing_packs(alias, registry):
        names = (*registry.packs, pack)
        call = f"Registry.from_packs({', '.join(repr(name) for name in names)})"
        remedies.append(f"The installed pack {pack!r} provides {alias!r}: resolve with {call} "
                        f"(on the command line: --packs {','.join(names)}).")
    return tuple(remedies)


def operator_remedies(alias: Any, registry: Any, fallback: str) -> tuple[str, ...]:
    """Remedies for an alias ``registry`` lacks: the installed packs that provide it when there are
    any, else the closest registered aliases (if any are close) and then ``fallback``."""
    providers = missing_pack_remedies(alias, registry)
    if providers:
        return providers
    close = did_you_mean(alias, registry.aliases())
    return (fallback,) if close is None else (close, fallback)


@functools.lru_cache(maxsize=4)
def _alias_index(registry_class: type, installed: tuple[tuple[str, str], ...]) -> tuple[tuple[str, frozenset], ...]:
    """``((pack, its aliases), ...)`` for every installed pack that loads; one that fails to import
    provides nothing here (loading it by name reports why)."""
    index = []
    for pack, _ in installed:
        try:
            index.append((pack, frozenset(registry_class.from_packs(pack).aliases())))
        except Exception:  # HNDLError for a pack that fails to import, anything a faulty pack raises
            continue
    return tuple(index)
