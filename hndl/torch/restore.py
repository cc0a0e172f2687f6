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
   kind (a dense, strided, unquantized plain tensor or Parameter with data; quantized only
   where the module holds a quantized tensor with the same scheme), shape and dtype is
   compared with the built module's ``state_dict()`` (a quantized layer's packed weights by
   what they unpack to: each weight and bias, and the packed dtype), and *all* differences are
   reported before anything is loaded, so a refused state leaves a live module exactly as it
   was. A module whose own loader reads its saved version (quantized layers, batch norm) must
   be saved at the version it is built at: its entries were checked against that layout;
4. ``load_state_dict(strict=True)``, which copies values in place (devices may differ;
   dtypes may not). It sees only the entries and module versions: the state's own where its
   metadata names one, else the version each module builds (a plain dict without metadata
   is read in the layout it was checked against, not as the oldest layout torch knows). A
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
  implementation builds, and that node's entries do not fit, or that module's loader reads
  the version (the entries fit the built layout, so the metadata contradicts them). The
  operator's semantic version is what carries parameter layout (§10), so this means the
  implementation that wrote the state is not the one available now.

The module returned is in training mode, like every built module; loading never changes
``requires_grad`` (trainability lives in the plan, not in the state dictionary).

Calling convention (issue 30 item 8). A restored model is called exactly like the model that
was saved. By default (``like="network"``) ``restore`` returns the §7 facade that ``network()``,
``network_file()`` and ``network_from_callable()`` return (``hndl.torch.network.Network``):
inputs by position (declaration order), keyword or both; a bare tensor for one public output,
``{output name: tensor}`` for several. So a training loop written against ``network()``
(``loss = criterion(model(x), y)``) runs unchanged after reloading. ``like="build"`` returns
what ``build(plan)`` returns instead (a ``GraphModule``: ``forward(**inputs)`` gives the
dictionary of public outputs, §7's dictionary form), for a model that was built with
``build``. Both forms hold the same modules under the same ``nodes.n_<id>`` names, so either
loads the other's state dictionary. Before issue 30, ``restore`` always returned the
dictionary form; callers that index the result of a single-output model
(``restored(x=x)["output"]``) pass ``like="build"`` or drop the ``["output"]``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Mapping, Optional

import torch
from torch import nn

from ..errors import MAX_LISTED, HNDLError, echo, shown
from ..limits import validate_limits
from ..persist import from_json, read_plan_file
from ..plan import ResolvedPlan
from ..registry import Registry
from .build import build, construct
from .network import Network

if TYPE_CHECKING:
    from .graph_module import GraphModule

__all__ = ["restore", "load_state", "check_state", "RESTORE_FORMS"]

#: The calling conventions ``restore(..., like=...)`` can give the rebuilt model: that of
#: ``network()`` (the default) or that of ``build(plan)``.
RESTORE_FORMS = ("network", "build")

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
    like: str = "network",
) -> "GraphModule":
    """Rebuild a saved plan on ``device`` and, when given, load ``state_dict`` into it.

    ``saved`` is plan JSON text or bytes (as written by ``plan.to_json()``), an
    ``os.PathLike`` naming such a file (read bounded at 16 MiB), or a ``ResolvedPlan``. A
    plain ``str`` is always JSON text, never a path. Every state entry is checked before
    any is loaded; see the module docstring for the error codes. The module returned is in
    training mode and is called like the model that was saved:

    * ``like="network"`` (the default): the ``Network`` that ``network()`` returns, called
      ``model(x)`` (inputs by position or keyword), returning a tensor for one public output
      and ``{name: tensor}`` for several;
    * ``like="build"``: the ``GraphModule`` that ``build(plan)`` returns, called
      ``model(x=x)``, returning the dictionary of public outputs.

    Any other ``like`` is E_ARGUMENT, raised before the plan is read.
    """
    module_class = _module_class(like)
    registry = Registry.builtins() if registry is None else registry
    checked = validate_limits(limits)
    plan = _plan(saved, registry, limits, checked)
    if state_dict is not None and not isinstance(state_dict, Mapping):
        raise HNDLError("E_SCHEMA", f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}",
                        field="state_dict")
    if state_dict is not None and _is_meta(device):
        raise HNDLError(
            "E_ARGUMENT", "a state dictionary cannot be loaded on the meta device, which holds no values",
            field="device",
            remedies=("Restore without state_dict on meta, then model.to_empty(device=...) and "
                      "hndl.torch.load_state(model, state_dict); or restore on the device that holds the values.",))
    if module_class is None:
        module = build(plan, device=device, initialization_seed=initialization_seed, registry=registry, limits=limits)
    else:
        module = construct(plan, module_class, device=device, initialization_seed=initialization_seed,
                           registry=registry, limits=limits)
    if state_dict is not None:
        load_state(module, state_dict)
    return module


def _is_meta(device: Any) -> bool:
    """Whether ``device`` names the meta device (anything unparsable is left to the build's check)."""
    try:
        return torch.device(device).type == "meta"
    except (RuntimeError, TypeError):
        return False


def _module_class(like: Any) -> Optional[type]:
    """The facade class ``restore(..., like=like)`` builds (None: ``build``'s own GraphModule);
    E_ARGUMENT, naming both forms, for anything else."""
    if isinstance(like, str) and like == "network":
        return Network
    if isinstance(like, str) and like == "build":
        return None
    raise HNDLError(
        "E_ARGUMENT",
        f"restore(like=...) must be one of {', '.join(map(repr, RESTORE_FORMS))}, got {shown(like)}",
        field="like",
        remedies=("Pass like=\"network\" (the default) for a model called like network()'s: model(x) returns a "
                  "tensor for one output; or like=\"build\" for a model called like build(plan)'s: model(x=x) "
                  "returns the dictionary of outputs.",),
    )


def load_state(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Check every entry of ``state_dict`` against ``module`` (``check_state``), then load it
    strictly. Nothing is loaded unless everything fits.

    torch receives a shallow copy holding the same tensors and only module versions as
    metadata (``_loading_versions``), so nothing in the data chooses how the state is loaded.
    """
    check_state(module, state_dict)
    entries = OrderedDict(state_dict)
    versions = _loading_versions(module, _metadata_versions(state_dict))
    entries._metadata = OrderedDict((prefix, {"version": version}) for prefix, version in versions.items())
    module.load_state_dict(entries, strict=True)


def check_state(module: nn.Module, state_dict: Mapping[str, Any]) -> None:
    """Raise E_SCHEMA, E_STATE_VERSION or E_INTEGRITY unless ``state_dict`` has exactly
    ``module``'s entries, each a plain dense tensor with its shape and dtype (a quantized
    layer's packed weights: what they unpack to), and a version every module's own loader
    reads in that layout. Reads metadata only: it allocates nothing beyond what the module's
    own ``state_dict()`` does and changes nothing."""
    if not isinstance(state_dict, Mapping):
        raise HNDLError("E_SCHEMA", f"state_dict must be a mapping of names to tensors, got {type(state_dict).__name__}",
                        field="state_dict")
    _check_keys(state_dict)
    versions = _metadata_versions(state_dict)
    expected = module.state_dict(keep_vars=True)
    problems = _problems(expected, state_dict)
    if problems:
        _refuse(module, versions, expected, problems)
    _check_loader_versions(module, versions)


# -- helpers -------------------------------------------------------------------------------------------
#: The most problems a message spells out; the chain holds up to MAX_LISTED, then counts the rest.
_SUMMARIZED = 8
#: The key suffix torch gives a module's ``get_extra_state()`` value.
_EXTRA_STATE = "_extra_state"


def _problems(expected: Mapping[str, Any], state_dict: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(key, saved value)`` for every missing, unexpected or unfitting entry, sorted by key;
    described (``_described``) only when shown, so a flood of hostile keys costs one pass."""
    problems: list[tuple[str, Any]] = [(key, _MISSING) for key in expected.keys() - state_dict.keys()]
    problems += [(key, _UNEXPECTED) for key in state_dict.keys() - expected.keys()]
    for key in expected.keys() & state_dict.keys():
        if _entry_problem(key, state_dict[key], expected[key]) is not None:
            problems.append((key, state_dict[key]))
    problems.sort(key=itemgetter(0))
    return problems


def _described(problems: list[tuple[str, Any]], expected: Mapping[str, Any], limit: int) -> list[str]:
    """What is wrong with each of the first ``limit`` problems, each key shown bounded."""
    texts = []
    for key, got in problems[:limit]:
        if got is _MISSING:
            texts.append(f"missing entry {_label(key)}")
        elif got is _UNEXPECTED:
            texts.append(f"unexpected entry {_label(key)}")
        else:
            texts.append(_label(key) + _entry_problem(key, got, expected[key]))
    return texts


def _refuse(module: nn.Module, versions: Mapping[str, int], expected: Mapping[str, Any],
            problems: list[tuple[str, Any]]) -> None:
    """E_STATE_VERSION when a problem entry's module was saved at another version, else E_INTEGRITY;
    the message spells out the first few problems and the chain up to MAX_LISTED, then counts."""
    texts = _described(problems, expected, MAX_LISTED)
    more = len(problems) - len(texts)
    chain = tuple(texts) + ((f"... and {more} more problem(s)",) if more else ())
    summary = "; ".join(texts[:_SUMMARIZED]) + (f"; ... and {len(problems) - _SUMMARIZED} more"
                                                if len(problems) > _SUMMARIZED else "")
    version = _version_drift(module, versions, [key for key, _ in problems])
    if version is not None:
        prefix, saved, current = version
        raise HNDLError(
            "E_STATE_VERSION",
            f"the state of {shown(prefix or 'the module')} was written by module version {saved}, but this "
            f"implementation builds version {current} with another parameter layout: {summary}",
            node=_node_of(prefix + "."),
            chain=chain,
            remedies=("Install the operator implementation that wrote this state, or migrate the weights "
                      "explicitly with that implementation's documented conversion.",),
        )
    raise HNDLError(
        "E_INTEGRITY",
        f"the state dictionary does not match the plan ({len(problems)} problem(s)): {summary}",
        node=_node_of(problems[0][0]),
        field=problems[0][0],
        chain=chain,
        remedies=_REMEDY_PAIR,
    )


#: Stand-ins for the saved value in a problem list: the entry is missing, or not expected.
_MISSING = object()
_UNEXPECTED = object()


def _label(key: str) -> str:
    """A state key as messages quote it: escaped and bounded."""
    return f"'{echo(key)}'"


_STATE_REMEDY = ("Pass the mapping that module.state_dict() returned (or torch.load(path, weights_only=True) "
                 "of a file torch.save wrote from it), unmodified.",)


def _check_keys(state_dict: Mapping[Any, Any]) -> None:
    """E_SCHEMA for a key that is not a str: state dictionaries are keyed by dotted names."""
    for key in state_dict:
        if not isinstance(key, str):
            raise HNDLError(
                "E_SCHEMA", f"state dictionary key {shown(key)} is {type(key).__name__}, not a str: entries are keyed "
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
                "E_SCHEMA", f"state dictionary metadata {shown(prefix)}: {shown(entry)} is not "
                "{'version': positive int}",
                field="state_dict._metadata", remedies=_STATE_REMEDY,
            )
        if version is not None:
            versions[prefix] = version
    return versions


def _entry_problem(key: str, got: Any, want: Any) -> Optional[str]:
    """Why ``load_state_dict`` would not load ``got`` where the module holds ``want`` under
    ``key``, or None: the description that follows the quoted key (" has shape [3], ...").

    A tensor is compared as ``_tensor_problem`` does; any other value a module saves (a
    quantized layer's packed weights, its dtype) item by item (``_value_problem``), except
    extra state, which is the module's own business. The key is not formatted here: the
    check runs for every entry, the description only for the few a message shows.
    """
    if isinstance(want, torch.Tensor):
        return _tensor_problem("", got, want)
    if key.endswith(_EXTRA_STATE):
        return None
    return _value_problem("", got, want)


def _value_problem(where: str, got: Any, want: Any) -> Optional[str]:
    """Why ``got`` is not the same kind of value as ``want``: tuples and lists item by item
    (what a packed weight unpacks to), tensors by kind, shape and dtype, a dtype by equality,
    anything else by type. ``where`` is the item's index path ("[0]"), the description's
    start; ``want`` comes from the module, so the recursion is only as deep as its value."""
    if isinstance(want, torch.Tensor):
        return _tensor_problem(where, got, want)
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"{where} is {_kind(got)}, the plan builds a sequence of {len(want)}"
        for index, (got_item, want_item) in enumerate(zip(got, want)):
            problem = _value_problem(f"{where}[{index}]", got_item, want_item)
            if problem is not None:
                return problem
        return None
    if isinstance(want, torch.dtype):
        return None if got == want else f"{where} is {_kind(got)}, the plan builds {_dtype(want)}"
    if type(got) is not type(want):
        return f"{where} is {_kind(got)}, the plan builds {_kind(want)}"
    return None


def _kind(value: Any) -> str:
    """A saved value named briefly for a message: its dtype, its length or its type."""
    if isinstance(value, torch.dtype):
        return _dtype(value)
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else type(value).__name__


def _tensor_problem(where: str, got: Any, want: torch.Tensor) -> Optional[str]:
    """Why ``load_state_dict`` would not copy ``got`` into ``want`` as values, or None.

    A quantized tensor fits only where the module holds one with the same quantization scheme.
    Checked in an order that never calls a method on an unsupported kind of tensor (a nested
    tensor has no ``shape``); every test reads metadata only, never the values.
    """
    if not isinstance(got, torch.Tensor):
        return f"{where} is {type(got).__name__}, not a tensor"
    if type(got) not in (torch.Tensor, nn.Parameter, type(want)):
        return f"{where} is a {type(got).__qualname__}, a tensor subclass, not a plain tensor"
    if got.is_nested:
        return f"{where} is a nested tensor, not a dense one"
    if got.layout is not torch.strided:
        return f"{where} has layout {str(got.layout).removeprefix('torch.')}, not a dense (strided) tensor"
    if got.is_quantized and not want.is_quantized:
        return f"{where} is a quantized tensor ({_dtype(got.dtype)})"
    if want.is_quantized and not got.is_quantized:
        return f"{where} is a plain tensor, the plan builds a quantized one ({_dtype(want.dtype)})"
    if tuple(got.shape) != tuple(want.shape):
        return f"{where} has shape {list(got.shape)}, the plan builds {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{where} has dtype {_dtype(got.dtype)}, the plan builds {_dtype(want.dtype)} (nothing is cast silently)"
    if want.is_quantized and _quantization(got) != _quantization(want):
        return (f"{where} is quantized {_quantization(got)}, the plan builds {_quantization(want)}")
    if got.device.type == "meta":
        return f"{where} is a meta tensor and holds no values"
    return None


def _quantization(tensor: torch.Tensor) -> str:
    """A quantized tensor's scheme, with its channel axis where it has one."""
    scheme = str(tensor.qscheme()).removeprefix("torch.")
    if tensor.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric,
                            torch.per_channel_affine_float_qparams):
        return f"{scheme} on axis {tensor.q_per_channel_axis()}"
    return scheme


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
    current = _built_versions(module)
    longest = max(map(len, current))
    for key in keys:
        for prefix in _module_prefixes(key, current, longest):
            saved = versions.get(prefix)
            if saved is not None and saved != current[prefix]:
                return prefix, saved, current[prefix]
    return None


def _module_prefixes(key: str, names: Mapping[str, Any], longest: int) -> list[str]:
    """The dotted prefixes of ``key`` that name a module, innermost first, the root last.

    Only the first ``longest`` characters can hold a module name, so a hostile key of a
    million dots costs one bounded scan, not a join per dot.
    """
    head = key[:longest + 1]
    ends = [index for index, character in enumerate(head) if character == "."]
    return [prefix for prefix in (*(key[:end] for end in reversed(ends)), "") if prefix in names]


def _built_versions(module: nn.Module) -> dict[str, int]:
    """``{module prefix: version}`` for every module under ``module``: the ``_version`` its class builds."""
    return {name: getattr(type(sub), "_version", 1) for name, sub in module.named_modules()}


def _loading_versions(module: nn.Module, versions: Mapping[str, int]) -> dict[str, int]:
    """The module versions torch's loaders are given: the state's own where it names one,
    else the version the module builds, whose layout ``check_state`` compared the entries with.

    A state without metadata (a plain dict) would otherwise read as version None, which
    versioned loaders take for their oldest layout (a quantized linear layer then looks for
    ``weight`` and ``bias`` entries the current layout does not have).
    """
    return {name: versions.get(name, current) for name, current in _built_versions(module).items()}


def _check_loader_versions(module: nn.Module, versions: Mapping[str, int]) -> None:
    """E_STATE_VERSION, before anything loads, where the state names a version other than the
    built one for a module that reads its version when loading (its own ``_load_from_state_dict``
    or a load pre-hook): the entries fit the built layout, so that loader would take them for
    another layout and fail partway through the load, or misread them."""
    if not versions:
        return
    for name, sub in module.named_modules():
        saved, current = versions.get(name), getattr(type(sub), "_version", 1)
        if saved is None or saved == current or not _reads_its_version(sub):
            continue
        raise HNDLError(
            "E_STATE_VERSION",
            f"the state's metadata says {shown(name or 'the module')} was written by module version {saved}, but its "
            f"entries have the layout of version {current}, which this implementation builds; "
            f"{type(sub).__qualname__} reads version {saved} states in another layout, so they cannot be loaded",
            node=_node_of(name + "."),
            field="state_dict._metadata",
            remedies=("Pass the state dictionary exactly as module.state_dict() returned it, metadata included; "
                      "if its entries were written by this implementation, drop the stale "
                      f"state_dict._metadata[{shown(name)}] entry.",),
        )


def _reads_its_version(module: nn.Module) -> bool:
    """Whether loading ``module`` depends on the saved version: its class has its own loader or
    it has load pre-hooks (``nn.Module``'s own loader reads no version)."""
    return (type(module)._load_from_state_dict is not nn.Module._load_from_state_dict
            or bool(module._load_state_dict_pre_hooks))
