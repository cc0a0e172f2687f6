"""Constructing one node's module: its constructor's arguments, the module bound, the dtype cast.

``hndl.torch.build`` constructs every node twice over: once on the meta device to bound the
registered state before anything is allocated (``MetaProbe``), once for real. Both go through
``instantiate``, which calls the declaration's class with ``constructor_kwargs``, and stop a
constructor at the first module past ``limits['max_node_modules']`` (``ModuleCounter``).
``in_compute_dtype`` casts a constructed module to the plan's compute dtype where that changes
anything. State whose size overflows torch's int64 size arithmetic is E_RESOURCE wherever torch
notices it (``size_overflow``): on the meta device, so before anything is allocated. Nodes that
repeat a declaration and its arguments measure the same, so the meta pass builds each distinct
construction once.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple, Optional

import torch
from torch import nn

from ..declaration import OperatorSpec
from ..errors import HNDLError
from ..plan import PlanNode
from .registrations import watching_registrations

__all__ = [
    "constructor_kwargs", "symbol_values", "instantiate", "ModuleCounter", "bounded_modules", "meta_module",
    "Measured", "MetaProbe", "construction_key", "in_compute_dtype", "cast_changes", "state_tensors", "registered_bytes",
    "is_allocation_failure", "is_size_overflow", "size_overflow", "first_line",
]

_SIGNATURES: dict[type, inspect.Signature] = {}
#: The constructor parameters that receive a node's port shapes, as dictionaries.
_SHAPE_ARGUMENTS = frozenset({"input_shapes", "output_shapes"})


def constructor_kwargs(spec: OperatorSpec, node: PlanNode) -> dict[str, Any]:
    """Every declared argument, plus the shape symbols and port shapes the constructor asks for (a
    symbol that only an unbound optional port carries is None)."""
    signature = _SIGNATURES.get(spec.cls)
    if signature is None:
        signature = _SIGNATURES[spec.cls] = inspect.signature(spec.cls.__init__)
    kwargs = dict(node.args)
    wanted = signature.parameters
    if "input_shapes" in wanted:
        kwargs["input_shapes"] = dict(node.input_shapes)
    if "output_shapes" in wanted:
        kwargs["output_shapes"] = dict(node.output_shapes)
    symbols = [name for name in spec.shape.symbols if name in wanted]
    if symbols:
        values = symbol_values(spec, node)
        kwargs.update({name: values[name] for name in symbols if name in values})
        if spec.optional_inputs:
            # A symbol only unbound optional ports carry has no extent at this node: None, not a
            # missing keyword (the constructor gets every symbol it names).
            kwargs.update({name: None for name in symbols if name not in kwargs})
    return kwargs


def symbol_values(spec: OperatorSpec, node: PlanNode) -> dict[str, int]:
    """Read each DSL symbol's resolved extent off the node's concrete port shapes."""
    values: dict[str, int] = {}
    for patterns, shapes in ((spec.shape.inputs, node.input_shapes), (spec.shape.outputs, node.output_shapes)):
        for pattern in patterns:
            if pattern.dims is None:
                continue
            ports = [port for port in shapes if port == pattern.name or (pattern.variadic and port.startswith(pattern.name))]
            for port in ports:
                shape = shapes[port]
                split = next((i for i, dim in enumerate(pattern.dims) if dim.kind == "ellipsis"), len(pattern.dims))
                head = list(zip(pattern.dims[:split], shape))
                tail = list(zip(pattern.dims[split + 1:], shape[len(shape) - (len(pattern.dims) - split - 1):])) if split < len(pattern.dims) else []
                for dim, extent in head + tail:
                    if dim.kind == "symbol" and isinstance(extent, int):
                        values.setdefault(dim.symbol, extent // dim.scale)
    return values


def instantiate(spec: OperatorSpec, node: PlanNode, kwargs: Optional[Mapping[str, Any]] = None) -> nn.Module:
    """Call ``node``'s declared class with its arguments (``kwargs``: its ``constructor_kwargs``
    where the caller has them); anything but an nn.Module is E_REGISTRY."""
    if kwargs is None:
        kwargs = constructor_kwargs(spec, node)
    elif not _SHAPE_ARGUMENTS.isdisjoint(kwargs):  # the shape dictionaries are the constructor's to keep
        kwargs = {name: dict(value) if name in _SHAPE_ARGUMENTS else value for name, value in kwargs.items()}
    module = spec.cls(**kwargs)
    if not isinstance(module, nn.Module):
        raise HNDLError("E_REGISTRY", f"{spec.qualified} constructed {type(module).__name__}, not an nn.Module", node=node.id)
    return module


class ModuleCounter:
    """Stop a node's constructor on this thread once it registers more than ``bound`` modules.

    Inside ``watching()`` (torch's global module-registration hook, this thread only, removed on
    exit) the count of the node given to ``start`` begins at one, its own module, and adds
    every submodule registered until ``stop``. Exceeding the bound is E_RESOURCE raised from
    inside the constructor, so no further module is built. One watch serves a whole pass.
    """

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._node: Optional[PlanNode] = None
        self._count = 0

    def watching(self):
        """The context in which registrations are counted."""
        return watching_registrations(on_module=self._counted)

    def start(self, node: PlanNode) -> None:
        self._node = node
        self._count = 1

    def stop(self) -> None:
        self._node = None

    def _counted(self, _name: str, _submodule: nn.Module) -> None:
        node = self._node
        if node is None:
            return
        self._count += 1
        if self._count > self._bound:
            bound = self._bound
            raise HNDLError(
                "E_RESOURCE",
                f"node {node.id!r} ({node.op}) creates more than {bound} torch modules, above "
                f"limits['max_node_modules']={bound}",
                node=node.id,
                remedies=("Shrink the arguments that make the node repeat submodules, or raise "
                          "limits['max_node_modules'].",),
            )


@contextmanager
def bounded_modules(node: PlanNode, bound: int) -> Iterator[None]:
    """Count ``node``'s modules (``ModuleCounter``) while the block runs."""
    counter = ModuleCounter(bound)
    with counter.watching():
        counter.start(node)
        try:
            yield
        finally:
            counter.stop()


def meta_module(spec: OperatorSpec, node: PlanNode, dtype: torch.dtype, module_bound: int,
                kwargs: Optional[Mapping[str, Any]] = None) -> Optional[nn.Module]:
    """``node``'s module built on the meta device in ``dtype``, or None where that is not possible.

    Only a construction that fails for being on the meta device gives None (the node is then
    measured after real construction). HNDL errors, such as more than ``module_bound`` modules,
    state whose size overflows torch's arithmetic and running out of memory propagate: falling
    back to real construction would repeat them.
    """
    try:
        with torch.device("meta"), bounded_modules(node, module_bound):
            module = instantiate(spec, node, kwargs)
    except HNDLError:
        raise
    except Exception as error:
        if is_size_overflow(error):
            raise size_overflow(node, error) from None
        if is_allocation_failure(error):
            reason = first_line(error)
        else:
            return None
    else:
        return in_compute_dtype(module, dtype)
    raise HNDLError(
        "E_RESOURCE",
        f"node {node.id!r} ({node.op}) ran out of memory while being measured on the meta device: {reason}",
        node=node.id,
        remedies=("Shrink the node's arguments; its constructor needs more host memory than is available.",),
    )


class Measured(NamedTuple):
    """What a meta-device construction of a node says: its registered bytes and parameter count."""

    state_bytes: int
    parameters: int


class MetaProbe:
    """Measure nodes on the meta device once per distinct (declaration, constructor arguments).

    A constructor is a function of its declaration and its keyword arguments, so nodes that
    repeat both (the hundred ``linear(16)`` of an MLP) measure the same: the first is built on
    the meta device (``meta_module``, with its module bound) and the others reuse its figures.
    Arguments that cannot be compared exactly (``construction_key`` gives None) are measured
    every time.
    """

    def __init__(self, dtype: torch.dtype, module_bound: int) -> None:
        self._dtype = dtype
        self._bound = module_bound
        self._known: dict[tuple, Optional[Measured]] = {}

    def measure(self, spec: OperatorSpec, node: PlanNode, kwargs: Optional[Mapping[str, Any]] = None) -> Optional[Measured]:
        """``node``'s figures, or None where it cannot be built on the meta device (``meta_module``).

        ``kwargs`` are the node's ``constructor_kwargs`` where the caller has them.
        """
        if kwargs is None:
            kwargs = constructor_kwargs(spec, node)
        key = construction_key(spec, kwargs)
        if key is not None:
            known = self._known.get(key, _UNKNOWN)
            if known is not _UNKNOWN:
                return known
        module = meta_module(spec, node, self._dtype, self._bound, kwargs)
        measured = None if module is None else Measured(
            registered_bytes(module), sum(parameter.numel() for parameter in module.parameters()))
        if key is not None:
            self._known[key] = measured
        return measured


_UNKNOWN = object()
_PLAIN = frozenset({int, str, bool, type(None)})


def construction_key(spec: OperatorSpec, kwargs: Mapping[str, Any]) -> Optional[tuple]:
    """A hashable key, equal for two constructions exactly when they get the same declaration
    and the same arguments (types included: ``1``, ``1.0`` and ``True`` differ, as do ``0.0``
    and ``-0.0``); None when an argument is not plain data. Valid while ``spec`` lives."""
    try:
        return (id(spec), _exact(kwargs))
    except TypeError:
        return None


def _exact(value: Any) -> Any:
    kind = type(value)
    if kind is dict:  # constructor_kwargs: str keys, and most arguments are plain scalars
        return (dict, tuple([
            (key if type(key) is str else _exact(key), type(item), item) if type(item) in _PLAIN
            else (key if type(key) is str else _exact(key), _exact(item))
            for key, item in value.items()
        ]))
    if kind in _PLAIN:
        return (kind, value)
    if kind is float:
        return (float, value.hex())
    if kind is tuple or kind is list:
        return (tuple, tuple(_exact(item) for item in value))
    if isinstance(value, Mapping):
        return (dict, tuple((_exact(key), _exact(item)) for key, item in value.items()))
    raise TypeError(f"{kind.__name__} is not plain data")


def state_tensors(module: nn.Module) -> tuple[torch.Tensor, ...]:
    """The parameters then the buffers ``module`` registers, as ``parameters()`` / ``buffers()`` list them.

    A module without submodules whose class keeps torch's listing methods is read straight off
    its registration dictionaries (the same tensors in the same order, without two generator
    walks); any other module is asked through ``parameters()`` and ``buffers()``.
    """
    if not module._modules and _lists_as_torch(type(module)):
        parameters = module._parameters.values()
        buffers = module._buffers.values()
        found = [tensor for tensor in parameters if tensor is not None]
        if len(found) > 1 and len({id(tensor) for tensor in found}) < len(found):
            found = list({id(tensor): tensor for tensor in found}.values())  # one parameter under two names
        held = [tensor for tensor in buffers if tensor is not None]
        if len(held) > 1 and len({id(tensor) for tensor in held}) < len(held):
            held = list({id(tensor): tensor for tensor in held}.values())
        return (*found, *held)
    return (*module.parameters(), *module.buffers())


#: The methods behind ``parameters()`` and ``buffers()``; a class overriding one is asked through them.
_LISTING = ("parameters", "named_parameters", "buffers", "named_buffers", "_named_members", "named_modules")
_TORCH_LISTING = tuple(getattr(nn.Module, name) for name in _LISTING)
_AS_TORCH: dict[type, bool] = {}


def _lists_as_torch(cls: type) -> bool:
    """Whether ``cls`` lists its state with torch's own methods (read once per class)."""
    try:
        return _AS_TORCH[cls]
    except KeyError:
        plain = _AS_TORCH[cls] = all(getattr(cls, name) is torch_method
                                     for name, torch_method in zip(_LISTING, _TORCH_LISTING))
        return plain


def in_compute_dtype(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """``module`` with its floating state cast to ``dtype``, as ``module.to(dtype=dtype)`` would,
    but only where that changes something (``cast_changes``)."""
    return module.to(dtype=dtype) if cast_changes(state_tensors(module), dtype) else module


def cast_changes(tensors: tuple, dtype: torch.dtype) -> bool:
    """Whether ``module.to(dtype=dtype)`` would change any of the module's ``tensors``.

    It does for a floating tensor in another dtype, or a complex tensor beside floating state
    (``.to`` casts it too). Otherwise ``.to`` would return every tensor unchanged, at about the
    cost of constructing the module again.
    """
    floating = complex_state = False
    for tensor in tensors:
        if tensor.is_floating_point():
            if tensor.dtype != dtype:
                return True
            floating = True
        elif tensor.is_complex():
            complex_state = True
    return floating and complex_state


def registered_bytes(module: nn.Module, tensors: Optional[tuple] = None) -> int:
    """Bytes of the distinct parameters and buffers ``module`` registers (``tensors``: its
    ``state_tensors`` where the caller has them)."""
    seen = set()
    total = 0
    for tensor in state_tensors(module) if tensors is None else tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def is_allocation_failure(error: BaseException) -> bool:
    """Whether ``error`` is an allocator refusing memory (CPU, CUDA or Python's own)."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


#: What torch says when a size does not fit its int64 arithmetic, or an extent does not fit a C long.
_SIZE_OVERFLOWS = ("Storage size calculation overflowed", "Overflow when unpacking long",
                   "integer multiplication overflow")


def is_size_overflow(error: BaseException) -> bool:
    """Whether ``error`` is torch (or Python) refusing a size too large for its 64-bit arithmetic."""
    if isinstance(error, OverflowError):
        return True
    return isinstance(error, (RuntimeError, TypeError)) and any(
        text in str(error) for text in _SIZE_OVERFLOWS)


def size_overflow(node: PlanNode, error: BaseException) -> HNDLError:
    """The E_RESOURCE for ``node``, whose constructor asked for state no size computation can hold."""
    return HNDLError(
        "E_RESOURCE",
        f"node {node.id!r} ({node.op}) asks for state whose size overflows torch's 64-bit size arithmetic "
        f"({first_line(error)}), beyond any limits['max_state_bytes']",
        node=node.id,
        remedies=("Shrink the node's extents, expansions or counts: no limit admits this much state.",),
    )


def first_line(error: BaseException) -> str:
    """``Type: first line of the message``, for E_RESOURCE messages."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
