"""Apply a node's initialization and trainability records to its constructed module (§11).

The builder materializes every node's module on the target device, then calls
:func:`check_targets` for every node before it calls :func:`apply_initialization` and
:func:`apply_trainability` on any of them, all inside the construction RNG scope. Checking
first means a bad target (a disabled bias, a buffer, a 1-D weight given a fan-based scheme)
fails with a stable code before any value has been overwritten or any draw consumed.

Targets are exact names from ``named_parameters(remove_duplicate=False)``: lookup keys,
never attribute expressions. Overrides apply under ``torch.no_grad()`` in the module's own
parameter order; a constant draws nothing, a scheme calls its torch.nn.init routine and
draws from whatever RNG state the caller's scope selected.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch
from torch import nn

from ..construction import (
    NORMAL_REACH,
    SCHEME_ROUTINES,
    TWO_DIMENSIONAL_SCHEMES,
    check_initialization_record,
    check_trainability_record,
)
from ..errors import HNDLError, listed

__all__ = ["check_targets", "apply_initialization", "apply_trainability", "scheme_reach", "write_whole",
           "whole_scratch", "is_distributed_tensor"]

#: Dtypes whose QR factorization torch does not implement; orthogonal_ runs in float32 and
#: the result is copied into the parameter.
_QR_UNSUPPORTED = (torch.float16, torch.bfloat16)

_MAX_LISTED = 40


def _listing(names: Iterable[str]) -> str:
    return listed(names, limit=_MAX_LISTED, show=str) or "(none: the module registers no parameters)"


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _storage_key(t: torch.Tensor) -> Optional[tuple]:
    """Identity of a tensor's storage, or None where there is nothing to share."""
    if t.is_meta or isinstance(t, nn.parameter.UninitializedTensorMixin):
        return None
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    if storage.nbytes() == 0:
        return None
    return (str(t.device), storage.data_ptr())


def _override_key(value: Any) -> Any:
    """Compare overrides exactly, telling -0.0 from 0.0 as the plan encoding does."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _override_key(v)) for k, v in value.items()))
    if type(value) is float:
        return ("f", value.hex(), math.copysign(1.0, value))
    return ("v", value)


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k}={v!r}" for k, v in value.items() if k != "kind")
        return f"{value.get('kind')}({inner})"
    return repr(value)


class _Inventory:
    """The module's registered parameters and buffers, by name and by object."""

    def __init__(self, module: nn.Module) -> None:
        self.named = list(module.named_parameters(remove_duplicate=False))
        self.by_name = dict(self.named)
        self.buffers = dict(module.named_buffers(remove_duplicate=False))
        self.names_of: dict[int, list[str]] = {}
        self.distinct: list[torch.Tensor] = []
        for name, param in self.named:
            if id(param) not in self.names_of:
                self.names_of[id(param)] = []
                self.distinct.append(param)
            self.names_of[id(param)].append(name)

    def lookup(self, path: str, *, code: str, node: Optional[str], field: str) -> torch.Tensor:
        param = self.by_name.get(path)
        if param is not None:
            return param
        available = _listing(name for name, _ in self.named)
        chain = ["targets are exact names from the constructed module's named_parameters()"]
        if path in self.buffers:
            message = (
                f"{path!r} is a registered buffer, not a parameter; buffer targets are "
                f"unsupported. Available parameters: {available}"
            )
        else:
            message = f"the module has no parameter {path!r}. Available parameters: {available}"
            chain.append("a disabled bias or affine registers no parameter")
        raise HNDLError(
            code,
            message,
            node=node,
            field=field,
            chain=chain,
            remedies=(
                f"Name one of the module's parameters: {available}.",
                "Remove the entry, or enable the parameter in the operator's arguments.",
            ),
        )


def _alias_conflicts(
    inventory: _Inventory,
    overrides: Mapping[str, Any],
    *,
    code: str,
    node: Optional[str],
    field: str,
    describe=_describe,
) -> dict[int, Any]:
    """Map each targeted parameter object to its one value; conflicting aliases fail."""
    chosen: dict[int, tuple[str, Any]] = {}
    for path, value in overrides.items():
        param = inventory.lookup(path, code=code, node=node, field=f"{field}.{path}")
        previous = chosen.get(id(param))
        if previous is not None and _override_key(previous[1]) != _override_key(value):
            raise HNDLError(
                code,
                f"{previous[0]!r} and {path!r} name the same parameter but receive conflicting "
                f"values {describe(previous[1])} and {describe(value)}",
                node=node,
                field=f"{field}.{path}",
                chain=(
                    f"the module registers one parameter under the names "
                    f"{', '.join(inventory.names_of[id(param)])}",
                ),
                remedies=(
                    "Give every name of a shared parameter the same value, or name it once.",
                ),
            )
        if previous is None:
            chosen[id(param)] = (path, value)
    return {key: value for key, (_, value) in chosen.items()}


def _storage_groups(inventory: _Inventory) -> dict[tuple, list[tuple[str, str, torch.Tensor]]]:
    groups: dict[tuple, list[tuple[str, str, torch.Tensor]]] = {}
    for param in inventory.distinct:
        key = _storage_key(param)
        if key is not None:
            name = inventory.names_of[id(param)][0]
            groups.setdefault(key, []).append(("parameter", name, param))
    seen: set[int] = set()
    for name, buf in inventory.buffers.items():
        if buf is None or id(buf) in seen:
            continue
        seen.add(id(buf))
        key = _storage_key(buf)
        if key is not None:
            groups.setdefault(key, []).append(("buffer", name, buf))
    return groups


def _check_initialization(
    inventory: _Inventory, record: Mapping, *, node: str, dtype: torch.dtype, deferred: bool = False
) -> None:
    code = "E_INITIALIZATION"
    values = _alias_conflicts(inventory, record["overrides"], code=code, node=node, field="init")
    if not values:
        return
    groups = _storage_groups(inventory)
    for param in inventory.distinct:
        if id(param) not in values:
            continue
        value = values[id(param)]
        name = inventory.names_of[id(param)][0]
        field = f"init.{name}"

        def fail(message: str, *remedies: str) -> HNDLError:
            return HNDLError(code, message, node=node, field=field, remedies=remedies)

        if isinstance(param, nn.parameter.UninitializedTensorMixin) or (param.is_meta and not deferred):
            raise fail(
                f"parameter {name!r} is not materialized, so it cannot be initialized",
                "Use an operator whose constructor creates its parameters eagerly.",
            )
        if param.dtype != dtype:
            raise fail(
                f"parameter {name!r} has dtype {param.dtype}, not the plan's compute dtype {dtype}",
                "Initialize only parameters stored in the plan's compute dtype.",
            )
        if not param.is_floating_point():
            raise fail(f"parameter {name!r} of dtype {param.dtype} is not floating point")
        shared = [
            entry
            for entry in groups.get(_storage_key(param), ())
            if entry[2] is not param
        ]
        if shared:
            others = ", ".join(f"{kind} {other!r}" for kind, other, _ in shared)
            raise fail(
                f"parameter {name!r} shares storage with {others}; initializing it would "
                f"overwrite that state too",
                "Remove the init entry; shared storage cannot be initialized separately.",
            )
        finfo = torch.finfo(dtype)
        if not isinstance(value, Mapping):
            if abs(value) > finfo.max:
                raise fail(
                    f"constant {value!r} for {name!r} does not fit the compute dtype {dtype} "
                    f"(largest magnitude {finfo.max!r})",
                    f"Use a constant whose magnitude is at most {finfo.max!r}.",
                )
            continue
        kind = value["kind"]
        if kind in TWO_DIMENSIONAL_SCHEMES and param.dim() < 2:
            raise fail(
                f"{kind} needs a parameter of at least two dimensions, but {name!r} has shape "
                f"{_shape(param)}",
                "Use a constant, normal, uniform or truncated_normal for this parameter.",
            )
        reach = scheme_reach(kind, value, tuple(param.shape))
        if param.numel() and reach > finfo.max:
            raise fail(
                f"{_describe(value)} for {name!r} of shape {_shape(param)} reaches a magnitude of "
                f"{reach:.4g} (the largest value it can draw, or the width of its uniform range), beyond "
                f"the largest finite value {finfo.max!r} of the compute dtype {dtype}",
                "Use a smaller gain, std, mean or bound for this parameter"
                + ("." if dtype == torch.float32 else ", or the float32 compute dtype."),
            )


def scheme_reach(kind: str, record: Mapping[str, Any], shape: tuple[int, ...]) -> float:
    """The largest magnitude scheme ``kind`` computes for a parameter of ``shape``.

    That is the largest value it can write and, for the uniform draws, the width of the range,
    which ``uniform_`` requires to be finite too (xavier_uniform draws from ``[-bound, bound]``).
    Normal draws reach ``NORMAL_REACH`` standard deviations; truncated_normal is clamped to
    ``[a, b]``; orthogonal entries are at most ``|gain|``. Fans follow torch.nn.init:
    ``fan_in = shape[1] * receptive`` and ``fan_out = shape[0] * receptive``.
    """
    if kind == "uniform":
        return max(abs(record["a"]), abs(record["b"]), record["b"] - record["a"])
    if kind == "normal":
        return abs(record["mean"]) + NORMAL_REACH * record["std"]
    if kind == "truncated_normal":
        mean, spread, low, high = record["mean"], NORMAL_REACH * record["std"], record["a"], record["b"]
        return max(abs(min(max(mean - spread, low), high)), abs(min(max(mean + spread, low), high)))
    if kind == "orthogonal":
        return abs(record["gain"])
    receptive = math.prod(shape[2:])
    fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
    if kind in ("xavier_uniform", "xavier_normal"):
        gain, fan = record["gain"], (fan_in + fan_out) / 2.0
    else:  # kaiming_uniform, kaiming_normal
        gain = nn.init.calculate_gain(record["nonlinearity"], record["a"])
        fan = fan_in if record["mode"] == "fan_in" else fan_out
    if fan == 0:
        return 0.0  # an empty parameter: nothing is drawn
    std = gain / math.sqrt(fan)
    return 2.0 * math.sqrt(3.0) * std if kind.endswith("uniform") else NORMAL_REACH * std


def _check_trainability(inventory: _Inventory, record: Mapping, *, node: str) -> None:
    code = "E_TRAINABILITY"
    default = record["default"]
    flags = _alias_conflicts(
        inventory, record["overrides"], code=code, node=node, field="trainable"
    )
    if default is not None:
        flags = {id(p): default for p in inventory.distinct}
    for param in inventory.distinct:
        if flags.get(id(param)) is True and not (param.is_floating_point() or param.is_complex()):
            name = inventory.names_of[id(param)][0]
            raise HNDLError(
                code,
                f"cannot enable gradients on parameter {name!r} of integer dtype {param.dtype}",
                node=node,
                field="trainable" if default is not None else f"trainable.{name}",
                remedies=(
                    f"Set {name!r} to False, or name only floating-point parameters.",
                ),
            )
    groups = _storage_groups(inventory)
    for entries in groups.values():
        params = [(name, t) for kind, name, t in entries if kind == "parameter"]
        if len(params) < 2 or not any(id(t) in flags for _, t in params):
            continue
        effective = {name: flags.get(id(t), t.requires_grad) for name, t in params}
        if len(set(effective.values())) > 1:
            listed = ", ".join(f"{n}={f}" for n, f in effective.items())
            raise HNDLError(
                code,
                f"parameters sharing one storage would end with different requires_grad "
                f"flags: {listed}",
                node=node,
                field="trainable",
                chain=("distinct parameters that share storage must agree on trainability",),
                remedies=("Give every parameter that shares the storage the same flag.",),
            )


def check_targets(
    module: nn.Module,
    *,
    node: str,
    initialization: Mapping,
    trainability: Mapping,
    dtype: torch.dtype,
    valid: Optional[dict[int, Any]] = None,
    deferred: bool = False,
) -> Optional[tuple[dict, dict]]:
    """Verify a node's records against its constructed module; change nothing.

    Returns the checked records to pass to ``apply_initialization`` and ``apply_trainability``,
    or None when they would change nothing (no override, no trainability default), so a
    builder need not look at the node again. ``valid`` (one dictionary per build) remembers the
    records already validated, by identity, as the nodes of a plan share the default records;
    the records must stay alive and unchanged while it is in use, as a plan's frozen records do.

    Every path must name a registered parameter (not a buffer); aliases of one parameter
    must agree; initialization targets must be materialized floating parameters in the
    plan's compute dtype sharing no storage with other state, and fan-based or orthogonal
    schemes need at least two dimensions; every constant and scheme must stay finite in the
    compute dtype for the parameter's shape (``scheme_reach``); trainability may not enable
    gradients on an integer parameter, and parameters sharing storage must end with one flag.

    ``deferred``: the module is on the meta device and its initialization waits for
    ``hndl.torch.initialize`` after ``to_empty``; meta parameters are then accepted as targets
    (storage sharing, which meta tensors cannot show, is checked again when that call
    constructs the node for real).
    """
    init = _checked(check_initialization_record, initialization, node, valid)
    train = _checked(check_trainability_record, trainability, node, valid)
    if not init["overrides"] and train["default"] is None and not train["overrides"]:
        return None
    inventory = _Inventory(module)
    _check_initialization(inventory, init, node=node, dtype=dtype, deferred=deferred)
    _check_trainability(inventory, train, node=node)
    return init, train


def _checked(check: Any, record: Any, node: str, valid: Optional[dict[int, Any]]) -> dict:
    """``check(record, node=node)``, once per record object where ``valid`` remembers them."""
    if valid is None:
        return check(record, node=node)
    entry = valid.get(id(record))
    if entry is None or entry[0] is not record:
        entry = valid[id(record)] = (record, check(record, node=node))
    return entry[1]


def _apply_scheme(param: torch.Tensor, record: Mapping[str, Any]) -> None:
    kind = record["kind"]
    if param.numel() == 0:
        return  # nothing to fill, nothing to draw
    kwargs = {k: v for k, v in record.items() if k != "kind"}
    routine = getattr(nn.init, SCHEME_ROUTINES[kind])
    if kind == "orthogonal" and param.dtype in _QR_UNSUPPORTED:
        scratch = torch.empty(param.shape, dtype=torch.float32, device=param.device)
        routine(scratch, **kwargs)
        param.copy_(scratch)
        return
    routine(param, **kwargs)


def apply_initialization(module: nn.Module, initialization: Mapping, dtype: Optional[torch.dtype] = None) -> None:
    """Apply a checked initialization record in the module's own parameter order.

    ``dtype``: the plan's compute dtype, where the module may since have been cast (``.double()``
    before ``hndl.torch.initialize``); a parameter in another dtype is computed in ``dtype`` and
    cast, so it holds what the build computed, cast as the module was.

    A parameter sharded as a ``DTensor`` (FSDP2's ``fully_shard``) is computed whole in a
    scratch tensor, drawing exactly what the unsharded parameter would draw, and each rank keeps
    its own shard (``write_whole``): a sharded model gets the values of an unsharded build.
    """
    record = check_initialization_record(initialization)
    if not record["overrides"]:
        return
    inventory = _Inventory(module)
    values = _alias_conflicts(
        inventory, record["overrides"], code="E_INITIALIZATION", node=None, field="init"
    )
    with torch.no_grad():
        for param in inventory.distinct:
            if id(param) not in values:
                continue
            value = values[id(param)]
            whole = whole_scratch(param, dtype)
            if isinstance(value, Mapping):
                _apply_scheme(whole, value)
            else:
                whole.fill_(value)
            if whole is not param:
                write_whole(param, whole)


def is_distributed_tensor(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a ``torch.distributed.tensor.DTensor`` (read without importing it)."""
    return getattr(type(tensor), "__module__", "").startswith("torch.distributed") and hasattr(tensor, "device_mesh")


def whole_scratch(tensor: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``tensor`` itself, or an uninitialized plain tensor of its whole (global) shape in ``dtype``
    (default its own) on its local device, to compute the whole value in: for a DTensor, or a
    tensor in another dtype than ``dtype``."""
    distributed = is_distributed_tensor(tensor)
    if not distributed and (dtype is None or tensor.dtype == dtype):
        return tensor
    device = tensor.to_local().device if distributed else tensor.device
    return torch.empty(tensor.shape, dtype=tensor.dtype if dtype is None else dtype, device=device)


def write_whole(target: torch.Tensor, whole: torch.Tensor) -> None:
    """Copy the whole value ``whole`` into ``target`` (cast to its dtype); a DTensor ``target`` keeps
    the part its placements give this rank, sliced locally (every rank holds the same ``whole``,
    so nothing is communicated)."""
    with torch.no_grad():
        if is_distributed_tensor(target):
            from torch.distributed.tensor import distribute_tensor

            whole = whole.to(device=target.to_local().device, dtype=target.dtype)
            target.copy_(distribute_tensor(whole, target.device_mesh, target.placements, src_data_rank=None))
        else:
            target.copy_(whole)


def apply_trainability(module: nn.Module, trainability: Mapping) -> None:
    """Apply a checked trainability record: a boolean default reaches every parameter."""
    record = check_trainability_record(trainability)
    default = record["default"]
    if default is not None:
        for param in module.parameters():
            param.requires_grad_(default)
    if record["overrides"]:
        inventory = _Inventory(module)
        for path, flag in record["overrides"].items():
            param = inventory.lookup(
                path, code="E_TRAINABILITY", node=None, field=f"trainable.{path}"
            )
            param.requires_grad_(flag)
