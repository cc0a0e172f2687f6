"""The frozen values plans are made of: deep read-only copies, their plain form, shared constants.

Plans, their encoding, their restoration and their inspection all read these, so they live
below the plan types themselves.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

SCHEMA_VERSION = 1
RESOLUTION_VERSION = 1


def freeze(value: Any) -> Any:
    """A deeply read-only copy: dicts become mapping proxies, lists become tuples."""
    kind = type(value)
    if kind in SCALARS or id(value) in _CONSTANTS:
        return value
    if kind is tuple or kind is list:
        if kind is tuple and all(type(item) in SCALARS for item in value):
            return value
        return tuple(freeze(item) for item in value)
    if kind is dict or kind is MappingProxyType or isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    return value


SCALARS = frozenset({str, int, float, bool, type(None)})

_CONSTANTS: set[int] = set()


def frozen_constant(value: Any) -> Any:
    """Freeze a module-level constant once, so plans can share it instead of copying it."""
    frozen = freeze(value)
    _CONSTANTS.add(id(frozen))
    return frozen


#: The construction records of a node without init= or trainable= (§11), shared by every plan.
DEFAULT_INITIALIZATION = frozen_constant({"kind": "torch_default@1", "overrides": {}})
DEFAULT_TRAINABILITY = frozen_constant({"default": None, "overrides": {}})


def thaw(value: Any) -> Any:
    """The plain-data form of frozen plan values: mapping proxies become dicts, tuples stay.

    Used to compare, pickle, encode and print plan records; other objects pass unchanged.
    """
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is tuple or kind is list:
        return tuple(thaw(item) for item in value)
    if kind is dict or kind is MappingProxyType or isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    return value


def exact_key(value: Any) -> Any:
    """A hashable key that is equal for two values exactly when they are the same data, types
    included (``True`` is not ``1``, ``1.0`` is not ``1``, ``-0.0`` is not ``0.0``); None for data
    of any other kind. Caches of work that depends only on argument values key on it."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return kind, value
    if kind is float:
        return kind, repr(value)
    if kind is tuple or kind is list:
        items = tuple(map(exact_key, value))
        return None if None in items else (kind, items)
    if kind is dict or kind is MappingProxyType:
        items = []
        for key, item in value.items():
            if type(key) is not str:
                return None
            item_kind = type(item)
            if item_kind is str or item_kind is int or item_kind is bool or item is None:
                items.append((key, item_kind, item))
            else:
                item_key = exact_key(item)
                if item_key is None:
                    return None
                items.append((key, item_key))
        return kind, tuple(items)
    return None
