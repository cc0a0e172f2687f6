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
3. the state: every entry's name, shape and dtype is compared with the built module's
   ``state_dict()`` and *all* differences are reported before anything is loaded;
4. ``load_state_dict(strict=True)``, which copies values in place (devices may differ;
   dtypes may not). Operators that cache derived tensors refresh them through their own
   load hooks (§11: "manage derived caches correctly after state loading/device moves").

Error codes for a state dictionary that does not fit (one rule, stated once):

* **E_INTEGRITY** — the state does not match the plan it is paired with: a missing or an
  unexpected entry, a shape or dtype different from the rebuilt module, a value that is not
  a tensor, or a tensor without data (meta). This is the §12 "inconsistent contents" case,
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
    strictly. Nothing is loaded unless everything fits."""
    check_state(module, state_dict)
    module.load_state_dict(state_dict, strict=True)


def check_state(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Raise E_STATE_VERSION or E_INTEGRITY unless ``state_dict`` has exactly ``module``'s
    entries with its shapes and dtypes. Allocates nothing and changes nothing."""
    if not isinstance(state_dict, Mapping):
        raise HNDLError("E_SCHEMA", f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}",
                        field="state_dict")
    expected = module.state_dict(keep_vars=True)
    problems: list[tuple[str, str]] = []  # (key, description)
    for key in expected.keys() - state_dict.keys():
        problems.append((key, f"missing entry {key!r}"))
    for key in state_dict.keys() - expected.keys():
        problems.append((key, f"unexpected entry {key!r}"))
    for key in expected.keys() & state_dict.keys():
        want, got = expected[key], state_dict[key]
        if not isinstance(want, torch.Tensor):
            continue  # extra state (get_extra_state) is the module's own business
        if not isinstance(got, torch.Tensor):
            problems.append((key, f"{key!r} is {type(got).__name__}, not a tensor"))
            continue
        if tuple(got.shape) != tuple(want.shape):
            problems.append((key, f"{key!r} has shape {list(got.shape)}, the plan builds {list(want.shape)}"))
        elif got.dtype != want.dtype:
            problems.append((key, f"{key!r} has dtype {_dtype(got.dtype)}, the plan builds {_dtype(want.dtype)} "
                                  "(nothing is cast silently)"))
        elif got.device.type == "meta":
            problems.append((key, f"{key!r} is a meta tensor and holds no values"))
    if not problems:
        return
    problems.sort()
    version = _version_drift(module, state_dict, [key for key, _ in problems])
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
    except (TypeError, UnicodeError) as error:
        raise HNDLError("E_SCHEMA", f"restore() could not read the path object {type(path).__name__}: {error}",
                        field="saved", remedies=("Pass a pathlib.Path or the plan JSON text.",)) from None


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _node_of(key: str) -> Optional[str]:
    """``nodes.n_<id>.weight`` -> ``<id>``."""
    if key.startswith("nodes.n_"):
        return key[len("nodes.n_"):].split(".", 1)[0]
    return None


def _version_drift(module: nn.Module, state_dict: Mapping[str, Any], keys: list[str]):
    """(prefix, saved version, current version) of the innermost module owning a problem key
    whose saved version metadata differs from the built module's ``_version``; else None."""
    metadata = getattr(state_dict, "_metadata", None)
    if not isinstance(metadata, Mapping):
        return None
    current = {name: getattr(type(sub), "_version", 1) for name, sub in module.named_modules()}
    for key in keys:
        parts = key.split(".")[:-1]
        for end in range(len(parts), -1, -1):
            prefix = ".".join(parts[:end])
            if prefix not in current:
                continue
            saved = metadata.get(prefix, {})
            saved = saved.get("version") if isinstance(saved, Mapping) else None
            if saved is not None and saved != current[prefix]:
                return prefix, saved, current[prefix]
    return None
