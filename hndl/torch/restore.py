"""Restoration (§12): rebuild a saved plan and load a state dictionary into it, checked first.

``restore(saved, state_dict, device=...)`` is the documented way back from a checkpoint made
of the two artifacts §12 asks hosts to keep together: the plan JSON and a PyTorch
``state_dict()``. The order of work is fixed:

1. the plan: text (or bytes, or a path) goes through ``ResolvedPlan.from_json``, which checks
   the format (E_SCHEMA), the schema/resolution versions (E_STATE_VERSION), both digests
   (E_INTEGRITY) and every concrete equation against the registry (E_INTEGRITY; an identity
   the registry lacks is E_STATE_VERSION). A ``ResolvedPlan`` object is revalidated against
   the registry the same way. Restoration never re-runs source, a callable or a policy;
2. construction with ``build`` (the plan's initialization records, trainability masks, the
   meta-device state bound);
3. the state: its keys and version metadata are checked for form, then every entry's name,
   kind (a dense, strided, unquantized plain tensor or Parameter with data), shape and dtype
   is compared with the built module's ``state_dict()`` and *all* differences are reported
   before anything is loaded, so a refused state leaves a live module exactly as it was;
4. ``load_state_dict(strict=True)``, which copies values in place (devices may differ;
   dtypes may not). It sees only the entries and the module versions of the metadata: a
   loader option in the data (``assign_to_params_buffers``) is dropped, because how state is
   loaded is the host's choice. Operators that cache derived tensors refresh them through
   their own load hooks (§11: "manage derived caches correctly after state loading/device
   moves").

Error codes for a state dictionary that does not fit (one rule, stated once):

* **E_SCHEMA** — the state is not a state dictionary at all: not a mapping, a key that is
  not a str (``{3: tensor}``), or version metadata (``state_dict._metadata``) that is not a
  mapping of module names to ``{"version": positive int}``.
* **E_INTEGRITY** — the state does not match the plan it is paired with: a missing or an
  unexpected entry, a shape or dtype different from the rebuilt module, a value that is not
  a tensor, a tensor ``load_state_dict`` cannot copy as plain values (sparse or another
  non-strided layout, nested, quantized, a tensor subclass) or a tensor without data (meta).
  This is the §12 "inconsistent contents" case,
  the same code as a plan whose digests disagree with its text: usually the state belongs
  to another plan, or one of the two files was edited.
* **E_STATE_VERSION** — the state was written by *another parameter layout of the same
  operator*: the state's own version metadata (``state_dict()._metadata``, which PyTorch
  records for every module) gives a module version different from the one this registry's
  implementation builds, and that node's entries do not fit. The operator's semantic
  version is what carries parameter layout (§10), so this means the implementation that
  wrote the state is not the one available now.

The module returned is in training mode, like every built module; loading never changes
``requires_grad`` (trainability lives in the plan, not in the state dictionary).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Mapping, Optional

import torch
from torch import nn

from ..errors import HNDLError
from ..limits import validate_limits
from ..persist import from_json, read_plan_file
from ..plan import ResolvedPlan
from ..registry import Registry
from .build import build

if TYPE_CHECKING:
    from .graph_module import GraphModule

__all__ = ["restore", "load_state", "check_state"]

_REMEDY_PAIR = ("Restore the state dictionary saved together with this plan, or resolve and build "
                "the architecture the state belongs to and transfer weights explicitly.",)


def restore(
    saved: Any,
    state_dict: Optional[Mapping[str, Any]] = None,
    *,
    device: Any,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> "GraphModule":
    """Rebuild a saved plan on ``device`` and, when given, load ``state_dict`` into it.

    ``saved`` is plan JSON text or bytes (as written by ``plan.to_json()``), an
    ``os.PathLike`` naming such a file (read bounded at 16 MiB), or a ``ResolvedPlan``. A
    plain ``str`` is always JSON text, never a path. Every state entry is checked before
    any is loaded; see the module docstring for the error codes. Returns a ``GraphModule``
    in training mode whose ``forward(**inputs)`` returns the dictionary of public outputs.
    """
    registry = Registry.builtins() if registry is None else registry
    checked = validate_limits(limits)
    plan = _plan(saved, registry, limits, checked)
    if state_dict is not None and not isinstance(state_dict, Mapping):
        raise HNDLError("E_SCHEMA", f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}",
                        field="state_dict")
    module = build(plan, device=device, initialization_seed=initialization_seed, registry=registry, limits=limits)
    if state_dict is not None:
        load_state(module, state_dict)
    return module


def load_state(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Check every entry of ``state_dict`` against ``module`` (``check_state``), then load it
    strictly. Nothing is loaded unless everything fits.

    torch receives a shallow copy holding the same tensors and only the module versions of
    the metadata, so nothing in the data chooses how the state is loaded.
    """
    check_state(module, state_dict)
    entries = OrderedDict(state_dict)
    versions = _metadata_versions(state_dict)
    entries._metadata = OrderedDict((prefix, {"version": version}) for prefix, version in versions.items())
    module.load_state_dict(entries, strict=True)


def check_state(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Raise E_SCHEMA, E_STATE_VERSION or E_INTEGRITY unless ``state_dict`` has exactly
    ``module``'s entries, each a plain dense tensor with its shape and dtype. Reads only
    tensor attributes, so it allocates nothing and changes nothing."""
    if not isinstance(state_dict, Mapping):
        raise HNDLError("E_SCHEMA", f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}",
                        field="state_dict")
    _check_keys(state_dict)
    versions = _metadata_versions(state_dict)
    expected = module.state_dict(keep_vars=True)
    problems: list[tuple[str, str]] = []  # (key, description)
    for key in expected.keys() - state_dict.keys():
        problems.append((key, f"missing entry {key!r}"))
    for key in state_dict.keys() - expected.keys():
        problems.append((key, f"unexpected entry {key!r}"))
    for key in expected.keys() & state_dict.keys():
        want = expected[key]
        if not isinstance(want, torch.Tensor):
            continue  # extra state (get_extra_state) is the module's own business
        problem = _entry_problem(key, state_dict[key], want)
        if problem is not None:
            problems.append((key, problem))
    if not problems:
        return
    problems.sort()
    version = _version_drift(module, versions, [key for key, _ in problems])
    if version is not None:
        prefix, saved, current = version
        raise HNDLError(
            "E_STATE_VERSION",
            f"the state of {prefix or 'the module'!r} was written by module version {saved}, but this "
            f"implementation builds version {current} with another parameter layout: "
            + "; ".join(text for _, text in problems),
            node=_node_of(prefix + "."),
            chain=tuple(text for _, text in problems),
            remedies=("Install the operator implementation that wrote this state, or migrate the weights "
                      "explicitly with that implementation's documented conversion.",),
        )
    raise HNDLError(
        "E_INTEGRITY",
        f"the state dictionary does not match the plan ({len(problems)} problem(s)): "
        + "; ".join(text for _, text in problems[:8]) + ("; ..." if len(problems) > 8 else ""),
        node=_node_of(problems[0][0]),
        field=problems[0][0],
        chain=tuple(text for _, text in problems),
        remedies=_REMEDY_PAIR,
    )


# -- helpers -------------------------------------------------------------------------------------------
_STATE_REMEDY = ("Pass the mapping that module.state_dict() returned (or torch.load(path, weights_only=True) "
                 "of a file torch.save wrote from it), unmodified.",)


def _check_keys(state_dict: Mapping[Any, Any]) -> None:
    """E_SCHEMA for a key that is not a str: state dictionaries are keyed by dotted names."""
    for key in state_dict:
        if not isinstance(key, str):
            raise HNDLError(
                "E_SCHEMA", f"state dictionary key {key!r} is {type(key).__name__}, not a str: entries are keyed "
                "by dotted parameter and buffer names such as 'nodes.n_n0.weight'",
                field="state_dict", remedies=_STATE_REMEDY,
            )


def _metadata_versions(state_dict: Mapping[str, Any]) -> dict[str, int]:
    """``{module prefix: version}`` from ``state_dict._metadata`` (which torch writes as
    ``{prefix: {"version": int}}``); anything else there is E_SCHEMA."""
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise HNDLError("E_SCHEMA", f"state dictionary metadata is {type(metadata).__name__}, not a mapping",
                        field="state_dict._metadata", remedies=_STATE_REMEDY)
    versions = {}
    for prefix, entry in metadata.items():
        well_formed = isinstance(prefix, str) and isinstance(entry, Mapping)
        version = entry.get("version") if well_formed else None
        if not well_formed or ("version" in entry and (type(version) is not int or version < 1)):
            raise HNDLError(
                "E_SCHEMA", f"state dictionary metadata {prefix!r}: {entry!r} is not {{'version': positive int}}",
                field="state_dict._metadata", remedies=_STATE_REMEDY,
            )
        if version is not None:
            versions[prefix] = version
    return versions


def _entry_problem(key: str, got: Any, want: torch.Tensor) -> Optional[str]:
    """Why ``load_state_dict`` would not copy ``got`` into ``want`` as plain values, or None.

    Checked in an order that never calls a method on an unsupported kind of tensor (a nested
    tensor has no ``shape``); every test reads metadata only, never the values.
    """
    if not isinstance(got, torch.Tensor):
        return f"{key!r} is {type(got).__name__}, not a tensor"
    if type(got) not in (torch.Tensor, nn.Parameter, type(want)):
        return f"{key!r} is a {type(got).__qualname__}, a tensor subclass, not a plain tensor"
    if got.is_nested:
        return f"{key!r} is a nested tensor, not a dense one"
    if got.layout is not torch.strided:
        return f"{key!r} has layout {str(got.layout).removeprefix('torch.')}, not a dense (strided) tensor"
    if got.is_quantized:
        return f"{key!r} is a quantized tensor ({_dtype(got.dtype)})"
    if tuple(got.shape) != tuple(want.shape):
        return f"{key!r} has shape {list(got.shape)}, the plan builds {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{key!r} has dtype {_dtype(got.dtype)}, the plan builds {_dtype(want.dtype)} (nothing is cast silently)"
    if got.device.type == "meta":
        return f"{key!r} is a meta tensor and holds no values"
    return None


def _plan(saved: Any, registry: Registry, limits, checked) -> ResolvedPlan:
    if isinstance(saved, ResolvedPlan):
        from ..resolve.revalidate import revalidate

        revalidate(saved, registry, limits=checked)
        return saved
    if isinstance(saved, os.PathLike):
        return from_json(read_plan_file(_path_name(saved)), registry=registry, limits=limits)
    if isinstance(saved, (str, bytes, bytearray)):
        return from_json(saved, registry=registry, limits=limits)
    raise HNDLError(
        "E_SCHEMA",
        f"restore() needs plan JSON text, bytes, a path or a ResolvedPlan, got {type(saved).__name__}",
        field="saved",
    )


def _path_name(path: "os.PathLike") -> str:
    """The str a host's path object names; a path object that names nothing usable is E_SCHEMA."""
    try:
        return os.fsdecode(path)
    except (TypeError, ValueError, OSError) as error:  # ValueError covers UnicodeError
        raise HNDLError("E_SCHEMA", f"restore() could not read the path object {type(path).__name__}: {error}",
                        field="saved", remedies=("Pass a pathlib.Path or the plan JSON text.",)) from None


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _node_of(key: str) -> Optional[str]:
    """``nodes.n_<id>.weight`` -> ``<id>``."""
    if key.startswith("nodes.n_"):
        return key[len("nodes.n_"):].split(".", 1)[0]
    return None


def _version_drift(module: nn.Module, versions: Mapping[str, int], keys: list[str]):
    """(prefix, saved version, current version) of the innermost module owning a problem key
    whose saved version (``_metadata_versions``) differs from the built module's ``_version``;
    else None."""
    if not versions:
        return None
    current = {name: getattr(type(sub), "_version", 1) for name, sub in module.named_modules()}
    for key in keys:
        parts = key.split(".")[:-1]
        for end in range(len(parts), -1, -1):
            prefix = ".".join(parts[:end])
            if prefix not in current:
                continue
            saved = versions.get(prefix)
            if saved is not None and saved != current[prefix]:
                return prefix, saved, current[prefix]
    return None
