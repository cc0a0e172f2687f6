"""Registry: the explicit set of operator declarations a resolution or build may use.

Registries are independent values: two registries never share state, and nothing is ever
registered globally. Aliases bind exact ``identity@version`` declarations; plans record the
identity, so restoring never depends on today's alias bindings.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Optional

from .declaration import OperatorSpec, operator as declare_operator, spec_of
from .errors import HNDLError, listed, shown
from .packs import installed_first_party, load_packs
from .suggestions import operator_remedies


class Registry:
    """Operator declarations by alias and identity, plus pretrained providers."""

    def __init__(self) -> None:
        self._by_alias: dict[str, OperatorSpec] = {}
        self._by_identity: dict[str, OperatorSpec] = {}
        self._providers: dict[str, Callable[[], Any]] = {}
        self._readouts: dict[str, dict[str, Callable[..., Any]]] = {}
        self._packs: tuple[str, ...] = ()
        self._ops = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_packs(cls, *names: str) -> "Registry":
        """A registry holding exactly the named installed packs."""
        registry = cls()
        registry._packs = load_packs(registry, names)
        return registry

    @classmethod
    def builtins(cls) -> "Registry":
        """A fresh registry holding every installed first-party pack.

        Loading the packs runs once per set of installed packs; every call copies that
        registry's tables (declarations and providers are immutable), so each caller still
        gets an independent registry to add to.
        """
        names = installed_first_party()
        template = _BUILTINS.get(names)
        if template is None or type(template) is not cls:
            template = _BUILTINS[names] = cls.from_packs(*names)
        return template._copy()

    def _copy(self) -> "Registry":
        copy = type(self)()
        copy._by_alias = dict(self._by_alias)
        copy._by_identity = dict(self._by_identity)
        copy._providers = dict(self._providers)
        copy._readouts = {name: dict(readouts) for name, readouts in self._readouts.items()}
        copy._packs = self._packs
        return copy

    @property
    def packs(self) -> tuple[str, ...]:
        """The names of the packs this registry was built from, in load order."""
        return self._packs

    # -- operators ----------------------------------------------------------------------
    def operator(self, alias: str, **declaration: Any) -> Callable[[type], type]:
        """Declare a class with ``hndl.operator`` and register it here in one step."""

        def register(cls: type) -> type:
            self.add(declare_operator(alias, **declaration)(cls))
            return cls

        return register

    def add(self, cls: type) -> type:
        """Register a class already decorated with ``hndl.operator``."""
        spec = spec_of(cls)
        if spec.alias in self._by_alias:
            raise HNDLError(
                "E_REGISTRY",
                f"alias {spec.alias!r} is already registered as {self._by_alias[spec.alias].qualified}",
                field="alias",
                remedies=("Register each alias once; pick a different alias for the new operator.",),
            )
        if spec.qualified in self._by_identity:
            raise HNDLError(
                "E_REGISTRY",
                f"identity {spec.qualified!r} is already registered "
                f"(alias {self._by_identity[spec.qualified].alias!r})",
                field="identity",
                remedies=("Give the new operator its own identity or raise its version.",),
            )
        self._by_alias[spec.alias] = spec
        self._by_identity[spec.qualified] = spec
        return cls

    def get(self, alias: str) -> OperatorSpec:
        """The declaration bound to ``alias``; E_OPERATOR when this registry lacks it."""
        try:
            return self._by_alias[alias]
        except (KeyError, TypeError):
            raise HNDLError(
                "E_OPERATOR",
                f"operator {shown(alias)} is not in this registry",
                remedies=operator_remedies(
                    alias, self, "Register the operator on the registry you resolve with, "
                    "or opt its pack in with Registry.from_packs(...).",
                ),
            ) from None

    def by_identity(self, identity: str) -> OperatorSpec:
        """The declaration with this exact ``identity@version``; E_STATE_VERSION if absent."""
        try:
            return self._by_identity[identity]
        except (KeyError, TypeError):
            raise HNDLError(
                "E_STATE_VERSION",
                f"no operator with identity {shown(identity)} is registered",
                remedies=("Register the operator implementation with exactly this identity and version.",),
            ) from None

    def has(self, spec: OperatorSpec) -> bool:
        """True when this exact declaration is registered here under its identity."""
        return self._by_identity.get(spec.qualified) is spec

    def aliases(self) -> tuple[str, ...]:
        """Every registered alias, in registration order."""
        return tuple(self._by_alias)

    def __contains__(self, alias: object) -> bool:
        return isinstance(alias, str) and alias in self._by_alias

    def __iter__(self) -> Iterator[OperatorSpec]:
        return iter(tuple(self._by_alias.values()))

    def __len__(self) -> int:
        return len(self._by_alias)

    def __repr__(self) -> str:
        return f"Registry(packs={list(self._packs)}, operators={len(self)})"

    @property
    def ops(self):
        """Symbolic operator functions for trusted callable capture, one per alias."""
        if self._ops is None:
            from .frontends.capture import OpsNamespace

            self._ops = OpsNamespace(self)
        return self._ops

    # -- pretrained providers -----------------------------------------------------------
    def pretrained_provider(
        self,
        name: str,
        build: Callable[[], Any],
        *,
        readouts: Optional[Mapping[str, Callable[..., Any]]] = None,
    ) -> None:
        """Bind a trusted zero-argument architecture builder (and readouts) to ``name``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise HNDLError("E_REGISTRY", f"provider name {shown(name)} must be an identifier", field="provider")
        if name in self._providers:
            raise HNDLError("E_REGISTRY", f"pretrained provider {name!r} is already registered", field="provider")
        if not callable(build):
            raise HNDLError("E_REGISTRY", f"provider {name!r} needs a callable builder", field="provider")
        readouts = dict(readouts or {})
        for readout_name, fn in readouts.items():
            _check_readout(readout_name, fn)
        self._providers[name] = build
        self._readouts[name] = readouts

    def pretrained_readout(self, provider: str, name: str, fn: Callable[..., Any]) -> None:
        """Register ``fn(model, x)`` as readout ``name`` of an already registered provider."""
        if provider not in self._providers:
            raise HNDLError("E_REGISTRY", f"no pretrained provider {provider!r} is registered", field="provider")
        _check_readout(name, fn)
        if name in self._readouts[provider]:
            raise HNDLError("E_REGISTRY", f"readout {name!r} of {provider!r} is already registered", field="readout")
        self._readouts[provider][name] = fn

    def provider(self, name: str) -> Callable[[], Any]:
        """The builder registered as ``name``; E_PRETRAINED when there is none."""
        if name not in self._providers:
            offered = listed(sorted(self._providers)) or "none"
            raise HNDLError(
                "E_PRETRAINED",
                f"no pretrained provider {shown(name)} is registered (registered: {offered})",
                field="provider",
            )
        return self._providers[name]

    def readouts(self, provider: str) -> Mapping[str, Callable[..., Any]]:
        """The readouts registered for ``provider``, read-only."""
        self.provider(provider)
        return MappingProxyType(self._readouts[provider])


#: Pack names -> the registry they loaded into, copied by ``Registry.builtins``.
_BUILTINS: dict[tuple[str, ...], Registry] = {}

_ACTIVE: ContextVar[Optional["Registry"]] = ContextVar("hndl_active_registry", default=None)


def active_registry() -> Optional[Registry]:
    """The registry of the resolution, restoration or build running in this context, or None.

    Operators whose relation or constructor must consult registry-held state (the pretrained
    operator's providers and readouts) read it here; nothing else is passed implicitly.
    """
    return _ACTIVE.get()


@contextmanager
def using_registry(registry: Registry) -> Iterator[Registry]:
    """Publish ``registry`` as the active one for the duration of the block."""
    token = _ACTIVE.set(registry)
    try:
        yield registry
    finally:
        _ACTIVE.reset(token)


def _check_readout(name: object, fn: object) -> None:
    if not isinstance(name, str) or not name.isidentifier() or not callable(fn):
        raise HNDLError("E_REGISTRY", f"readout {shown(name)} needs an identifier name and a callable", field="readout")
