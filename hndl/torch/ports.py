"""The port/step model of a built graph: every node's tensor contracts, compiled for checking.

A *port* is one named input or output of a node (or an external input of the graph), with the
contract the plan resolved for it: a shape whose entries are fixed extents or whole multiples
of the batch symbol (``B``, ``2*B``), a dtype (or any) and, at call time, the graph's device.
A *port check* compares a runtime value against that contract for this call's batch size,
read from the first external input. GraphModule runs every port check, before and after each
node, on the first call of each input signature (the checked program, SPEC.md §11): a node
that breaks its contract is reported at the node that broke it, with the contract and the
value side by side, instead of as a shape error somewhere downstream. Opaque operators assert
an output contract that they cannot derive, so their output ports are checked on every call.

``Port`` is one compiled contract, ``Step`` one node of the compiled program (its module, the
values it reads and writes, its ports and its source location).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
from torch import nn
from torch.fx import Proxy

from ..contracts import batch_multiple
from ..errors import HNDLError

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
DTYPE_NAMES = {value: key for key, value in TORCH_DTYPES.items()}

#: A graph whose state is on the meta device holds no values, so its ports take any device: called
#: with meta tensors it computes shapes only, as torch's modules do, and under
#: ``torch.func.functional_call`` (``stack_module_state`` ensembles over a meta base model) the
#: state substituted for its meta tensors decides where the values live; torch itself refuses a
#: mix of devices inside a node.
META_DEVICE = "meta"

CONTRACT_REMEDY = "Call the module with tensors matching the plan's contracts."
FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def autocast_dtypes(device: torch.device) -> tuple:
    """The dtypes a floating port may carry besides its own while autocast is on for ``device``.

    Autocast runs its low-precision ops in its dtype and its full-precision ops in float32
    (SPEC.md "Runtime validation under autocast"); off, or enabled only for another device
    type, nothing is added; nor for a device type autocast does not know (``meta``, where torch
    raises, and a module computes no values to cast). A tuple, so the traced program evaluates
    it once under dynamo.
    """
    kind = device.type
    try:
        if not torch.is_autocast_enabled(kind):
            return ()
    except RuntimeError:  # "unknown device type for autocast": meta
        return ()
    return (torch.get_autocast_dtype(kind), torch.float32)


def dtype_name(dtype: Any) -> str:
    """HNDL's spelling of a torch dtype: ``float64``, not ``torch.float64``."""
    name = DTYPE_NAMES.get(dtype)
    if name is not None:
        return name
    text = str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


def describe(value: Any) -> str:
    """``[3, 5]:float32 on cpu`` for a tensor, the type name for anything else."""
    if isinstance(value, torch.Tensor):
        return f"{list(value.shape)}:{dtype_name(value.dtype)} on {value.device}"
    return type(value).__name__


class Port:
    """A compiled port contract: batch multiples and fixed extents, dtype, label."""

    __slots__ = ("label", "name", "entries", "dtype", "floating", "symbol")

    def __init__(self, label: str, name: str, shape: tuple, dtype: Optional[str], batch: str,
                 casts: Mapping[torch.dtype, torch.dtype] = {}) -> None:
        self.label = label
        self.name = name
        self.symbol = batch
        declared = TORCH_DTYPES.get(dtype) if dtype not in (None, "any") else None
        #: The dtype the port carries now: the plan's, or where a floating cast (``.double()``,
        #: ``.to(torch.bfloat16)``) moved the module, the dtype it moved to.
        self.dtype = casts.get(declared, declared)
        self.floating = self.dtype in FLOATING
        self.entries = port_entries(tuple(shape), batch)

    def expected(self, batch: int) -> list:
        return [value * batch if kind else value for kind, value, _ in self.entries]

    def contract(self, batch: int) -> str:
        """``[B=3, 4]`` (``[2*B=6, 4]`` for a multiple) for this call's batch."""
        return "[" + ", ".join(f"{text}={value * batch}" if kind else str(value) for kind, value, text in self.entries) + "]"

    def contract_full(self, batch: int, device: torch.device) -> str:
        dtype = dtype_name(self.dtype) if self.dtype is not None else "any"
        return f"{self.contract(batch)}:{dtype} on {device}"

    def accepts_dtype(self, dtype: torch.dtype, loose: tuple) -> bool:
        """Whether a value of ``dtype`` meets this port's dtype; ``loose`` is ``autocast_dtypes``."""
        return self.dtype is None or dtype == self.dtype or (self.floating and dtype in loose)

    def problem(self, value: Any, batch: int, device: torch.device, loose: tuple = ()) -> Optional[str]:
        """The first line of what is wrong with ``value`` at this port, or None."""
        if not isinstance(value, torch.Tensor):
            return f"{self.label}: expected a tensor, got {type(value).__name__}"
        shape = value.shape
        expected = self.expected(batch)
        if len(shape) != len(expected) or any(a != b for a, b in zip(shape, expected)):
            return f"{self.label}: expected shape {self.contract(batch)}, got {list(shape)}"
        if not self.accepts_dtype(value.dtype, loose):
            extra = dict.fromkeys(loose) if self.floating else ()
            also = "".join(f" or {dtype_name(dtype)}" for dtype in extra if dtype != self.dtype)
            under = " (autocast)" if also else ""
            return f"{self.label}: expected dtype {dtype_name(self.dtype)}{also}{under}, got {dtype_name(value.dtype)}"
        if value.device != device and device.type != META_DEVICE:
            return f"{self.label}: expected device {device}, got {value.device}"
        return None

    def check(self, value: Any, batch: int, device: torch.device, loose: tuple, source: str, **where: Any) -> None:
        """Raise E_RUNTIME when ``value`` breaks this port's contract for the call's ``batch``.

        A graph on the meta device accepts values on any device (``META_DEVICE``).

        ``loose`` holds the extra dtypes autocast allows a floating port (``autocast_dtypes``).
        """
        if isinstance(value, torch.Tensor):
            shape = value.shape
            entries = self.entries
            if len(shape) == len(entries):
                for (kind, extent, _), actual in zip(entries, shape):
                    if actual != (extent * batch if kind else extent):
                        break
                else:
                    if self.accepts_dtype(value.dtype, loose) and (
                            value.device == device or device.type == META_DEVICE):
                        return
        raise self.error(value, batch, device, source, loose, **where)

    def error(self, value: Any, batch: int, device: torch.device, source: str, loose: tuple = (),
              **where: Any) -> HNDLError:
        message = self.problem(value, batch, device, loose) or f"{self.label}: breaks its contract"
        if isinstance(value, torch.Tensor):
            message += f"\n  expected {self.contract_full(batch, device)}\n  got      {describe(value)}"
            if self._batch_axis_differs(value, batch) and source != self.label:
                message += f"\n  {self.symbol}={batch} is this call's batch size, read from {source}"
        return HNDLError("E_RUNTIME", message, remedies=(CONTRACT_REMEDY,), **where)

    def _batch_axis_differs(self, value: torch.Tensor, batch: int) -> bool:
        return any(
            kind and index < value.dim() and value.shape[index] != extent * batch
            for index, (kind, extent, _) in enumerate(self.entries)
        )


def node_place(alias: str, line: Optional[int], column: Optional[int]) -> str:
    """``linear, line 3, column 1`` with only the parts the source recorded.

    Native capture may know a call site's line but not its column; a node without a recorded
    line is named by its operator alone. Nothing unknown is printed as ``None``.
    """
    text = alias
    if line:
        text += f", line {line}"
        if column is not None:
            text += f", column {column}"
    return text


@functools.lru_cache(maxsize=4096)
def port_entries(shape: tuple, batch: str) -> tuple[tuple[bool, int, str], ...]:
    """A shape's compiled entries (``_entry`` each); ports of one shape share them, as shapes repeat."""
    return tuple(_entry(value, batch) for value in shape)


def _entry(value: Any, batch: str) -> tuple[bool, int, str]:
    """(is a batch entry, multiple or extent, original text)."""
    if isinstance(value, int):
        return (False, value, str(value))
    return (True, batch_multiple(value, batch), str(value))


#: The trait prefix under which ``build.node_traits`` records the declared input ports of an
#: operator with optional input ports (``ports:x,bias,rope``): the runtime calls its module with
#: every declared port in order, None for each one the node leaves unbound.
PORTS_TRAIT = "ports:"


def call_slots(traits: frozenset, bound: tuple[str, ...]) -> Optional[tuple[Optional[int], ...]]:
    """Per declared input port, its index among the node's ``bound`` ports or None where the node
    leaves it unbound; None when the node binds exactly the declared ports (the module takes
    ``bound`` as they are)."""
    declared = next((trait[len(PORTS_TRAIT):].split(",") for trait in traits
                     if isinstance(trait, str) and trait.startswith(PORTS_TRAIT)), None)
    if declared is None or tuple(declared) == bound:
        return None
    position = {port: index for index, port in enumerate(bound)}
    return tuple(position.get(port) for port in declared)


def sequence_outputs(result: Any, count: int) -> Optional[tuple]:
    """``count`` output values from a tuple or list of that length, or from an fx proxy of a leaf
    module's several outputs (unpacked in the graph); None for anything else."""
    if isinstance(result, (tuple, list)) and len(result) == count:
        return tuple(result)
    if isinstance(result, Proxy):
        return tuple(result[index] for index in range(count))
    return None


def exactly_the_inputs(inputs: Mapping[str, Any], names: Sequence[str], what: str = "inputs") -> None:
    """E_BINDING unless ``inputs`` names exactly the declared ``names``, listing what is missing
    or undeclared."""
    missing = [name for name in names if name not in inputs]
    unknown = [name for name in inputs if name not in names]
    if missing or unknown:
        raise HNDLError(
            "E_BINDING",
            f"{what} must be exactly " + ", ".join(names)
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; undeclared {', '.join(unknown)}" if unknown else ""),
            remedies=("Pass one tensor per declared input.",),
        )


def runtime_check_of(traits: frozenset) -> Optional[Callable]:
    """The declaration's ``runtime_check`` among a node's traits (``build.node_traits``), or None."""
    return next((trait for trait in traits if callable(trait)), None)


def run_runtime_check(check: Callable, module: nn.Module, args: Sequence[Any], ports: Sequence[str],
                      **location: Any) -> None:
    """Call a declaration's ``runtime_check(module, shapes)`` with the concrete shapes of the bound
    input ports; an HNDLError it raises is raised again at the node's ``location`` (node, line, column)."""
    shapes = {port: tuple(value.shape) for port, value in zip(ports, args) if isinstance(value, torch.Tensor)}
    try:
        check(module, shapes)
    except HNDLError as error:
        raise HNDLError(error.code, error.message, chain=error.chain, remedies=error.remedies,
                        **location) from None


class Step:
    """One node of the compiled program."""

    __slots__ = ("module", "node", "reads", "writes", "ports_in", "ports_out", "where", "location", "release", "opaque",
                 "slots", "runtime_check")

    def __init__(self, module: nn.Module, node, batch: str, dtypes: tuple[Mapping[str, str], Mapping[str, str]],
                 traits: frozenset = frozenset(), casts: Mapping[torch.dtype, torch.dtype] = {}) -> None:
        self.module = module
        self.node = node
        node_id, alias, inputs, outputs = node.id, node.alias, node.inputs, node.outputs
        self.reads = tuple(inputs.values())
        self.writes = tuple([f"node:{node_id}/{port}" for port in outputs])
        expected, produced = dtypes
        shapes = node.input_shapes
        self.ports_in = tuple([
            Port(f"{alias} {node_id!r} input {port!r} (from {ref})", port, shapes[port], expected[port], batch, casts)
            for port, ref in inputs.items()
        ])
        shapes = node.output_shapes
        self.ports_out = tuple([
            Port(f"{alias} {node_id!r} output {port!r}", port, shapes[port], produced[port], batch, casts)
            for port in outputs
        ])
        source = node.source
        line = source.get("line")
        column = source.get("column") if line else None
        self.where = node_place(alias, line, column)
        self.location = {"node": node_id, "line": line, "column": column}
        self.release: tuple = ()
        self.opaque = "opaque" in traits
        #: None when the module takes exactly ``reads``; otherwise, per declared input position, the
        #: index into ``reads`` or None for an unbound optional port (the module receives None there).
        self.slots = call_slots(traits, tuple(inputs))
        #: The declaration's ``runtime_check`` (see ``check_runtime``), or None.
        self.runtime_check = runtime_check_of(traits)

    def check_runtime(self, args: Sequence[Any]) -> None:
        """Run the declaration's ``runtime_check`` on this call's inputs (one per read), before the
        node runs; the checked program calls it once per input signature (E_RUNTIME and the like,
        naming the node)."""
        run_runtime_check(self.runtime_check, self.module, args, tuple(self.node.inputs), **self.location)

    def arranged(self, args: Sequence[Any]) -> Sequence[Any]:
        """The module's positional arguments: ``args`` (one per read) with None at each unbound
        optional port's declared position."""
        slots = self.slots
        if slots is None:
            return args
        return [None if index is None else args[index] for index in slots]

    def check_outputs(self, batch: int, device: torch.device, source: str, *values: Any) -> None:
        """An opaque node's asserted output contract, checked on every call (E_RUNTIME)."""
        loose = autocast_dtypes(device)
        for port, value in zip(self.ports_out, values):
            port.check(value, batch, device, loose, source, **self.location)

    def outputs(self, result: Any) -> tuple:
        """Map the module's return value onto the declared output ports, in order."""
        if len(self.writes) == 1 and isinstance(result, (torch.Tensor, Proxy)):
            return (result,)
        names = self.node.outputs
        if isinstance(result, Mapping):
            if set(result) != set(names):
                raise HNDLError(
                    "E_RUNTIME",
                    f"node {self.node.id!r} returned keys {sorted(result)}, expected exactly {list(names)}",
                    **self.location,
                )
            return tuple(result[name] for name in names)
        values = sequence_outputs(result, len(names))
        if values is None:
            raise HNDLError(
                "E_RUNTIME",
                f"node {self.node.id!r} returned {type(result).__name__}, expected {len(names)} tensor(s) for "
                f"{list(names)}",
                **self.location,
            )
        return values
