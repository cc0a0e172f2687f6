"""Inspection modes (§13): a meta-device dry run and a numerical preflight.

§13 keeps three inspection modes distinct, each with its own guarantee:

1. **Static resolution** — ``hndl.resolve`` / ``resolve_file`` / ``resolve_callable`` and
   ``print(plan)`` / ``plan.describe()``. Shapes, arguments and provenance from declarations
   alone: no module, no tensor, no CUDA, no randomness (invariant 3).
2. **Dry run** — :func:`dry_run`. Every node is constructed on the meta device and run on
   meta tensors of the plan's port contracts, so each operator's *real* forward is checked
   against the shapes and dtypes the resolver promised. Meta tensors have no storage: no
   real memory is allocated, CUDA is never touched and no random number is drawn (the CPU
   generator's state is also saved and put back, in case a constructor asks it for
   anything). Initialization overrides and trainability are not applied: they cannot
   change a shape.
3. **Numerical preflight** — :func:`preflight`. The plan is built for real, as
   ``hndl.torch.build`` builds it, into *disposable* modules on the requested device, inside
   an isolated RNG scope seeded with ``seed``; one forward pass (and by default one backward
   pass) runs on random inputs of the plan contracts, and every output and gradient must be
   finite. Afterwards the caller's RNG state (CPU, and every CUDA device already
   initialized or used) is exactly what it was, and no live module is involved: the
   disposable modules and their buffers are dropped. It never advances a host's training
   stream or alters a persistent buffer of a model the host holds.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch import nn

from ..contracts import batch_multiple
from ..errors import HNDLError
from ..limits import limits_in_force, validate_limits
from ..plan import ResolvedPlan
from ..registry import Registry
from .build import active_specs, build, check_device, node_traits, port_dtypes, seed_problem
from .instantiate import meta_module, registered_bytes
from .ports import call_slots, run_runtime_check

__all__ = ["dry_run", "preflight"]


def dry_run(
    plan: ResolvedPlan,
    *,
    registry: Optional[Registry] = None,
    batch: int = 2,
    limits: Optional[Mapping[str, int]] = None,
) -> dict[str, Optional[dict[str, tuple]]]:
    """Run every node on the meta device and check its outputs against the plan.

    Batch entries ``B`` and ``k*B`` take the value ``batch`` and ``k * batch``. Returns
    ``{node id: {output port: concrete shape}}`` in execution order. A node that cannot be
    constructed on the meta device, or whose forward cannot run on meta tensors (PyTorch
    raises NotImplementedError or refuses to read a meta tensor's data), maps to None, as in
    ``parameter_counts``; its outputs continue from the plan's contracts. Raises E_RUNTIME
    naming the node and port when an output has the wrong shape, dtype or device, or when a
    node's forward fails; E_RESOURCE when the meta state exceeds ``max_state_bytes`` or a node
    registers more than ``max_node_modules`` modules.
    """
    _check_plan(plan)
    _check_batch(batch)
    checked = validate_limits(limits)
    saved_rng = torch.get_rng_state()
    with limits_in_force(checked), active_specs(plan, registry) as specs:
        try:
            dtype = _torch_dtype(plan.dtype)
            dtypes = port_dtypes(plan, specs)
            values = {
                f"input:{port['name']}": torch.empty(
                    _concrete(port["shape"], plan.batch, batch), dtype=_torch_dtype(port["dtype"]), device="meta")
                for port in plan.inputs
            }
            report: dict[str, Optional[dict[str, tuple]]] = {}
            state_bytes = 0
            for node in plan.nodes:
                expected = {port: _concrete(node.output_shapes[port], plan.batch, batch) for port in node.outputs}
                produced = dtypes[node.id][1]
                module = meta_module(specs[node.id], node, dtype, checked["max_node_modules"])
                outputs = None
                if module is not None:
                    state_bytes += registered_bytes(module)
                    if state_bytes > checked["max_state_bytes"]:
                        raise HNDLError(
                            "E_RESOURCE",
                            f"registered state would reach {state_bytes} bytes at node {node.id!r}, "
                            f"above max_state_bytes={checked['max_state_bytes']}",
                            node=node.id,
                        )
                    slots = call_slots(node_traits(specs[node.id]), tuple(node.inputs))
                    args = [values[ref] for ref in node.inputs.values()]
                    check = specs[node.id].runtime_check
                    if check is not None:  # the declaration's check of this call, as the checked program runs it
                        _run_check(check, module, node, args)
                    if slots is not None:  # None at each unbound optional port's position
                        args = [None if index is None else args[index] for index in slots]
                    outputs = _run_meta(module, node, args)
                if outputs is None:
                    report[node.id] = None
                    outputs = tuple(
                        torch.empty(expected[port], dtype=_torch_dtype(produced[port]), device="meta")
                        for port in node.outputs
                    )
                else:
                    for port, tensor in zip(node.outputs, outputs):
                        _check_output(node, port, tensor, expected[port], produced[port], "meta")
                    report[node.id] = {port: tuple(tensor.shape) for port, tensor in zip(node.outputs, outputs)}
                for port, tensor in zip(node.outputs, outputs):
                    values[f"node:{node.id}/{port}"] = tensor
            for port in plan.outputs:
                tensor = values[port["ref"]]
                want = _concrete(port["shape"], plan.batch, batch)
                if tuple(tensor.shape) != want:
                    raise HNDLError("E_RUNTIME", f"public output {port['name']!r}: expected shape {list(want)}, "
                                                 f"got {list(tensor.shape)}", field=port["name"])
            return report
        finally:
            torch.set_rng_state(saved_rng)


def preflight(
    plan: ResolvedPlan,
    *,
    device: Any = "cpu",
    registry: Optional[Registry] = None,
    batch: int = 2,
    seed: int = 0,
    backward: bool = True,
    limits: Optional[Mapping[str, int]] = None,
) -> dict[str, Any]:
    """Build disposable modules and run one numerical pass in an isolated, restored RNG scope.

    Floating inputs are standard normal, integer and boolean inputs are zeros; batch entries
    take ``batch``. The modules run in training mode, as built. With ``backward=True`` the sum
    of every floating output is differentiated and every input and parameter gradient must be
    finite too. Raises E_RUNTIME naming the first node whose output is not finite (or the
    parameter or input whose gradient is not). Returns a summary::

        {"device": "cpu", "batch": 2, "seed": 0, "state_bytes": ...,
         "outputs": {name: {"shape": (...), "dtype": "float32", "min": ..., "max": ..., "mean": ...}},
         "gradients": {"inputs": n, "parameters": n}}    # None when backward=False
    """
    _check_plan(plan)
    _check_batch(batch)
    problem = seed_problem(seed)
    if problem is not None:
        raise HNDLError("E_SCHEMA", f"seed must be an int with 0 <= seed < 2**64, {problem}", field="seed",
                        remedies=("Give a seed from 0 to 2**64 - 1.",))
    target = check_device(device)
    with _isolated_rng(seed, target):
        model = build(plan, device=target, registry=registry, limits=limits)  # disposable
        return _numerical_pass(model, plan, target, batch, seed, backward)


# -- dry run --------------------------------------------------------------------------------------------
def _run_check(check, module: nn.Module, node, args: list) -> None:
    """The declaration's ``runtime_check`` on the meta inputs; its HNDLError names the node."""
    try:
        run_runtime_check(check, module, args, tuple(node.inputs), node=node.id)
    except HNDLError as error:
        raise HNDLError(error.code, f"node {node.id!r} ({node.alias}) on the meta device: {error.message}",
                        node=node.id, chain=error.chain, remedies=error.remedies) from None


def _run_meta(module: nn.Module, node, args: list) -> Optional[tuple]:
    try:
        with torch.no_grad():
            result = module(*args)
    except HNDLError as error:
        raise HNDLError(error.code, f"node {node.id!r} ({node.alias}) on the meta device: {error.message}",
                        node=node.id, chain=error.chain, remedies=error.remedies) from error
    except NotImplementedError:
        return None  # no meta kernel: this node cannot be probed
    except Exception as error:
        if "meta" in str(error).lower():
            return None  # the forward reads data a meta tensor does not have
        raise HNDLError(
            "E_RUNTIME",
            f"node {node.id!r} ({node.alias}) failed on meta tensors of its plan shapes: "
            f"{type(error).__name__}: {error}",
            node=node.id,
            remedies=("The operator's forward disagrees with its declared shapes or arguments; "
                      "fix the operator or its declaration.",),
        ) from error
    return _as_ports(result, node)


def _as_ports(result: Any, node) -> tuple:
    names = node.outputs
    if len(names) == 1 and isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, Mapping):
        if set(result) != set(names):
            raise HNDLError("E_RUNTIME", f"node {node.id!r} returned keys {sorted(map(str, result))}, "
                                         f"expected exactly {list(names)}", node=node.id)
        return tuple(result[name] for name in names)
    if isinstance(result, (tuple, list)) and len(result) == len(names):
        return tuple(result)
    raise HNDLError("E_RUNTIME", f"node {node.id!r} returned {type(result).__name__}, expected "
                                 f"{len(names)} tensor(s) for {list(names)}", node=node.id)


def _check_output(node, port: str, tensor: Any, shape: tuple, dtype: Optional[str], device: str) -> None:
    where = f"{node.alias} {node.id!r} output {port!r}"
    if not isinstance(tensor, torch.Tensor):
        raise HNDLError("E_RUNTIME", f"{where}: expected a tensor, got {type(tensor).__name__}", node=node.id, field=port)
    if tuple(tensor.shape) != shape:
        raise HNDLError("E_RUNTIME", f"{where}: the plan says shape {list(shape)}, the operator produced "
                                     f"{list(tensor.shape)}", node=node.id, field=port)
    if dtype not in (None, "any") and tensor.dtype != _torch_dtype(dtype):
        raise HNDLError("E_RUNTIME", f"{where}: the plan says dtype {dtype}, the operator produced "
                                     f"{str(tensor.dtype).removeprefix('torch.')}", node=node.id, field=port)
    if tensor.device.type != device:
        raise HNDLError("E_RUNTIME", f"{where}: produced a tensor on {tensor.device} from meta inputs "
                                     "(the operator allocates outside its inputs' device)", node=node.id, field=port)


# -- preflight --------------------------------------------------------------------------------------------
class _isolated_rng:
    """Fork the CPU generator and each CUDA generator in use, seed the ones the pass uses,
    restore all of them on exit. CUDA is never initialized for a CPU preflight, and nothing
    is queued for a later lazy CUDA initialization (``torch.manual_seed`` would queue it)."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.seed = seed
        self.device = device
        cuda = device.type == "cuda" or (torch.cuda.is_available() and torch.cuda.is_initialized())
        self.devices = list(range(torch.cuda.device_count())) if cuda else []
        self.fork = torch.random.fork_rng(devices=self.devices)

    def __enter__(self):
        self.fork.__enter__()
        torch.default_generator.manual_seed(self.seed)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                torch.cuda.manual_seed(self.seed)
        return self

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)


def _numerical_pass(model: nn.Module, plan: ResolvedPlan, device: torch.device, batch: int, seed: int,
                    backward: bool) -> dict[str, Any]:
    inputs = {}
    for port in plan.inputs:
        shape = _concrete(port["shape"], plan.batch, batch)
        dtype = _torch_dtype(port["dtype"])
        if dtype.is_floating_point:
            inputs[port["name"]] = torch.randn(shape, dtype=dtype, device=device).requires_grad_(backward)
        else:
            inputs[port["name"]] = torch.zeros(shape, dtype=dtype, device=device)
    first_bad: list = []
    handles = [_watch(model, node, first_bad) for node in plan.nodes]
    try:
        with torch.set_grad_enabled(backward):
            outputs = model(**inputs)
    finally:
        for handle in handles:
            if handle is not None:
                handle.remove()
    if first_bad:
        node, port = first_bad[0]
        raise HNDLError("E_RUNTIME", f"preflight: {node.alias} {node.id!r} output {port!r} is not finite "
                                     f"(seed {seed}, batch {batch}, device {device})", node=node.id, field=port,
                        remedies=("Check the operator's numerics and the initialization of the nodes before it.",))
    summary: dict[str, Any] = {}
    for name, tensor in outputs.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise HNDLError("E_RUNTIME", f"preflight: public output {name!r} is not finite", field=name)
        values = tensor.detach().double() if tensor.numel() else None
        summary[name] = {
            "shape": tuple(tensor.shape),
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "min": None if values is None else values.min().item(),
            "max": None if values is None else values.max().item(),
            "mean": None if values is None else values.mean().item(),
        }
    gradients = None
    if backward:
        gradients = _backward(model, inputs, outputs)
    return {
        "device": str(device),
        "batch": batch,
        "seed": seed,
        "state_bytes": model.build_receipt["state_bytes"],
        "outputs": summary,
        "gradients": gradients,
    }


def _backward(model: nn.Module, inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor]) -> dict:
    losses = [tensor.float().sum() for tensor in outputs.values() if tensor.requires_grad]
    if not losses:
        return {"inputs": 0, "parameters": 0}
    torch.stack(losses).sum().backward()
    checked = {"inputs": 0, "parameters": 0}
    for name, tensor in inputs.items():
        if tensor.grad is not None:
            if not bool(torch.isfinite(tensor.grad).all()):
                raise HNDLError("E_RUNTIME", f"preflight: the gradient reaching input {name!r} is not finite", field=name)
            checked["inputs"] += 1
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            if not bool(torch.isfinite(parameter.grad).all()):
                node = name[len("nodes.n_"):].split(".", 1)[0] if name.startswith("nodes.n_") else None
                raise HNDLError("E_RUNTIME", f"preflight: the gradient of parameter {name!r} is not finite",
                                node=node, field=name)
            checked["parameters"] += 1
    return checked


def _watch(model: nn.Module, node, first_bad: list):
    """A forward hook on the node's module recording the first non-finite output."""
    nodes = getattr(model, "nodes", None)
    module = None
    if isinstance(nodes, nn.Module):
        module = getattr(nodes, f"n_{node.id}", None)
    if not isinstance(module, nn.Module):
        return None

    def hook(_module, _args, result):
        if first_bad:
            return None
        try:
            ports = _as_ports(result, node)
        except HNDLError:
            return None  # the graph's own checks report a malformed result
        for port, tensor in zip(node.outputs, ports):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() \
                    and not bool(torch.isfinite(tensor.detach()).all()):
                first_bad.append((node, port))
                break
        return None

    return module.register_forward_hook(hook)


# -- shared ------------------------------------------------------------------------------------------------
def _check_plan(plan: Any) -> None:
    if not isinstance(plan, ResolvedPlan):
        raise HNDLError("E_SCHEMA", f"expected a ResolvedPlan, not {type(plan).__name__}", field="plan")


def _check_batch(batch: Any) -> None:
    if type(batch) is not int or not 1 <= batch <= 2**20:
        raise HNDLError("E_SCHEMA", f"batch must be an int in [1, 2**20], got {batch!r}", field="batch")


def _concrete(shape: tuple, symbol: str, batch: int) -> tuple:
    head = shape[0]
    first = head if isinstance(head, int) else batch_multiple(head, symbol) * batch
    return (first, *shape[1:])


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise HNDLError("E_SCHEMA", f"unknown dtype {name!r}", field="dtype")
    return dtype

