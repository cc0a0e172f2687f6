"""Whether ``nn.Module.__call__`` would run hooks around a module's forward.

``GraphModule.__call__`` skips ``nn.Module.__call__`` when it would only call ``forward``;
this module says when that is so. While dynamo traces, the answer comes from a probe that
dynamo evaluates once and treats as a constant, so a compiled HNDL module carries no hook
guards: exactly torch's own policy for ``torch.nn`` modules
(``torch._dynamo.config.skip_nnmodule_hook_guards``, on by default: hooks present when the
model is traced run; hooks added or removed afterwards are noticed only by a recompile). With
that setting off, the probe answers ``None`` and the hooks are checked in the traced code,
i.e. guarded.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn.modules.module import (  # torch mutates these dictionaries in place, never rebinds them
    _global_backward_hooks,
    _global_backward_pre_hooks,
    _global_forward_hooks,
    _global_forward_pre_hooks,
)

__all__ = ["hooks_registered", "hook_probe"]


def hooks_registered(module: nn.Module) -> bool:
    """True when ``nn.Module._call_impl`` would run a hook (module or global) around ``forward``."""
    return bool(
        module._forward_pre_hooks or module._forward_hooks or module._backward_pre_hooks or module._backward_hooks
        or _global_forward_pre_hooks or _global_forward_hooks or _global_backward_pre_hooks or _global_backward_hooks
    )


def hook_probe(module: nn.Module) -> Callable[[], Optional[bool]]:
    """A function that dynamo runs while tracing and folds into a constant (no guard).

    It answers ``hooks_registered(module)``, or ``None`` when torch is told to guard hooks
    (``skip_nnmodule_hook_guards`` off). The module is held weakly: the probe lives in the
    module's own ``__dict__``. All probes share one code object, so structurally identical
    modules can share one compiled entry.
    """
    reference = weakref.ref(module)

    def hooks_while_tracing() -> Optional[bool]:
        if not torch._dynamo.config.skip_nnmodule_hook_guards:
            return None
        return hooks_registered(reference())

    # What torch._dynamo.assume_constant_result does, without importing the compiler stack into every build.
    hooks_while_tracing._dynamo_marked_constant = True
    return hooks_while_tracing
