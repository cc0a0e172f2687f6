"""The edits PyTorch's own tools make to a built network's modules that HNDL accepts as the same node.

HNDL fixes every parameter, buffer and submodule at build (``hndl.torch.state_record``). A few
torch tools change those slots while keeping what the node computes, and a handwritten model
accepts them, so a built one must too:

* Reparametrizations of a declared tensor. ``torch.nn.utils.parametrize`` (behind
  ``parametrizations.spectral_norm``, ``weight_norm`` and ``orthogonal``) moves ``weight`` into
  ``module.parametrizations.weight``; ``torch.nn.utils.prune`` keeps ``weight_orig`` and a
  ``weight_mask`` buffer and recomputes ``weight`` in a forward pre-hook; the older hook-based
  ``torch.nn.utils.spectral_norm`` / ``weight_norm`` keep ``weight_orig`` with ``weight_u`` /
  ``weight_v`` buffers, or ``weight_g`` / ``weight_v``. ``tolerance`` names, for one module, the
  declared tensors such a tool took over and the slots it added.
* Conversions of a whole node: torch.ao's ``convert`` (behind ``quantize_dynamic``) replaces a
  float layer by its quantized counterpart, which names the float classes it converts in
  ``_FLOAT_MODULE``. ``converted_from`` recognizes that replacement.

Anything else (a node replaced by an unrelated module, a tensor deleted, state grafted on)
stays a difference from the build and is reported.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from torch import nn
from torch.nn.utils import prune
from torch.nn.utils.parametrize import ParametrizationList, type_before_parametrizations
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm

__all__ = ["Tolerance", "tolerance", "converted_from"]


class Tolerance(NamedTuple):
    """Slots of one module that torch's reparametrizations account for."""

    taken: frozenset  #: declared tensors now computed by a reparametrization (absent as slots)
    parameters: frozenset  #: parameters the reparametrizations added
    buffers: frozenset  #: buffers they added
    children: frozenset  #: submodules they added


def tolerance(module: nn.Module) -> Optional[Tolerance]:
    """What torch's reparametrizations changed on ``module``, or None when it has none."""
    taken: set[str] = set()
    parameters: set[str] = set()
    buffers: set[str] = set()
    children: set[str] = set()
    container = module._modules.get("parametrizations")
    if isinstance(container, nn.ModuleDict) and all(
        isinstance(entry, ParametrizationList) for entry in container._modules.values()
    ):
        taken.update(container._modules)
        children.add("parametrizations")
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, prune.BasePruningMethod):
            name = hook._tensor_name
            taken.add(name)
            parameters.add(f"{name}_orig")
            buffers.add(f"{name}_mask")
        elif isinstance(hook, SpectralNorm):
            taken.add(hook.name)
            parameters.add(f"{hook.name}_orig")
            buffers.update((f"{hook.name}_u", f"{hook.name}_v"))
        elif isinstance(hook, WeightNorm):
            taken.add(hook.name)
            parameters.update((f"{hook.name}_g", f"{hook.name}_v"))
    if not taken:
        return None
    return Tolerance(frozenset(taken), frozenset(parameters), frozenset(buffers), frozenset(children))


def converted_from(original: nn.Module, replacement: object) -> bool:
    """Whether ``replacement`` is torch.ao's conversion of ``original`` (a quantized counterpart)."""
    if not isinstance(replacement, nn.Module) or not type(replacement).__module__.startswith("torch.ao."):
        return False
    floats = getattr(type(replacement), "_FLOAT_MODULE", None)
    if floats is None:
        return False
    floats = floats if isinstance(floats, tuple) else (floats,)
    return type_before_parametrizations(original) in floats
