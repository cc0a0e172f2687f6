"""The network constructors of §7: resolve with one frontend, then build a ``Network``."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ..frontends.pipeline import resolve, resolve_callable, resolve_file
from ..registry import Registry
from .build import construct
from ..errors import HNDLError
from .graph_module import GraphModule


class Network(GraphModule):
    """The §7 facade: inputs positionally or by keyword; one output returns a bare tensor."""

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        names = [name for name, _ in self._inputs]
        if len(args) > len(names):
            raise HNDLError("E_BINDING", f"the network takes {len(names)} input(s) ({', '.join(names)}), got {len(args)} positionally")
        inputs = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in inputs:
                raise HNDLError("E_BINDING", f"input {name!r} was given both positionally and by keyword")
            inputs[name] = value
        outputs = super().forward(**inputs)
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs


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
