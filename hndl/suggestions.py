"""Remedies that name the fix for an unknown name: the closest spellings, and the installed pack
that provides an operator alias the registry in use lacks.

Everything here runs only on an error path, in the host process, on a name the configuration
chose. So it imports and runs nothing: which pack provides an alias is read from the aliases each
pack's distribution declares in its metadata (``hndl.packs.declared_aliases``), and a name too
long to resemble any candidate is not compared at all.
"""

from __future__ import annotations

import difflib
import re
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
    any, else the HNDL name of a torch name its operators declare (``silu`` -> ``swish``), the
    closest registered aliases (if any are close) and then ``fallback``."""
    providers = missing_pack_remedies(alias, registry)
    if providers:
        return providers
    synonym = synonym_remedy(alias, registry)
    close = did_you_mean(alias, registry.aliases())
    return tuple(remedy for remedy in (synonym, close, fallback) if remedy is not None)


# --------------------------------------------------------------------------------------
# Torch habits: names, keywords and positional values written the way torch spells them (§8 rule
# for torch-named operators). What an operator answers to is its own declaration's ``torch=``
# field (hndl.declaration.TorchSpelling); the core names no operator. Everything below runs only at
# binding time or on an error path, and reads declarations already registered: it imports nothing.
# --------------------------------------------------------------------------------------


def _spellings(name: str) -> tuple[str, ...]:
    """``name``, lowercased, and snake-cased (``BatchNorm2d`` -> ``batch_norm2d``), without repeats."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return tuple(dict.fromkeys((name, name.lower(), snake)))


def torch_spelling(spec: Any) -> Any:
    """The ``torch=`` spelling ``spec`` declares (a :class:`hndl.declaration.TorchSpelling`), or None."""
    return getattr(spec, "torch", None)


def torch_name(name: Any, registry: Any) -> Optional[tuple[str, str]]:
    """(alias, call) of the operator in ``registry`` whose declaration answers to the torch (or paper)
    name ``name`` (``silu``: the alias and call of the operator declaring that name), or None. Reads
    declarations only."""
    if not isinstance(name, str) or len(name) > 64:
        return None
    specs = tuple(registry)
    for spelling in _spellings(name):
        found = _declared_call(spelling, specs)
        if found is not None:
            return found
    return None


def _declared_call(spelling: str, specs: tuple) -> Optional[tuple[str, str]]:
    """(alias, call) of the first of ``specs`` whose declared torch names hold ``spelling``, or None."""
    for spec in specs:
        declared = torch_spelling(spec)
        call = declared.call_for(spelling, spec.alias) if declared is not None else None
        if call is not None:
            return spec.alias, call
    return None


def synonym_remedy(name: Any, registry: Any) -> Optional[str]:
    """"HNDL calls silu swish: write swish()." for a torch (or paper) name that an operator of
    ``registry`` declares (``torch=TorchSpelling(names=...)``), or for a torch-cased spelling of a
    registered alias (``LayerNorm``); None otherwise."""
    if not isinstance(name, str) or len(name) > 64:
        return None
    specs = tuple(registry)
    for spelling in _spellings(name):
        found = _declared_call(spelling, specs)
        if found is not None:
            return f"HNDL calls {name} {found[0]}: write {found[1]}."
        if spelling != name and spelling in registry:
            return f"HNDL calls {name} {spelling}: write {spelling}(...)."
    return None


#: Keyword names torch spells differently -> the HNDL argument (used when the operator has it).
KEYWORD_SYNONYMS: dict[str, str] = {
    "dim": "axis", "num_heads": "heads", "nhead": "heads", "n_heads": "heads", "n_head": "heads",
    "drop_path_rate": "stochastic_depth_prob", "drop_path": "stochastic_depth_prob",
    "dim_feedforward": "hidden", "intermediate_size": "hidden", "layer_norm_eps": "eps",
    "init_values": "init_value", "num_kv_heads": "kv_heads", "num_key_value_heads": "kv_heads",
    "window_size": "window", "shift_size": "shift",
}


#: Torch keywords that give a width HNDL reads from the input tensor: an operator that declares a
#: torch spelling and lacks the keyword is told to leave it out.
WIDTH_KEYWORDS = frozenset({"normalized_shape", "num_features", "num_channels", "in_channels", "embed_dim",
                            "d_model", "dim", "input_channels"})


def unknown_keyword_hint(spec: Any, key: Any) -> Optional[str]:
    """The HNDL spelling of a torch keyword an operator lacks, or None: the operator's own declared
    keyword remedies (``torch=TorchSpelling(keywords=...)``) and the generic torch vocabulary."""
    if not isinstance(key, str):
        return None
    args = getattr(spec, "args", {})
    alias = spec.alias
    if key == "inplace":
        return "HNDL operators never compute in place: drop inplace=."
    declared = torch_spelling(spec)
    if declared is not None and key in declared.keywords:
        return declared.keywords[key]
    target = KEYWORD_SYNONYMS.get(key)
    if target is not None and target != key and target in args:
        return f"{alias} spells {key}= as {target}=: write {alias}(..., {target}=...)."
    if key in WIDTH_KEYWORDS and declared is not None:
        return f"{alias} reads that width from its input tensor: leave it out, e.g. {alias}()."
    return None


def positional_remedies(spec: Any, accepted: tuple[str, ...]) -> tuple[str, ...]:
    """Remedies for more positional values than ``spec`` takes: the declared torch-spelling hint
    first, then the keyword-only arguments to pass the rest by."""
    remedies = []
    declared = torch_spelling(spec)
    if declared is not None and declared.hint:
        remedies.append(declared.hint)
    keywords = [name for name in spec.args if name not in accepted and name != "input_count"]
    if keywords:
        call = ", ".join(f"{name}=..." for name in keywords[:4]) + (", ..." if len(keywords) > 4 else "")
        remedies.append(f"Pass the remaining values by keyword: {spec.alias}({call}).")
    elif not remedies:
        remedies.append(f"{spec.alias} takes no other arguments: write {spec.alias}("
                        f"{', '.join(accepted)}).")
    return tuple(remedies)


def torch_habit(spec: Any, values: Any, author: Any) -> Optional[tuple[str, str, tuple[str, ...]]]:
    """(field, message, remedies) when a call is written the way torch writes the operator (its
    declared ``torch=`` spelling) and would mean something else here; None otherwise. ``values`` are
    the positional author values, ``author`` every bound argument."""
    declared = torch_spelling(spec)
    if declared is None:
        return None
    alias = spec.alias
    if declared.width_first and values:
        first = values[0]
        positional = spec.positional_args
        name = positional[0] if positional else None
        if (name is not None and isinstance(first, int) and not isinstance(first, bool)
                and spec.args[name].type is float):
            return (name,
                    f"{alias}({first}): an integer in {alias}'s first position reads like torch's width "
                    f"({declared.signature}), but here that position is {name} (a float); HNDL refuses it "
                    f"rather than use {name}={float(first)!r}",
                    (declared.hint,))
    if declared.habit is not None:
        return declared.habit(author)
    return None
