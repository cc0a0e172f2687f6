"""Trusted callable capture: run the author's Python once with symbolic tensors (§7).

Operator functions (``hndl.ops.linear``, ``registry.ops.silu``) record nodes into whichever
capture is active in the calling context. The context is a ContextVar, so concurrent captures
on other threads never see each other, and nested captures restore the outer one on exit.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any, Callable, Mapping, Optional

from ..errors import HNDLError
from ..graph import Graph
from ..suggestions import missing_pack_remedies
from .binder import Binder, Symbol

FRONTEND = "python_callable@1"


class _Capture:
    __slots__ = ("binder", "registry")

    def __init__(self, binder: Binder, registry) -> None:
        self.binder = binder
        self.registry = registry


_active: ContextVar[Optional[_Capture]] = ContextVar("hndl_capture", default=None)


class OpsNamespace:
    """``registry.ops``: one symbolic function per alias of one registry."""

    def __init__(self, registry) -> None:
        self._registry = registry

    def __getattr__(self, alias: str) -> Callable[..., Any]:
        if alias.startswith("__"):
            raise AttributeError(alias)
        spec = self._registry.get(alias)

        def call(*args: Any, **kwargs: Any) -> Any:
            capture = _active.get()
            if capture is None:
                raise HNDLError(
                    "E_CAPTURE",
                    f"ops.{alias}() was called outside a capture; it records graph nodes and computes nothing",
                    remedies=("Call it inside a function passed to resolve_callable or network_from_callable.",),
                )
            if not capture.registry.has(spec):
                raise HNDLError(
                    "E_OPERATOR",
                    f"{spec.qualified} (ops.{alias}) is not in the registry this capture resolves with",
                    remedies=("Use registry.ops of the registry you pass to the capture API.",
                              *missing_pack_remedies(alias, capture.registry)),
                )
            caller = sys._getframe(1)
            return capture.binder.call(spec, args, kwargs, line=caller.f_lineno)

        call.__name__ = alias
        call.__doc__ = spec.summary
        # Aliases are never rebound in a registry: later lookups find the function directly.
        self.__dict__[alias] = call
        return call

    def __dir__(self) -> list[str]:
        return list(self._registry.aliases())


def capture(fn: Callable[..., Any], binder: Binder, registry) -> Graph:
    """Invoke ``fn`` exactly once with one symbol per declared input and build its graph."""
    if not callable(fn) or isinstance(fn, str):
        raise HNDLError(
            "E_CAPTURE",
            f"resolve_callable needs a callable, not {type(fn).__name__}",
            remedies=("Pass configuration text to resolve(), and a Python function to resolve_callable().",),
        )
    binder.registry = registry
    token = _active.set(_Capture(binder, registry))
    try:
        names = binder.contracts.input_names
        if names == ("x",):
            result = fn(binder.inputs["x"])
        else:
            result = fn(**binder.inputs)
    finally:
        _active.reset(token)
    if binder.contracts.named_outputs:
        if not isinstance(result, Mapping):
            raise HNDLError(
                "E_OUTPUT",
                f"a callable with named outputs must return a mapping of {', '.join(binder.contracts.output_names)}",
                remedies=("Return {name: tensor, ...} for every declared output.",),
            )
        outputs = binder.select_named(result, what="the returned mapping")
    else:
        if result is not None and not isinstance(result, Symbol):
            raise HNDLError(
                "E_OUTPUT",
                f"the callable returned {type(result).__name__}; return one symbolic tensor or None",
                remedies=("Return the output tensor, or nothing to select current.",),
            )
        outputs = {"output": binder.select_single(result, what="the returned value")}
    code = getattr(fn, "__code__", None)
    provenance = {
        "kind": FRONTEND,
        "qualname": getattr(fn, "__qualname__", type(fn).__qualname__),
        "module": getattr(fn, "__module__", None),
        "file": code.co_filename if code else None,
        "line": code.co_firstlineno if code else None,
    }
    return binder.graph(outputs, frontend=FRONTEND, provenance=provenance)
