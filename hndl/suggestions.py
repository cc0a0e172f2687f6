"""Remedies that name the fix for an unknown name: the closest spellings, and the installed pack
that provides an operator alias the registry in use lacks.

Everything here runs only on an error path, in the host process, on a name the configuration
chose. So it imports and runs nothing: which pack provides an alias is read from the aliases each
pack's distribution declares in its metadata (``hndl.packs.declared_aliases``), and a name too
long to resemble any candidate is not compared at all.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Optional

from .packs import declared_aliases

#: How many close spellings a remedy offers.
MAX_SUGGESTIONS = 3
#: difflib's similarity ratio a spelling must reach to be offered (its own default).
SIMILARITY = 0.6


def closest(name: Any, candidates: Iterable[str], *, limit: int = MAX_SUGGESTIONS) -> tuple[str, ...]:
    """The registered names most like ``name``, best first; none for a name that is not text."""
    if not isinstance(name, str):
        return ()
    pool = [candidate for candidate in dict.fromkeys(candidates) if isinstance(candidate, str)]
    if not pool or len(name) > _longest_match(max(map(len, pool))):
        return ()  # difflib's time grows with the name; one this long can resemble nothing here
    return tuple(difflib.get_close_matches(name, pool, n=limit, cutoff=SIMILARITY))


def _longest_match(longest_candidate: int) -> int:
    """The longest name that can still reach ``SIMILARITY`` with a candidate of the given length.

    difflib's ratio is ``2 * matches / (len(a) + len(b))`` and matches never exceed the shorter
    length, so a name longer than ``(2 / SIMILARITY - 1)`` times every candidate is never close.
    """
    return int(longest_candidate * (2 / SIMILARITY - 1)) + 1


def did_you_mean(name: Any, candidates: Iterable[str]) -> Optional[str]:
    """``"Did you mean linear?"`` (or ``"... a, b or c?"``), or None when nothing is close."""
    matches = closest(name, candidates)
    if not matches:
        return None
    if len(matches) == 1:
        return f"Did you mean {matches[0]}?"
    return f"Did you mean {', '.join(matches[:-1])} or {matches[-1]}?"


def providing_packs(alias: Any, registry: Any) -> tuple[str, ...]:
    """Installed packs that ``registry`` was not built from and whose distributions declare ``alias``."""
    if not isinstance(alias, str):
        return ()
    held = set(registry.packs)
    return tuple(sorted(pack for pack, aliases in declared_aliases().items()
                        if pack not in held and alias in aliases))


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
