"""The public resolution entry points: configuration text, configuration file, trusted callable.

Each one validates its keywords the same way, builds the author graph through its frontend,
and hands it to the one resolver. A string is always source; a path only comes from
``resolve_file``; a callable only from ``resolve_callable``. No entry point falls back to another.
Every plan leaves through ``_resolved``, which refuses one that could not be saved and restored
(§10), so a plan that resolves is always restorable.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional

from ..contracts import parse_contracts
from ..errors import HNDLError, shown
from ..graph import Graph
from ..limits import validate_limits
from ..persist import require_savable
from ..plan import ResolvedPlan
from ..registry import Registry, using_registry
from ..resolve.resolver import resolve_graph
from ..suggestions import operator_remedies
from .binder import Binder
from .capture import capture
from .config.grammar import unknown_operator
from .config.worker import parse_isolated
from .config.interpret import interpret
from .config.source import Source, load_file, load_text

#: A lone path-like token ending in a file suffix: ``spec.hndl``, ``./configs/mlp.py``, ``C:\\nets\\a.txt``.
FILE_NAME = re.compile(r"\s*[\w.~:/\\-]*\w\.[A-Za-z][A-Za-z0-9]{0,7}\s*\Z")
#: Longer text is never taken for a file name.
MAX_FILE_NAME = 4096


def resolve(
    source: str,
    *,
    input_shape: Any,
    output_shape: Any,
    dtype: Any = "float32",
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
    text = load_text(source)
    _refuse_file_name(source)
    return _resolve_source(text, input_shape, output_shape, dtype, input_dtype, registry, limits)


def resolve_file(
    path: Any,
    *,
    input_shape: Any,
    output_shape: Any,
    dtype: Any = "float32",
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
    dtype: Any = "float32",
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
    try:
        program = parse_isolated(
            source, aliases=registry.aliases(), inputs=contracts.input_names, max_nodes=checked["max_nodes"]
        )
    except HNDLError as error:
        raise _with_operator_hints(error, registry) from None
    try:
        graph = interpret(program, Binder(contracts, max_nodes=checked["max_nodes"]), registry)
        return _resolved(graph, registry, checked)
    except HNDLError as error:
        if source.file is None or error.location.line is None or error.location.file is not None:
            raise
        # A line and column from a file mean little without the file's name.
        raise error.located(file=source.file).with_traceback(error.__traceback__) from None


def _refuse_file_name(source: str) -> None:
    """A lone token such as ``"spec.hndl"`` or ``"configs/mlp.py"`` is a path passed where text
    belongs; no configuration is a single dotted token, so naming the file API costs nothing."""
    if len(source) <= MAX_FILE_NAME and FILE_NAME.match(source):
        name = source.strip()
        raise HNDLError(
            "E_SYNTAX",
            f"resolve() takes configuration text, and {shown(name)} looks like a file name",
            line=1,
            column=1,
            remedies=(f"Read the file with hndl.resolve_file({name!r}, ...), or build it with "
                      f"hndl.torch.network_file({name!r}, ...).",
                      "Pass the configuration itself, e.g. resolve(\"linear(64)\\nrelu()\", ...), to resolve text."),
        )


def _with_operator_hints(error: HNDLError, registry: Registry) -> HNDLError:
    """An unknown-operator error from the parser, with remedies only the host can give: the
    closest registered aliases and the installed pack that provides the alias (the worker sees
    alias names only, and loads nothing)."""
    alias = unknown_operator(error)
    if alias is None:
        return error
    where = error.location
    return HNDLError(error.code, error.message, line=where.line, column=where.column, node=where.node,
                     field=where.field, file=where.file, chain=error.chain,
                     remedies=operator_remedies(alias, registry, error.remedies[0]))


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
