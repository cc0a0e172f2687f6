"""Watching the modules, parameters and buffers a construction registers, on this thread only.

PyTorch's registration hooks are global, so a bound that stops a constructor early (HNDL's
``max_node_modules``, a pretrained trace's state bound) must ignore other threads and must never
outlive its block. Raising from a callback stops the constructor at that registration.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
from torch.nn.modules import module as torch_module

__all__ = ["watching_registrations"]


@contextmanager
def watching_registrations(
    on_module: Optional[Callable[[str, torch.nn.Module], None]] = None,
    on_tensor: Optional[Callable[[str, torch.Tensor], None]] = None,
) -> Iterator[None]:
    """Call ``on_module(name, child)`` / ``on_tensor(name, tensor)`` for every submodule /
    parameter or buffer this thread registers while the block runs (``None`` entries skipped)."""
    owner = threading.get_ident()
    handles = []

    def mine(callback: Callable, kind: type) -> Callable:
        def hook(_parent: Any, name: str, value: Any) -> None:
            if isinstance(value, kind) and threading.get_ident() == owner:
                callback(name, value)
        return hook

    try:
        if on_module is not None:
            handles.append(torch_module.register_module_module_registration_hook(mine(on_module, torch.nn.Module)))
        if on_tensor is not None:
            hook = mine(on_tensor, torch.Tensor)
            handles.append(torch_module.register_module_parameter_registration_hook(hook))
            handles.append(torch_module.register_module_buffer_registration_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
