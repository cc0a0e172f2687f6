"""Construction (§11): plan in, fully materialised GraphModule out.

Order of work: look up every operator by exact identity, bound registered storage with an
allocation-free meta-device pass (one meta construction per distinct declaration and arguments,
``instantiate.MetaProbe``), construct each node on the target device in the chosen RNG scope
(under a device context only when the target is not already where torch allocates), cast to
the compute dtype where that changes anything, verify every init/trainability target before
touching any, apply them, and record a build receipt. None of the shortcuts draws or skips a
random number: a seed gives the same parameters as constructing every node in full.

Two budgets bound what a plan can make construction do. ``limits['max_node_modules']`` stops a
node's constructor at the first module past the bound, on the meta device and for real.
``limits['max_state_bytes']`` is checked by the meta pass before anything is allocated; its default
follows the target device's memory (``state_budget``), and state whose size overflows torch's int64
arithmetic is E_RESOURCE there too. An allocation that fails anyway is E_RESOURCE naming the node,
and whatever the build had made is released.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import torch
from torch import nn

from ..declaration import OperatorSpec
from ..errors import HNDLError
from ..limits import limits_in_force, validate_limits
from ..plan import PlanNode, ResolvedPlan
from ..registry import Registry, using_registry
from .graph_module import GraphModule
from .initialize import apply_initialization, apply_trainability, check_targets, write_whole
from .instantiate import (
    MetaProbe,
    ModuleCounter,
    cast_changes,
    constructor_kwargs,
    first_line,
    instantiate,
    is_allocation_failure,
    is_size_overflow,
    registered_bytes,
    size_overflow,
    state_tensors,
)
from .plain_layers import as_torch_layer
from .ports import PORTS_TRAIT, TORCH_DTYPES


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


class _BuildSeed:
    """The default of ``initialize``'s ``initialization_seed``: the seed the build recorded."""

    def __repr__(self) -> str:
        return "<the seed in model.build_receipt>"


#: ``initialize(model)`` re-runs the initialization with the seed (or the caller-RNG mode) the build used.
BUILD_SEED: Any = _BuildSeed()


def initialize(
    model: nn.Module,
    *,
    initialization_seed: Any = BUILD_SEED,
    registry: Optional[Registry] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> nn.Module:
    """Give every parameter and buffer of a built network the values its plan's build gives them.

    This is the second half of deferred initialization (SPEC.md "Meta device and deferred
    initialization"): build on the meta device (``network(..., device="meta")``,
    ``build(plan, device="meta")``), which allocates nothing, optionally shard it
    (``torch.distributed.fsdp.fully_shard``), allocate it with ``model.to_empty(device=...)``,
    then call ``initialize(model)``. Every node is constructed again on the model's device, one
    node at a time, in the build's RNG scope and order (constructors in plan order, then the
    plan's initialization overrides), and its parameters and buffers, constant tables computed in
    ``__init__`` and batch-norm running statistics included, are copied into the model's own
    tensors in place; a parameter sharded as a DTensor receives its shard of the whole value.

    ``initialization_seed`` defaults to the build's (``model.build_receipt``): an int gives
    exactly the values of a direct build on that device with that seed; None draws from the
    caller's RNG, as a build without a seed does (a meta build draws nothing, so seeding torch
    the same way before ``initialize`` as before a direct build gives the same values). The
    receipt then records this call's device and seed. Also usable on a materialized model, to
    re-initialize it. Returns ``model``.

    Errors: E_ARGUMENT when ``model`` is not a built HNDL network; E_RUNTIME while any of its
    tensors is still on the meta device (call ``to_empty`` first) or when a node's registered
    state no longer matches what its operator constructs; E_INITIALIZATION for targets that share
    storage (checked here, since meta tensors cannot show it); E_RESOURCE as in ``build``.
    Extra memory: one node's state at a time.
    """
    if not isinstance(model, GraphModule):
        raise HNDLError(
            "E_ARGUMENT", f"initialize() needs a network built by HNDL, not {type(model).__name__}", field="model",
            remedies=("Pass the module that network(), build() or restore() returned.",))
    seed = model.build_receipt["initialization_seed"] if initialization_seed is BUILD_SEED else initialization_seed
    check_seed(seed)
    checked = validate_limits(limits)
    plan = model.plan
    left = next((name for name, tensor in _named_state(model) if tensor.is_meta), None)
    if left is not None:
        raise HNDLError(
            "E_RUNTIME", f"{left} is still on the meta device; initialize() writes values into allocated tensors",
            remedies=("Allocate the model first: model.to_empty(device=\"cpu\") (or \"cuda\"), then "
                      "initialize(model).",))
    device = model._device
    dtype = TORCH_DTYPES[plan.dtype]
    named = f"limits['max_state_bytes']={checked['max_state_bytes']}"
    targets = dict(zip((node.id for node in plan.nodes), model._node_modules))
    records: dict[str, Any] = {}
    with limits_in_force(checked), active_specs(plan, registry) as specs:
        placement = device_placement(device)
        counter = ModuleCounter(checked["max_node_modules"])
        with _rng_scope(seed, device):
            with counter.watching():
                valid: dict[int, Any] = {}
                for node in plan.nodes:
                    fresh, _ = _materialize(specs[node.id], node, constructor_kwargs(specs[node.id], node), device,
                                            placement, dtype, counter, None, named)
                    records[node.id] = check_targets(fresh, node=node.id, initialization=node.initialization,
                                                     trainability=node.trainability, dtype=dtype, valid=valid)
                    _copy_state(fresh, targets[node.id], node)
                    del fresh
            for node in plan.nodes:
                if records[node.id] is not None:
                    apply_initialization(targets[node.id], records[node.id][0], dtype)
    receipt = dict(model.build_receipt)
    receipt.update(device=str(device), initialization_seed=seed, seed_mode="caller" if seed is None else "isolated")
    model.build_receipt = BuildReceipt(receipt)
    return model


def _named_state(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``parameter 'name'`` / ``buffer 'name'`` and the tensor, for every registered tensor."""
    for name, tensor in model.named_parameters(remove_duplicate=False):
        yield f"parameter {name!r}", tensor
    for name, tensor in model.named_buffers(remove_duplicate=False):
        yield f"buffer {name!r}", tensor


def _copy_state(fresh: nn.Module, target: nn.Module, node: PlanNode) -> None:
    """Copy every parameter and buffer of ``fresh`` (the node constructed again) into ``target`` (the
    model's module of that node) in place, by slot; a slot either lacks is E_RUNTIME."""
    def mismatch(what: str) -> HNDLError:
        return HNDLError(
            "E_RUNTIME",
            f"node {node.id!r} ({node.op}): {what}, so initialize() cannot tell where its constructed values go",
            node=node.id,
            remedies=("Call initialize(model) right after to_empty(), before parametrizing, quantizing or "
                      "otherwise changing the node modules.",))

    for path, sub in fresh.named_modules():
        try:
            home = target.get_submodule(path) if path else target
        except AttributeError:
            raise mismatch(f"the model has no submodule {path!r}") from None
        for kind, slots in (("parameter", "_parameters"), ("buffer", "_buffers")):
            ours, theirs = getattr(sub, slots), getattr(home, slots)
            if {name for name, value in ours.items() if value is not None} != \
                    {name for name, value in theirs.items() if value is not None}:
                raise mismatch(f"the {kind}s of {path or 'the node'} are {sorted(theirs)}, its operator constructs "
                               f"{sorted(ours)}")
            for name, value in ours.items():
                if value is None:
                    continue
                slot = theirs[name]
                if tuple(slot.shape) != tuple(value.shape):
                    raise mismatch(f"{kind} {'.'.join(filter(None, (path, name)))!r} has shape {list(slot.shape)}, "
                                   f"its operator constructs {list(value.shape)}")
                write_whole(slot, value.detach())


def parameter_counts(
    plan: ResolvedPlan, *, registry: Optional[Registry] = None, limits: Optional[Mapping[str, int]] = None
) -> dict[str, Optional[int]]:
    """Parameters per node from a meta-device construction; None where a node cannot be probed.

    A node registering more than ``limits['max_node_modules']`` modules is E_RESOURCE, as in build.
    """
    checked = validate_limits(limits)
    counts: dict[str, Optional[int]] = {}
    with limits_in_force(checked), active_specs(plan, registry) as specs:
        probe = MetaProbe(TORCH_DTYPES[plan.dtype], checked["max_node_modules"])
        for node in plan.nodes:
            measured = probe.measure(specs[node.id], node)
            counts[node.id] = None if measured is None else measured.parameters
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
    target = check_device(device, meta=True)
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
    CUDA device; a meta build allocates nothing and keeps the default, since the model it makes is
    materialized later, possibly sharded (``to_empty``, then ``initialize``). Limits never enter
    a plan, so this changes no plan bytes or digests, only how early a build that cannot fit is
    refused.
    """
    limit = checked["max_state_bytes"]
    named = f"limits['max_state_bytes']={limit}"
    if explicit or device.type == "meta":  # meta holds nothing: the bound is the plan's, as given
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
    kwargs: dict[str, dict] = {}
    estimated, per_node = _meta_pass(plan, specs, dtype, checked["max_node_modules"], limit, named, kwargs)
    modules: dict[str, nn.Module] = {}
    tensors: dict[str, tuple] = {}  # each module's state_tensors, read once
    placement = device_placement(target)
    counter = ModuleCounter(checked["max_node_modules"])
    deferred = target.type == "meta"  # initialization waits for to_empty + initialize()
    try:
        with _rng_scope(initialization_seed, target):
            with counter.watching():
                for node in plan.nodes:
                    modules[node.id], tensors[node.id] = _materialize(
                        specs[node.id], node, kwargs[node.id], target, placement, dtype, counter,
                        per_node.get(node.id), named)
            valid: dict[int, Any] = {}  # records already validated, by identity (plans share the defaults)
            records = {
                node.id: check_targets(modules[node.id], node=node.id, initialization=node.initialization,
                                       trainability=node.trainability, dtype=dtype, valid=valid, deferred=deferred)
                for node in plan.nodes
            }
            for node_id, checked_records in records.items():
                if checked_records is not None:  # None: nothing to initialize or freeze
                    if not deferred:
                        apply_initialization(modules[node_id], checked_records[0])
                    apply_trainability(modules[node_id], checked_records[1])
        _check_ownership(modules, tensors)
        built = sum(registered_bytes(modules[node_id], held) for node_id, held in tensors.items())
        if built > limit:
            raise HNDLError(
                "E_RESOURCE",
                f"registered state is {built} bytes, above {named}",
                remedies=("Shrink the network or raise limits['max_state_bytes'].",),
            )
    except BaseException:
        modules.clear()  # nothing half-built outlives a failed build
        tensors.clear()
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
    traits: dict[int, frozenset[str]] = {}
    for spec in specs.values():
        if id(spec) not in traits:
            traits[id(spec)] = node_traits(spec)
    node_trait_sets = {node.id: traits[id(specs[node.id])] for node in plan.nodes}
    return module_class(plan, modules, port_dtypes(plan, specs), receipt, target, node_trait_sets)


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


def check_device(device: Any, *, meta: bool = False) -> torch.device:
    """``device`` as a torch.device: cpu, an existing CUDA device with its index, or (where ``meta``)
    the meta device (E_SCHEMA, E_RUNTIME)."""
    names = 'device="cpu", "cuda" / "cuda:<index>"' + (' or "meta"' if meta else "")
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise HNDLError("E_SCHEMA", f"device {device!r} is not a device name", field="device",
                            remedies=(f"Use {names}.",)) from None
    if isinstance(device, torch.device) and device.type == "meta":
        if not meta:
            raise HNDLError(
                "E_SCHEMA", "the meta device holds no values, and this step computes them", field="device",
                remedies=("Use hndl.torch.dry_run(plan) to run every node on the meta device, or device=\"cpu\".",))
        if device.index is not None:
            raise HNDLError("E_SCHEMA", f"meta takes no device index, got {device}", field="device")
        return device
    if not isinstance(device, torch.device) or device.type not in ("cpu", "cuda"):
        raise HNDLError(
            "E_SCHEMA",
            f"device must be cpu or cuda[:index]{' or meta' if meta else ''}, got {device!r}",
            field="device",
            remedies=(f"Use {names}.",),
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


def _meta_pass(plan: ResolvedPlan, specs: dict[str, OperatorSpec], dtype: torch.dtype, module_bound: int,
               budget: int, named: str, kwargs: dict[str, dict]) -> tuple[int, dict[str, int]]:
    """Sum each node's storage on the meta device and stop before allocating past ``budget``.

    Returns the total and each probed node's bytes (what its real construction will need), and
    fills ``kwargs`` with each node's ``constructor_kwargs`` for the real construction.
    """
    total = 0
    per_node: dict[str, int] = {}
    probe = MetaProbe(dtype, module_bound)
    for node in plan.nodes:
        spec = specs[node.id]
        arguments = kwargs[node.id] = constructor_kwargs(spec, node)
        measured = probe.measure(spec, node, arguments)
        if measured is None:
            continue  # measured after real construction
        per_node[node.id] = measured.state_bytes
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


def _materialize(spec: OperatorSpec, node: PlanNode, kwargs: Mapping[str, Any], target: torch.device, placement: Any,
                 dtype: torch.dtype, counter: ModuleCounter, needed: Optional[int],
                 named: str) -> tuple[nn.Module, tuple]:
    """Construct ``node`` from ``kwargs`` on ``target`` (``placement`` makes it the default device) in
    ``dtype``, counting its modules (``counter``, watching); returns the module and its ``state_tensors``.

    A failed allocation is E_RESOURCE naming the node.
    """
    module = None
    try:
        counter.start(node)
        try:
            with placement:
                module = instantiate(spec, node, kwargs)
        finally:
            counter.stop()
        held = state_tensors(module)
        if cast_changes(held, dtype):
            module = module.to(dtype=dtype)
            held = state_tensors(module)
        return module, held
    except Exception as error:
        if is_size_overflow(error):  # a constructor the meta device could not measure
            overflow = size_overflow(node, error)
        elif is_allocation_failure(error):
            overflow, reason = None, first_line(error)
        else:
            raise
    module = None  # raised outside the handler: no traceback keeps the partial module alive
    if overflow is not None:
        raise overflow
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


def device_placement(target: torch.device) -> Any:
    """The context that makes ``target`` the default device while nodes are constructed.

    None is needed (an empty context) when a factory call without a device already lands on
    ``target``: torch's device context intercepts every torch call in a constructor, which
    doubles the cost of building an ``nn.Linear``.
    """
    return nullcontext() if torch.empty(0).device == target else torch.device(target)


def _check_ownership(modules: Mapping[str, nn.Module], tensors: Mapping[str, tuple]) -> None:
    """Each node owns its module and its storage; sharing across nodes is E_REGISTRY.

    ``tensors`` holds each node's ``state_tensors``.
    """
    owner_of_module: dict[int, str] = {}
    owner_of_storage: dict[tuple, str] = {}
    for node_id, module in modules.items():
        for sub in module.modules():
            other = owner_of_module.setdefault(id(sub), node_id)
            if other != node_id:
                raise HNDLError("E_REGISTRY", f"nodes {other!r} and {node_id!r} share one module instance", node=node_id)
        for tensor in tensors[node_id]:
            if tensor.device.type == "meta" or tensor.numel() == 0:
                continue
            key = (tensor.device, tensor.untyped_storage().data_ptr())
            other = owner_of_storage.setdefault(key, node_id)
            if other != node_id:
                raise HNDLError("E_REGISTRY", f"nodes {other!r} and {node_id!r} share parameter or buffer storage", node=node_id)


def node_traits(spec: OperatorSpec) -> frozenset:
    """What the runtime needs of a node's declaration, read once at build (never off the module's class).

    ``opaque``: its output contract is asserted, so checked on every call; ``unary``: one
    non-variadic required input port and one output port, so ``nn.Sequential`` can chain it;
    ``ports:x,bias``: the declared input ports of an operator with optional ports, so the
    runtime passes None for each one a node leaves unbound (``ports.call_slots``); and the
    declaration's ``runtime_check`` function itself, not a string, which the checked program
    calls before the node runs (``ports.runtime_check_of``).
    """
    shape = spec.shape
    traits: set = set()
    if spec.opaque:
        traits.add("opaque")
    if not (shape.variadic_input or shape.variadic_output) and len(spec.required_inputs) == 1 and len(shape.outputs) == 1:
        traits.add("unary")  # optional ports aside: a chained call leaves them unbound (None)
    if spec.optional_inputs:
        traits.add(PORTS_TRAIT + ",".join(spec.input_ports()))
    if spec.runtime_check is not None:
        traits.add(spec.runtime_check)
    return frozenset(traits)


def port_dtypes(plan: ResolvedPlan, specs: dict[str, OperatorSpec]) -> dict[str, tuple]:
    """Expected input and produced output dtypes per node, by the declarations' one rule."""
    carried = {f"input:{port['name']}": port["dtype"] for port in plan.inputs}
    result = {}
    known: dict[tuple, tuple] = {}  # the rule reads the declaration, the port names and the carried dtypes
    for node in plan.nodes:
        spec = specs[node.id]
        incoming = [carried[ref] for ref in node.inputs.values()]
        key = (id(spec), tuple(node.inputs), tuple(node.outputs), tuple(incoming))
        dtypes = known.get(key)
        if dtypes is None:
            dtypes = known[key] = spec.port_dtypes(node.inputs, node.outputs, compute=plan.dtype, carried=incoming)
        expected, produced = dtypes
        for port, dtype in produced.items():
            carried[f"node:{node.id}/{port}"] = dtype
        result[node.id] = (expected, produced)
    return result
