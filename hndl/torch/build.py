"""Construction (§11): plan in, fully materialised GraphModule out.

Order of work: look up every operator by exact identity, bound registered storage with an
allocation-free meta-device pass, construct each node under the target device in the chosen
RNG scope, cast to the compute dtype, verify every init/trainability target before touching
any, apply them, and record a build receipt.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator, Mapping, Optional

import torch
from torch import nn

from ..declaration import OperatorSpec
from ..errors import HNDLError
from ..limits import validate_limits
from ..plan import PlanNode, ResolvedPlan
from ..registry import Registry, using_registry
from .graph_module import GraphModule
from .initialize import apply_initialization, apply_trainability, check_targets
from .ports import TORCH_DTYPES


def build(
    plan: ResolvedPlan,
    *,
    device: Any,
    initialization_seed: Optional[int] = None,
    registry: Optional[Registry] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> GraphModule:
    """Construct ``plan`` on ``device``; ``forward(**inputs)`` returns a dict of outputs."""
    return construct(plan, GraphModule, device=device, initialization_seed=initialization_seed, registry=registry, limits=limits)


def parameter_counts(
    plan: ResolvedPlan, *, registry: Optional[Registry] = None, limits: Optional[Mapping[str, int]] = None
) -> dict[str, Optional[int]]:
    """Parameters per node from a meta-device construction; None where a node cannot be probed."""
    validate_limits(limits)
    counts: dict[str, Optional[int]] = {}
    with active_specs(plan, registry) as specs:
        for node in plan.nodes:
            module = _meta_module(specs[node.id], node, TORCH_DTYPES[plan.dtype])
            counts[node.id] = None if module is None else sum(p.numel() for p in module.parameters())
    return counts


def construct(
    plan: ResolvedPlan,
    module_class: type,
    *,
    device: Any,
    initialization_seed: Optional[int],
    registry: Optional[Registry],
    limits: Optional[Mapping[str, int]],
) -> GraphModule:
    """Build ``plan`` into an instance of ``module_class`` (GraphModule or a facade of it)."""
    if not isinstance(plan, ResolvedPlan):
        raise HNDLError("E_SCHEMA", f"build() needs a ResolvedPlan, not {type(plan).__name__}", field="plan")
    checked = validate_limits(limits)
    target = _device(device)
    if initialization_seed is not None and (type(initialization_seed) is not int or initialization_seed < 0):
        raise HNDLError("E_SCHEMA", f"initialization_seed must be a non-negative int or None, got {initialization_seed!r}", field="initialization_seed")
    with active_specs(plan, registry) as specs:
        return _construct(plan, module_class, specs, TORCH_DTYPES[plan.dtype], target, initialization_seed, checked)


def _construct(plan, module_class, specs, dtype, target, initialization_seed, checked) -> GraphModule:
    estimated = _meta_pass(plan, specs, dtype, checked["max_state_bytes"])
    with _rng_scope(initialization_seed, target):
        modules = {}
        for node in plan.nodes:
            with torch.device(target):
                module = _instantiate(specs[node.id], node)
            modules[node.id] = module.to(dtype=dtype) if _has_floating_state(module) else module
        for node in plan.nodes:
            check_targets(
                modules[node.id], node=node.id, initialization=node.initialization,
                trainability=node.trainability, dtype=dtype,
            )
        for node in plan.nodes:
            apply_initialization(modules[node.id], node.initialization)
            apply_trainability(modules[node.id], node.trainability)
    _check_ownership(modules)
    state_bytes = sum(_state_bytes(module) for module in modules.values())
    if state_bytes > checked["max_state_bytes"]:
        raise HNDLError(
            "E_RESOURCE",
            f"registered state is {state_bytes} bytes, above max_state_bytes={checked['max_state_bytes']}",
        )
    receipt = BuildReceipt({
        "torch_version": torch.__version__,
        "device": str(target),
        "dtype": plan.dtype,
        "initialization_seed": initialization_seed,
        "seed_mode": "caller" if initialization_seed is None else "isolated",
        "state_bytes": state_bytes,
        "estimated_state_bytes": estimated,
    })
    port_dtypes = _port_dtypes(plan, specs)
    return module_class(plan, modules, port_dtypes, receipt, target)


class BuildReceipt(Mapping):
    """What a build used (§11): a read-only mapping stored as ``module.build_receipt``.

    Keys: torch_version, device, dtype, initialization_seed, seed_mode ("caller" or "isolated"),
    state_bytes (registered parameters and buffers as built) and estimated_state_bytes (the
    meta-device pass). It copies and pickles like plain data.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = dict(fields)

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"BuildReceipt({self._fields!r})"


# -- helpers ---------------------------------------------------------------------------------------
@contextmanager
def active_specs(plan: ResolvedPlan, registry: Optional[Registry]) -> Iterator[dict[str, OperatorSpec]]:
    """Each node's declaration from ``registry`` (default: the builtins), with that registry active
    (``hndl.registry.using_registry``) while the caller constructs or runs the nodes."""
    registry = Registry.builtins() if registry is None else registry
    specs = {node.id: registry.by_identity(node.op) for node in plan.nodes}
    with using_registry(registry):
        yield specs


def _device(device: Any) -> torch.device:
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise HNDLError("E_SCHEMA", f"device {device!r} is not a device name", field="device",
                            remedies=('Use device="cpu" or device="cuda" / "cuda:<index>".',)) from None
    if not isinstance(device, torch.device) or device.type not in ("cpu", "cuda"):
        raise HNDLError(
            "E_SCHEMA",
            f"device must be cpu or cuda[:index], got {device!r}",
            field="device",
            remedies=('Use device="cpu" or device="cuda" / "cuda:<index>".',),
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise HNDLError("E_RUNTIME", "CUDA was requested but is not available", field="device",
                            remedies=('Build with device="cpu" on a machine without a GPU.',))
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise HNDLError("E_RUNTIME", f"cuda:{index} does not exist ({torch.cuda.device_count()} device(s))", field="device")
        device = torch.device("cuda", index)
    elif device.index not in (None, 0):
        raise HNDLError("E_SCHEMA", f"cpu takes no device index, got {device}", field="device")
    else:
        device = torch.device("cpu")
    return device


def _rng_scope(seed: Optional[int], device: torch.device):
    if seed is None:
        return nullcontext()
    return _SeededScope(seed, device)


class _SeededScope:
    """An isolated RNG scope: seed on entry, restore the caller's RNG state on exit."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self._cuda = device.index if device.type == "cuda" else None
        self._fork = torch.random.fork_rng(devices=[] if self._cuda is None else [self._cuda])
        self._seed = seed

    def __enter__(self):
        self._fork.__enter__()
        # Seed only the generators fork_rng restores: torch.manual_seed would also queue a
        # seed for every CUDA device and leak past the scope.
        torch.default_generator.manual_seed(self._seed)
        if self._cuda is not None:
            with torch.cuda.device(self._cuda):
                torch.cuda.manual_seed(self._seed)
        return self

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)


_SIGNATURES: dict[type, inspect.Signature] = {}


def constructor_kwargs(spec: OperatorSpec, node: PlanNode) -> dict[str, Any]:
    """Every declared argument, plus the shape symbols and port shapes the constructor asks for."""
    signature = _SIGNATURES.get(spec.cls)
    if signature is None:
        signature = _SIGNATURES[spec.cls] = inspect.signature(spec.cls.__init__)
    kwargs = dict(node.args)
    wanted = set(signature.parameters)
    if "input_shapes" in wanted:
        kwargs["input_shapes"] = dict(node.input_shapes)
    if "output_shapes" in wanted:
        kwargs["output_shapes"] = dict(node.output_shapes)
    symbols = [name for name in spec.shape.symbols if name in wanted]
    if symbols:
        values = symbol_values(spec, node)
        kwargs.update({name: values[name] for name in symbols if name in values})
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


def _instantiate(spec: OperatorSpec, node: PlanNode) -> nn.Module:
    module = spec.cls(**constructor_kwargs(spec, node))
    if not isinstance(module, nn.Module):
        raise HNDLError("E_REGISTRY", f"{spec.qualified} constructed {type(module).__name__}, not an nn.Module", node=node.id)
    return module


def _meta_module(spec: OperatorSpec, node: PlanNode, dtype: torch.dtype) -> Optional[nn.Module]:
    try:
        with torch.device("meta"):
            module = _instantiate(spec, node)
    except HNDLError:
        raise
    except Exception:
        return None
    return module.to(dtype=dtype) if _has_floating_state(module) else module


def _meta_pass(plan: ResolvedPlan, specs: dict[str, OperatorSpec], dtype: torch.dtype, budget: int) -> int:
    """Sum each node's storage on the meta device and stop before allocating past ``budget``."""
    total = 0
    for node in plan.nodes:
        module = _meta_module(specs[node.id], node, dtype)
        if module is None:
            continue  # measured after real construction
        total += _state_bytes(module)
        if total > budget:
            raise HNDLError(
                "E_RESOURCE",
                f"registered state would reach {total} bytes at node {node.id!r}, above max_state_bytes={budget}",
                node=node.id,
                remedies=("Shrink the network or raise limits['max_state_bytes'].",),
            )
    return total


def _has_floating_state(module: nn.Module) -> bool:
    return any(t.is_floating_point() for t in (*module.parameters(), *module.buffers()))


def _state_bytes(module: nn.Module) -> int:
    seen = set()
    total = 0
    for tensor in (*module.parameters(), *module.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def _check_ownership(modules: Mapping[str, nn.Module]) -> None:
    """Each node owns its module and its storage; sharing across nodes is E_REGISTRY."""
    owner_of_module: dict[int, str] = {}
    owner_of_storage: dict[tuple, str] = {}
    for node_id, module in modules.items():
        for sub in module.modules():
            other = owner_of_module.setdefault(id(sub), node_id)
            if other != node_id:
                raise HNDLError("E_REGISTRY", f"nodes {other!r} and {node_id!r} share one module instance", node=node_id)
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.device.type == "meta" or tensor.numel() == 0:
                continue
            key = (tensor.device, tensor.untyped_storage().data_ptr())
            other = owner_of_storage.setdefault(key, node_id)
            if other != node_id:
                raise HNDLError("E_REGISTRY", f"nodes {other!r} and {node_id!r} share parameter or buffer storage", node=node_id)


def _port_dtypes(plan: ResolvedPlan, specs: dict[str, OperatorSpec]) -> dict[str, tuple]:
    """Expected input and produced output dtypes per node, by the declarations' one rule."""
    carried = {f"input:{port['name']}": port["dtype"] for port in plan.inputs}
    result = {}
    for node in plan.nodes:
        incoming = [carried[ref] for ref in node.inputs.values()]
        expected, produced = specs[node.id].port_dtypes(node.inputs, node.outputs, compute=plan.dtype, carried=incoming)
        for port, dtype in produced.items():
            carried[f"node:{node.id}/{port}"] = dtype
        result[node.id] = (expected, produced)
    return result
