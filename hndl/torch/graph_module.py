"""GraphModule: an ordinary torch module whose forward is a straight-line program over nodes.

Modules register once under ``nodes.n_<id>``. Forward checks the declared external inputs and
every port's shape, dtype and device around each node, then returns a dictionary keyed by the
public output names. The §7 facade ``Network`` (hndl.torch.network) builds on it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from ..contracts import batch_multiple
from ..errors import HNDLError
from ..plan import ResolvedPlan, format_shape, shape_table

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
DTYPE_NAMES = {value: key for key, value in TORCH_DTYPES.items()}


class _Port:
    """A compiled port contract: batch multiples and fixed extents, dtype, label."""

    __slots__ = ("label", "entries", "dtype", "text")

    def __init__(self, label: str, shape: tuple, dtype: Optional[str], batch: str) -> None:
        self.label = label
        self.text = format_shape(shape)
        self.dtype = TORCH_DTYPES.get(dtype) if dtype not in (None, "any") else None
        self.entries = tuple(_entry(value, batch) for value in shape)

    def check(self, tensor: Any, batch: int, device: torch.device) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise HNDLError("E_RUNTIME", f"{self.label}: expected a tensor, got {type(tensor).__name__}")
        shape = tensor.shape
        expected = [value * batch if kind == "batch" else value for kind, value in self.entries]
        if len(shape) != len(expected) or any(a != b for a, b in zip(shape, expected)):
            raise HNDLError(
                "E_RUNTIME",
                f"{self.label}: expected shape {self.text} (batch {batch}) = {expected}, got {list(shape)}",
                remedies=("Call the module with tensors matching the plan's contracts.",),
            )
        if self.dtype is not None and tensor.dtype != self.dtype:
            raise HNDLError(
                "E_RUNTIME",
                f"{self.label}: expected dtype {DTYPE_NAMES[self.dtype]}, got {DTYPE_NAMES.get(tensor.dtype, tensor.dtype)}",
            )
        if tensor.device != device:
            raise HNDLError("E_RUNTIME", f"{self.label}: expected device {device}, got {tensor.device}")


def _entry(value: Any, batch: str) -> tuple[str, int]:
    if isinstance(value, int):
        return ("fixed", value)
    return ("batch", batch_multiple(value, batch))


class _Step:
    """One node of the compiled program."""

    __slots__ = ("module", "node", "reads", "writes", "ports_in", "ports_out", "where")

    def __init__(self, module: nn.Module, node, batch: str, dtypes: tuple[Mapping[str, str], Mapping[str, str]]) -> None:
        self.module = module
        self.node = node
        self.reads = tuple(node.inputs.values())
        self.writes = tuple(f"node:{node.id}/{port}" for port in node.outputs)
        expected, produced = dtypes
        self.ports_in = tuple(
            _Port(f"{node.alias} {node.id!r} input {port!r} (from {ref})", node.input_shapes[port], expected[port], batch)
            for port, ref in node.inputs.items()
        )
        self.ports_out = tuple(
            _Port(f"{node.alias} {node.id!r} output {port!r}", node.output_shapes[port], produced[port], batch)
            for port in node.outputs
        )
        line = node.source.get("line")
        self.where = f"{node.alias}" + (f", line {line}, column {node.source.get('column')}" if line else "")

    def outputs(self, result: Any) -> tuple:
        """Map the module's return value onto the declared output ports, in order."""
        if len(self.writes) == 1 and isinstance(result, torch.Tensor):
            return (result,)
        names = self.node.outputs
        if isinstance(result, Mapping):
            if set(result) != set(names):
                raise HNDLError(
                    "E_RUNTIME",
                    f"node {self.node.id!r} returned keys {sorted(result)}, expected exactly {list(names)}",
                    node=self.node.id,
                )
            return tuple(result[name] for name in names)
        if isinstance(result, (tuple, list)) and len(result) == len(names):
            return tuple(result)
        raise HNDLError(
            "E_RUNTIME",
            f"node {self.node.id!r} returned {type(result).__name__}, expected {len(names)} tensor(s) for {list(names)}",
            node=self.node.id,
        )


class GraphModule(nn.Module):
    """A built plan: ``forward(**inputs)`` returns ``{output name: tensor}``."""

    def __init__(
        self,
        plan: ResolvedPlan,
        modules: Mapping[str, nn.Module],
        port_dtypes: Mapping[str, tuple],
        receipt: Mapping[str, Any],
        device: torch.device,
    ) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict({f"n_{node_id}": module for node_id, module in modules.items()})
        self.plan = plan
        self.build_receipt = receipt
        self._device = device
        self._inputs = tuple(
            (port["name"], _Port(f"input {port['name']!r}", port["shape"], port["dtype"], plan.batch))
            for port in plan.inputs
        )
        self._steps = tuple(_Step(modules[node.id], node, plan.batch, port_dtypes[node.id]) for node in plan.nodes)
        self._outputs = tuple((port["name"], port["ref"]) for port in plan.outputs)

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        values = self._bind(inputs)
        batch = values[f"input:{self._inputs[0][0]}"].shape[0]
        device = self._device
        for step in self._steps:
            args = [values[ref] for ref in step.reads]
            for port, tensor in zip(step.ports_in, args):
                port.check(tensor, batch, device)
            try:
                results = step.outputs(step.module(*args))
            except BaseException as error:
                error.add_note(f"HNDL: raised inside node {step.node.id!r} ({step.where})")
                raise
            for port, tensor in zip(step.ports_out, results):
                port.check(tensor, batch, device)
            for key, tensor in zip(step.writes, results):
                values[key] = tensor
        return {name: values[ref] for name, ref in self._outputs}

    def _bind(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        names = [name for name, _ in self._inputs]
        unknown = [name for name in inputs if name not in names]
        missing = [name for name in names if name not in inputs]
        if unknown or missing:
            raise HNDLError(
                "E_BINDING",
                "runtime inputs must be exactly " + ", ".join(names)
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; undeclared {', '.join(unknown)}" if unknown else ""),
                remedies=("Pass one tensor per declared input.",),
            )
        first = inputs[names[0]]
        if not isinstance(first, torch.Tensor) or first.dim() == 0:
            raise HNDLError("E_RUNTIME", f"input {names[0]!r}: expected a tensor with a batch axis, got {type(first).__name__}")
        batch = first.shape[0]
        values = {}
        for name, port in self._inputs:
            port.check(inputs[name], batch, self._device)
            values[f"input:{name}"] = inputs[name]
        return values

    def _apply(self, fn, recurse: bool = True):
        result = super()._apply(fn, recurse)
        self._device = fn(torch.empty(0, device=self._device)).device
        return result

    def __repr__(self) -> str:
        return shape_table(self.plan)
