"""Registered state: record a graph's parameter, buffer and submodule slots at build, compare later.

HNDL fixes every parameter, buffer and submodule when it builds a plan; state added or removed
afterwards would not be trained, seeded or saved as the plan describes. ``record_state`` walks
the ``nodes`` container once, at construction, and records every module under it with its
slots: parameters and buffers by presence (a tensor replaced under the same name is
legitimate, e.g. ``load_state_dict(assign=True)``), submodules by identity.
``state_difference`` replays that record against the live modules and names the first
difference and the node it belongs to. GraphModule replays it before and after the checked
program (the first call of each input signature), after a fast-path call during which a
registration hook fired, in the traced program while a hook has marked the state as changed,
and when a node raises (for the failure note).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from torch import nn

from ..errors import MAX_NAME_CHARS, echo
from .torch_edits import Tolerance, tolerance


def record_state(container: nn.Module, node_of: Mapping[str, str]) -> tuple:
    """Every module under ``container`` with its parameter, buffer and submodule slots.

    Each entry is ``(path, node id, module, ((name, present), ...) for parameters, the same for
    buffers, ((name, child or None), ...))``. Parameters and buffers are recorded by presence
    (a tensor replaced under the same name is legitimate: ``load_state_dict(assign=True)``);
    submodules by identity.
    """
    entries = []
    seen: set[int] = set()
    pending = [(container, "nodes", None)]  # depth-first, children in registration order
    while pending:
        module, path, node = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        children = tuple(module._modules.items())
        entries.append((
            path, node, module,
            tuple([(name, value is not None) for name, value in module._parameters.items()]),
            tuple([(name, value is not None) for name, value in module._buffers.items()]),
            children,
        ))
        for name, child in reversed(children):
            if child is not None:
                pending.append((child, f"{path}.{name}", node if node is not None else node_of.get(name)))
    return tuple(entries)


def _slot(path: str, name: str) -> str:
    """A slot's dotted name as a message shows it: escaped, and cut if a host registered a huge name."""
    return echo(f"{path}.{name}", MAX_NAME_CHARS)


def _slot_difference(path: str, kind: str, recorded: tuple, current: Mapping[str, Any],
                     taken: frozenset = frozenset(), added: frozenset = frozenset()) -> Optional[str]:
    """How ``current`` differs from ``recorded``; ``taken`` may be absent and ``added`` may be new
    (the slots a torch reparametrization accounts for, ``torch_edits.tolerance``)."""
    if len(recorded) == len(current):
        for name, present in recorded:
            if name not in current or (current[name] is not None) != present:
                break
        else:
            return None
    names = set()
    for name, present in recorded:
        names.add(name)
        if name not in current:
            if present and name in taken:
                continue
            return f"{kind} '{_slot(path, name)}' was removed"
        value = current[name]
        if present and value is None:
            return f"{kind} '{_slot(path, name)}' was set to None"
        if not present and value is not None:
            return f"{kind} '{_slot(path, name)}' was filled in (it was None at build)"
    for name in current:
        if name not in names and name not in added:
            return f"{kind} '{_slot(path, name)}' was added"
    return None


def _children_difference(path: str, recorded: tuple, current: Mapping[str, Any],
                         added: frozenset = frozenset()) -> Optional[tuple[str, str]]:
    if len(recorded) == len(current):
        for name, child in recorded:
            if current.get(name, _MISSING) is not child:
                break
        else:
            return None
    names = set()
    for name, child in recorded:
        names.add(name)
        value = current.get(name, _MISSING)
        if value is child:
            continue
        if value is _MISSING:
            return name, f"submodule '{_slot(path, name)}' was removed"
        if child is None:
            return name, f"submodule '{_slot(path, name)}' was filled in with {type(value).__name__} (it was None at build)"
        if value is None:
            return name, f"submodule '{_slot(path, name)}' was set to None (it was {type(child).__name__} at build)"
        other = "another " if type(value) is type(child) else ""
        return name, f"submodule '{_slot(path, name)}' was replaced with {other}{type(value).__name__} (it was {type(child).__name__} at build)"
    for name, value in current.items():
        if name not in names and name not in added:
            added_type = "None" if value is None else type(value).__name__
            return name, f"submodule '{_slot(path, name)}' was added ({added_type})"
    return None


_MISSING = object()


def state_difference(record: tuple, node_of: Mapping[str, str]) -> Optional[tuple[Optional[str], str]]:
    """Replay ``record``: ``(node id or None, what differs)`` for the first difference, else None.

    A module that differs is looked at again with what torch's reparametrizations
    (``torch_edits.tolerance``) account for, so only a difference they do not explain counts.
    """
    for path, node, module, parameters, buffers, children in record:
        found = _module_difference(path, node, module, parameters, buffers, children, node_of, None)
        if found is not None:
            allowed = tolerance(module)
            if allowed is not None:
                found = _module_difference(path, node, module, parameters, buffers, children, node_of, allowed)
        if found is not None:
            return found
    return None


def _module_difference(path, node, module, parameters, buffers, children, node_of, allowed: Optional[Tolerance]):
    taken, added_parameters, added_buffers, added_children = allowed or (frozenset(),) * 4
    text = _slot_difference(path, "parameter", parameters, module._parameters, taken, added_parameters)
    if text is None:
        text = _slot_difference(path, "buffer", buffers, module._buffers, taken, added_buffers)
    if text is not None:
        return node, text
    found = _children_difference(path, children, module._modules, added_children)
    if found is not None:
        name, text = found
        return (node if node is not None else node_of.get(name)), text
    return None
