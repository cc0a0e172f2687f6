"""Submodule outputs by forward hook (§9 ``layer=``/``layers=``): one pass, stopped early.

A hook on each requested submodule records its output; once every requested submodule has
produced one, the pass is stopped by an exception the model cannot swallow with
``except Exception``. Captures are cloned (when asked), so an in-place operation later in the
pass can neither overwrite a captured value nor invalidate the autograd graph behind it. A
requested submodule that runs a second time before the pass stops is ambiguous and fails.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from .libraries import listing
from .sources import fail


class _PassStopped(BaseException):
    """Raised by the last hook to end the forward pass; never escapes :func:`capture`."""


def submodules(model: nn.Module, names: Sequence[str], label: str) -> dict[str, nn.Module]:
    """The named submodules (dotted ``named_modules()`` paths); an unknown one lists what exists."""
    available = dict(model.named_modules())
    available.pop("", None)
    unknown = [name for name in names if name not in available]
    if unknown:
        raise fail(f"{label} has no submodule {unknown[0]!r}; available submodules: {listing(available)}",
                   "Name a submodule by its dotted model.named_modules() path.",
                   field="layers" if len(names) > 1 else "layer")
    return {name: available[name] for name in names}


def capture(modules: dict[str, nn.Module], run: Callable[[], object], *, clone: bool, label: str) -> tuple:
    """Run ``run()`` once with a hook on each module and return their outputs in the given order."""
    captured: dict[str, torch.Tensor] = {}
    remaining = set(modules)

    def hook_for(name: str):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            if name in captured:
                raise fail(f"{label}: submodule {name!r} ran more than once before the pass stopped, so its "
                           "output is ambiguous", "Name a submodule that runs exactly once per forward pass.",
                           field="layers")
            if not isinstance(output, torch.Tensor):
                raise fail(f"{label}: submodule {name!r} returned {type(output).__name__}, not one tensor",
                           "Name a submodule whose forward returns a single tensor.", field="layers")
            captured[name] = output.clone() if clone else output
            remaining.discard(name)
            if not remaining:
                raise _PassStopped

        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in modules.items()]
    try:
        run()
    except _PassStopped:
        pass
    finally:
        for handle in handles:
            handle.remove()
    if remaining:
        missing = [name for name in modules if name in remaining]
        raise fail(f"{label}: submodule(s) {listing(missing)} did not run in the forward pass",
                   "Name submodules the model's forward actually calls.", field="layers")
    return tuple(captured[name] for name in modules)
