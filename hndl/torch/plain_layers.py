"""Nodes built as the torch layers they configure, so type-matching tools treat them as torch's own.

Many declared classes add nothing to a torch layer but a keyword constructor: ``Linear`` only
maps ``out_features`` / ``in_features`` onto ``nn.Linear.__init__``. PyTorch tools look such
layers up by exact type (torch.ao's quantization mappings and ``from_float`` checks, fx's leaf
rule, fusion patterns, FLOP counters keyed by ``type(module)``), and a subclass matches none of
them. So once such a node is constructed, initialized and frozen as its plan says, its class is
set to that torch base: the object, its state and its behaviour are unchanged (the subclass
defined none), only ``type(module)`` now names the torch layer. The declaration is still the
one source of truth: build reads it from the registry, never from the module's class
(SPEC.md "Nodes are torch layers where the operator is one").
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from ..declaration import SPEC_ATTRIBUTE

#: What ``class X(nn.Linear)`` with only a constructor and a docstring holds in its namespace.
_CONFIGURATION_ONLY = frozenset({
    "__init__", "__module__", "__qualname__", "__doc__", "__annotations__", "__firstlineno__",
    "__static_attributes__", "__orig_bases__", "__parameters__", SPEC_ATTRIBUTE,
})


def torch_layer(cls: type) -> Optional[type]:
    """The torch.nn layer class ``cls`` only configures, or None.

    That is the case when ``cls`` has exactly one base and defines nothing but its constructor
    (no forward, no other method or class attribute), and that base is a class defined in
    ``torch.nn`` other than ``nn.Module`` itself, or again such a configuration-only class (an
    operator's frozen earlier version subclasses its current one), so every behaviour of an
    instance is the torch layer's.
    """
    if len(cls.__bases__) != 1 or set(vars(cls)) - _CONFIGURATION_ONLY:
        return None
    (base,) = cls.__bases__
    if base is nn.Module or not issubclass(base, nn.Module):
        return None
    if base.__module__.startswith("torch.nn."):
        return base
    return torch_layer(base)


#: ``torch_layer`` per declared class, read once: a class's namespace and bases do not change.
_LAYERS: dict[type, Optional[type]] = {}


def as_torch_layer(module: nn.Module) -> None:
    """Re-type ``module`` as the torch layer its class only configures (``torch_layer``); else leave it."""
    cls = type(module)
    try:
        base = _LAYERS[cls]
    except KeyError:
        base = _LAYERS[cls] = torch_layer(cls)
    if base is not None:
        module.__class__ = base
