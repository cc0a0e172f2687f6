"""The public resolution entry points: configuration text, configuration file, trusted callable.

Each one validates its keywords the same way, builds the author graph through its frontend,
and hands it to the one resolver. A string is always source; a path only comes from
``resolve_file``; a callable only from ``resolve_callable``. No entry point falls back to another.
Every plan leaves through ``_resolved``, which refuses one that could not be saved and restored
(§10), so a plan that resolves is always restorable.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..contracts import parse_contracts
from ..errors import HNDLError
from ..graph import Graph
from ..limits import validate_limits
from ..persist import require_savable
from ..plan import ResolvedPlan
from ..registry import Registry, using_registry
from ..resolve.resolver import resolve_graph
from .binder import Binder
from .capture import capture
from .config.worker import parse_isolated
from .config.interpret import interpret
from .config.source import Source, load_file, load_text


def resolve(
    source: str,
    *,
    input_shape: Any,
    output_shape: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> ResolvedPlan:
    """Interpret declarative configuration text and resolve it into an immutable plan."""
    if not isinstance(source, str):
        raise HNDLError(
            "E_SCHEMA",
            f"resolve() takes configuration text, not {type(source).__name__}",
            remedies=("Use resolve_file(path) for files and resolve_callable(fn) for Python functions.",),
        )
    return _resolve_source(load_text(source), input_shape, output_shape, dtype, input_dtype, registry, limits)


def resolve_file(
    path: Any,
    *,
    input_shape: Any,
    output_shape: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> ResolvedPlan:
    """Load a configuration file as bounded UTF-8 and resolve it like ``resolve``."""
    return _resolve_source(load_file(path), input_shape, output_shape, dtype, input_dtype, registry, limits)


def resolve_callable(
    fn: Callable[..., Any],
    *,
    input_shape: Any,
    output_shape: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> ResolvedPlan:
    """Call trusted ``fn`` once with symbolic inputs, then resolve the captured graph."""
    checked = validate_limits(limits)
    registry = _registry(registry)
    binder = Binder(_contracts(input_shape, output_shape, dtype, input_dtype, registry, checked),
                    max_nodes=checked["max_nodes"])
    graph = capture(fn, binder, registry)
    return _resolved(graph, registry, checked)


def _resolve_source(source: Source, input_shape, output_shape, dtype, input_dtype, registry, limits) -> ResolvedPlan:
    checked = validate_limits(limits)
    registry = _registry(registry)
    contracts = _contracts(input_shape, output_shape, dtype, input_dtype, registry, checked)
    # The parser counts operator calls against max_nodes, so an oversized source is refused by
    # the worker before the host decodes or binds any of it.
    program = parse_isolated(
        source, aliases=registry.aliases(), inputs=contracts.input_names, max_nodes=checked["max_nodes"]
    )
    try:
        graph = interpret(program, Binder(contracts, max_nodes=checked["max_nodes"]), registry)
        return _resolved(graph, registry, checked)
    except HNDLError as error:
        if source.file is None or error.location.line is None or error.location.file is not None:
            raise
        # A line and column from a file mean little without the file's name.
        raise error.located(file=source.file).with_traceback(error.__traceback__) from None


def _resolved(graph: Graph, registry: Registry, limits: Mapping[str, int]) -> ResolvedPlan:
    """Resolve ``graph`` and refuse a plan whose saved form would pass the 16 MiB plan bound (§10)."""
    with using_registry(registry):
        plan = resolve_graph(graph, limits=limits)
    require_savable(plan)
    return plan


def _registry(registry: Optional[Registry]) -> Registry:
    if registry is None:
        return Registry.builtins()
    if not isinstance(registry, Registry):
        raise HNDLError("E_SCHEMA", f"registry must be a hndl.Registry, not {type(registry).__name__}", field="registry")
    return registry


def _contracts(input_shape, output_shape, dtype, input_dtype, registry: Registry, limits):
    return parse_contracts(
        input_shape,
        output_shape,
        dtype=dtype,
        input_dtype=input_dtype,
        aliases=registry.aliases(),
        max_dimension=limits["max_dimension"],
    )
