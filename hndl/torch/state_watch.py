"""Tell built graphs when registered state changes on one of their modules.

torch runs a global hook whenever any module registers a parameter, a buffer or a submodule:
``register_parameter``, ``register_buffer``, ``add_module`` / ``register_module`` and attribute
assignment all go through them (``load_state_dict(assign=True)`` too, because it assigns).
This module installs one hook of each kind, once per process, when ``hndl.torch`` is imported.
Each hook is a ``WeakValueDictionary`` lookup by ``id(module)`` that finds nothing for modules
no built graph watches, so modules constructed elsewhere cost one lookup per registration and
never touch a graph. The hooks return None, so they never alter a registration.

A graph watches its root, its ``nodes`` container and every module under it (recursively) with
``watch(graph, modules)`` and keeps the returned handles; a handle lives as long as some graph
holds it, and a graph is held only weakly, so watching never keeps a module or a graph alive.

PyTorch runs no hook for ``del module.name``, for ``module.param = None`` (which calls
``register_parameter(name, None)``, the one registration path without a hook) or for writes
straight into ``_parameters`` / ``_buffers`` / ``_modules``; GraphModule documents how it
reports those.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

from torch import nn
from torch.nn.modules import module as _torch_module

__all__ = ["watch", "watch_slots", "watched_graphs", "install", "NodeSlots"]


class _Watch:
    """One watched module and the graphs (weakly held) that want to hear about it."""

    __slots__ = ("module", "graphs", "__weakref__")

    def __init__(self, module: nn.Module) -> None:
        self.module = weakref.ref(module)
        self.graphs: "weakref.WeakSet[Any]" = weakref.WeakSet()


#: id(module) -> its watch; an entry disappears when no graph holds its handle any more.
_WATCHED: "weakref.WeakValueDictionary[int, _Watch]" = weakref.WeakValueDictionary()
_HANDLES: tuple = ()


def watch(graph: Any, modules: Iterable[nn.Module]) -> tuple[_Watch, ...]:
    """Watch ``modules`` on behalf of ``graph``; the graph must keep the returned handles.

    ``graph._registered_state_changed()`` is called whenever one of the modules registers a
    parameter, buffer or submodule.
    """
    handles = []
    seen = set()
    for module in modules:
        if id(module) in seen:
            continue
        seen.add(id(module))
        entry = _WATCHED.get(id(module))
        if entry is None or entry.module() is not module:  # absent, or an id reused after death
            entry = _WATCHED[id(module)] = _Watch(module)
        entry.graphs.add(graph)
        handles.append(entry)
    return tuple(handles)


def watched_graphs(module: nn.Module) -> tuple:
    """The live graphs watching ``module`` (for tests and diagnostics)."""
    entry = _WATCHED.get(id(module))
    if entry is None or entry.module() is not module:
        return ()
    return tuple(entry.graphs)


def _registration(module: nn.Module, name: str, value: Any) -> None:
    entry = _WATCHED.get(id(module))
    if entry is not None and entry.module() is module:
        for graph in tuple(entry.graphs):
            graph._registered_state_changed()
    return None


def install() -> None:
    """Install the three global registration hooks (idempotent; done at import)."""
    global _HANDLES
    if _HANDLES:
        return
    _HANDLES = (
        _torch_module.register_module_parameter_registration_hook(_registration),
        _torch_module.register_module_buffer_registration_hook(_registration),
        _torch_module.register_module_module_registration_hook(_registration),
    )


install()


class NodeSlots(dict):
    """A graph's ``nodes._modules`` (and its own ``_modules``): a dict that tells the graph when a
    module is written into it.

    torch runs no registration hook for ``container._modules[name] = module``, and that is how
    torch.ao's ``convert`` (behind ``quantize_dynamic(..., inplace=True)``) swaps a layer for its
    quantized counterpart. Writing through this dict marks the graph's state as changed, so the
    next call re-checks it (and adopts such a conversion) instead of running the old module. It
    copies and pickles as a plain dict; the graph wraps its container again when rebuilt.
    """

    __slots__ = ("graph",)

    def __setitem__(self, name: str, module: Any) -> None:
        super().__setitem__(name, module)
        graph = self.graph()
        if graph is not None:
            graph._registered_state_changed()

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        graph = self.graph()
        if graph is not None:
            graph._registered_state_changed()

    def __reduce_ex__(self, protocol: int) -> tuple:
        return (dict, (dict(self),))


def watch_slots(graph: Any, container: nn.Module) -> None:
    """Make ``container._modules`` and the graph's own ``_modules`` ``NodeSlots`` reporting to ``graph``.

    The graph's own dict holds ``nodes``: ``graph._modules["nodes"] = nn.ModuleDict(...)`` runs
    no torch hook either, and without a report a remembered signature would keep running the
    old modules while ``parameters()`` and ``state_dict()`` report the new ones. A dict of
    another kind (the sealed one a ``Network`` keeps, which refuses such writes) is left as it is.
    The graph is held weakly.
    """
    reference = weakref.ref(graph)
    slots = NodeSlots(container._modules)
    slots.graph = reference
    container.__dict__["_modules"] = slots
    own = graph.__dict__.get("_modules")
    if graph is not container and type(own) in (dict, NodeSlots):
        slots = NodeSlots(own)
        slots.graph = reference
        graph.__dict__["_modules"] = slots
