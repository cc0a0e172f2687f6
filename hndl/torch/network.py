"""The network constructors of §7: resolve with one frontend, then build a ``Network``."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..frontends.pipeline import resolve, resolve_callable, resolve_file
from ..registry import Registry
from .build import construct
from .graph_module import Network


def network(
    source: str,
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Resolve configuration text and build it; ``model(x)`` returns a tensor."""
    return _network(resolve, source, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def network_file(
    path: Any,
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Load a configuration file (bounded UTF-8), resolve and build it."""
    return _network(resolve_file, path, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def network_from_callable(
    fn: Callable[..., Any],
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Capture trusted ``fn`` once, resolve and build it."""
    return _network(resolve_callable, fn, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def _network(resolver, specification, *, device, initialization_seed, registry, limits, **contract) -> Network:
    """Resolve with one frontend, then build under the same registry and limits."""
    registry = Registry.builtins() if registry is None else registry
    plan = resolver(specification, registry=registry, limits=limits, **contract)
    return construct(plan, Network, device=device, initialization_seed=initialization_seed,
                     registry=registry, limits=limits)
