"""Construction (§11): plan in, fully materialised GraphModule out.

Order of work: look up every operator by exact identity, bound registered storage with an
allocation-free meta-device pass, construct each node under the target device in the chosen
RNG scope, cast to the compute dtype, verify every init/trainability target before touching
any, apply them, and record a build receipt.

Two budgets bound what a plan can make construction do. ``limits['max_node_modules']`` stops a
node's constructor at the first module past the bound, on the meta device and for real.
``limits['max_state_bytes']`` is checked by the meta pass before anything is allocated; its default
follows the target device's memory (``state_budget``). An allocation that fails anyway is
E_RESOURCE naming the node, and whatever the build had made is released.
"""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator, Mapping, Optional

import torch
from torch import nn

from ..declaration import OperatorSpec
from ..errors import HNDLError
from ..limits import limits_in_force, validate_limits
from ..plan import PlanNode, ResolvedPlan
from ..registry import Registry, using_registry
from .graph_module import GraphModule
from .initialize import apply_initialization, apply_trainability, check_targets
from .plain_layers import as_torch_layer
from .ports import TORCH_DTYPES
from .registrations import watching_registrations


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
    """Parameters per node from a meta-device construction; None where a node cannot be probed.

    A node registering more than ``limits['max_node_modules']`` modules is E_RESOURCE, as in build.
    """
    checked = validate_limits(limits)
    counts: dict[str, Optional[int]] = {}
    with limits_in_force(checked), active_specs(plan, registry) as specs:
        for node in plan.nodes:
            module = meta_module(specs[node.id], node, TORCH_DTYPES[plan.dtype], checked["max_node_modules"])
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
    target = check_device(device)
    check_seed(initialization_seed)
    budget = state_budget(checked, target, explicit=isinstance(limits, Mapping) and "max_state_bytes" in limits)
    with limits_in_force(checked), active_specs(plan, registry) as specs:
        return _construct(plan, module_class, specs, TORCH_DTYPES[plan.dtype], target, initialization_seed,
                          checked, budget)


#: Seeds an isolated construction scope accepts: every value torch's generators take as itself.
#: (torch also takes -2**63 <= seed < 0, as an alias of seed + 2**64; HNDL keeps one spelling.)
SEED_RANGE = range(0, 2**64)


def seed_problem(seed: Any) -> Optional[str]:
    """What is wrong with ``seed`` as a seed (an int with ``0 <= seed < 2**64``), or None."""
    if type(seed) is int and seed in SEED_RANGE:
        return None
    if type(seed) is not int:
        return f"got {type(seed).__name__} {seed!r}"
    return f"got {seed}" if seed.bit_length() <= 128 else f"got an int of {seed.bit_length()} bits"


def check_seed(seed: Any) -> None:
    """``initialization_seed`` must be None or an int with ``0 <= seed < 2**64`` (E_ARGUMENT)."""
    problem = None if seed is None else seed_problem(seed)
    if problem is not None:
        raise HNDLError(
            "E_ARGUMENT",
            f"initialization_seed must be None or an int with 0 <= seed < 2**64 (the seeds torch's "
            f"generators accept), {problem}",
            field="initialization_seed",
            remedies=("Pass None to draw from the caller's RNG, or an int seed from 0 to 2**64 - 1.",),
        )


def state_budget(checked: Mapping[str, int], device: torch.device, *, explicit: bool) -> tuple[int, str]:
    """The registered-state bound a build on ``device`` enforces, and how to name it in messages.

    An explicit ``limits['max_state_bytes']`` is used as given. The default (64 GiB) is lowered to the
    memory of the target device when that is smaller: physical memory for cpu, total memory for a
    CUDA device. Limits never enter a plan, so this changes no plan bytes or digests, only how early
    a build that cannot fit is refused.
    """
    limit = checked["max_state_bytes"]
    named = f"limits['max_state_bytes']={limit}"
    if explicit:
        return limit, named
    memory, what = device_memory(device)
    if memory is not None and memory < limit:
        return memory, (f"the {memory} bytes of {what} (the default limits['max_state_bytes'] is the smaller of "
                        f"{limit} and the target device's memory)")
    return limit, named


def device_memory(device: torch.device) -> tuple[Optional[int], str]:
    """Total memory of ``device`` in bytes and its description; None where the platform cannot say."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, f"{device}'s memory"
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory"
    except (AttributeError, ValueError, OSError):
        return None, "physical memory"


def _construct(plan, module_class, specs, dtype, target, initialization_seed, checked, budget) -> GraphModule:
    limit, named = budget
    estimated, per_node = _meta_pass(plan, specs, dtype, checked["max_node_modules"], limit, named)
    modules: dict[str, nn.Module] = {}
    try:
        with _rng_scope(initialization_seed, target):
            for node in plan.nodes:
                modules[node.id] = _materialize(specs[node.id], node, target, dtype, checked["max_node_modules"],
                                                per_node.get(node.id), named)
            for node in plan.nodes:
                check_targets(
                    modules[node.id], node=node.id, initialization=node.initialization,
                    trainability=node.trainability, dtype=dtype,
                )
            for node in plan.nodes:
                apply_initialization(modules[node.id], node.initialization)
                apply_trainability(modules[node.id], node.trainability)
        _check_ownership(modules)
        built = sum(registered_bytes(module) for module in modules.values())
        if built > limit:
            raise HNDLError(
                "E_RESOURCE",
                f"registered state is {built} bytes, above {named}",
                remedies=("Shrink the network or raise limits['max_state_bytes'].",),
            )
    except BaseException:
        modules.clear()  # nothing half-built outlives a failed build
        if target.type == "cuda":
            torch.cuda.empty_cache()
        raise
    receipt = BuildReceipt({
        "torch_version": torch.__version__,
        "device": str(target),
        "dtype": plan.dtype,
        "initialization_seed": initialization_seed,
        "seed_mode": "caller" if initialization_seed is None else "isolated",
        "state_bytes": built,
        "estimated_state_bytes": estimated,
    })
    for module in modules.values():
        as_torch_layer(module)
    traits = {node.id: node_traits(specs[node.id]) for node in plan.nodes}
    return module_class(plan, modules, port_dtypes(plan, specs), receipt, target, traits)


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


def check_device(device: Any) -> torch.device:
    """``device`` as a torch.device: cpu, or an existing CUDA device with its index (E_SCHEMA, E_RUNTIME)."""
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


def meta_module(spec: OperatorSpec, node: PlanNode, dtype: torch.dtype, module_bound: int) -> Optional[nn.Module]:
    """``node``'s module built on the meta device in ``dtype``, or None where that is not possible.

    Only a construction that fails for being on the meta device gives None (the node is then
    measured after real construction). HNDL errors, such as more than ``module_bound`` modules,
    and running out of memory propagate: falling back to real construction would repeat them.
    """
    try:
        with torch.device("meta"), bounded_modules(node, module_bound):
            module = _instantiate(spec, node)
    except HNDLError:
        raise
    except Exception as error:
        if _is_allocation_failure(error):
            reason = _first_line(error)
        else:
            return None
    else:
        return module.to(dtype=dtype) if _has_floating_state(module) else module
    raise HNDLError(
        "E_RESOURCE",
        f"node {node.id!r} ({node.op}) ran out of memory while being measured on the meta device: {reason}",
        node=node.id,
        remedies=("Shrink the node's arguments; its constructor needs more host memory than is available.",),
    )


def _meta_pass(plan: ResolvedPlan, specs: dict[str, OperatorSpec], dtype: torch.dtype, module_bound: int,
               budget: int, named: str) -> tuple[int, dict[str, int]]:
    """Sum each node's storage on the meta device and stop before allocating past ``budget``.

    Returns the total and each probed node's bytes (what its real construction will need).
    """
    total = 0
    per_node: dict[str, int] = {}
    for node in plan.nodes:
        module = meta_module(specs[node.id], node, dtype, module_bound)
        if module is None:
            continue  # measured after real construction
        per_node[node.id] = registered_bytes(module)
        total += per_node[node.id]
        if total > budget:
            raise HNDLError(
                "E_RESOURCE",
                f"registered state would reach {total} bytes at node {node.id!r} ({node.op} needs "
                f"{per_node[node.id]}), above {named}",
                node=node.id,
                remedies=("Shrink the network or raise limits['max_state_bytes'].",),
            )
    return total, per_node


def _materialize(spec: OperatorSpec, node: PlanNode, target: torch.device, dtype: torch.dtype, module_bound: int,
                 needed: Optional[int], named: str) -> nn.Module:
    """Construct ``node`` on ``target`` in ``dtype``; a failed allocation is E_RESOURCE naming the node."""
    module = None
    try:
        with torch.device(target), bounded_modules(node, module_bound):
            module = _instantiate(spec, node)
        return module.to(dtype=dtype) if _has_floating_state(module) else module
    except Exception as error:
        if not _is_allocation_failure(error):
            raise
        reason = _first_line(error)
    module = None  # raised outside the handler: no traceback keeps the partial module alive
    size = f"{needed} bytes of registered state" if needed is not None else \
        "registered state of a size the meta device could not measure"
    raise HNDLError(
        "E_RESOURCE",
        f"node {node.id!r} ({node.op}) needs {size}, but allocating it on {target} failed ({reason}); "
        f"the build checked it against {named}",
        node=node.id,
        chain=("the state bound is checked before allocation, but the device had less free memory than the bound",),
        remedies=(
            f"Set limits['max_state_bytes'] to what {target} can hold, so such a plan is refused before allocating.",
            "Shrink the network, free device memory, or build on a device with more memory.",
        ),
    )


def _is_allocation_failure(error: BaseException) -> bool:
    """Whether ``error`` is an allocator refusing memory (CPU, CUDA or Python's own)."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


@contextmanager
def bounded_modules(node: PlanNode, bound: int) -> Iterator[None]:
    """Stop ``node``'s construction on this thread once it registers more than ``bound`` modules.

    The count starts at one (the node's own module) and adds every submodule registered while the
    block runs, through torch's global module-registration hook (removed on exit). Exceeding the
    bound is E_RESOURCE raised from inside the constructor, so no further module is built.
    """
    count = 1

    def counted(_name: str, _submodule: nn.Module) -> None:
        nonlocal count
        count += 1
        if count > bound:
            raise HNDLError(
                "E_RESOURCE",
                f"node {node.id!r} ({node.op}) creates more than {bound} torch modules, above "
                f"limits['max_node_modules']={bound}",
                node=node.id,
                remedies=("Shrink the arguments that make the node repeat submodules, or raise "
                          "limits['max_node_modules'].",),
            )

    with watching_registrations(on_module=counted):
        yield


def _has_floating_state(module: nn.Module) -> bool:
    return any(t.is_floating_point() for t in (*module.parameters(), *module.buffers()))


def registered_bytes(module: nn.Module) -> int:
    """Bytes of the distinct parameters and buffers ``module`` registers."""
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


def node_traits(spec: OperatorSpec) -> frozenset[str]:
    """What the runtime needs of a node's declaration, read once at build (never off the module's class).

    ``opaque``: its output contract is asserted, so checked on every call; ``unary``: one
    non-variadic input port and one output port, so ``nn.Sequential`` can chain it.
    """
    shape = spec.shape
    traits = set()
    if spec.opaque:
        traits.add("opaque")
    if not (shape.variadic_input or shape.variadic_output) and len(shape.inputs) == 1 and len(shape.outputs) == 1:
        traits.add("unary")
    return frozenset(traits)


def port_dtypes(plan: ResolvedPlan, specs: dict[str, OperatorSpec]) -> dict[str, tuple]:
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
