"""Output shapes by tracing on PyTorch's meta device (§9, the documented exception to invariant 3).

The architecture is constructed under ``torch.device("meta")`` and run on an empty meta input
of the declared shape: no weights are read, no storage is allocated, and since meta tensors
have no values no random number is drawn. Results are cached, because the relation runs on
every solver sweep; the key covers everything the trace depends on, including the identity of
a provider's builder and readout.

Meta construction is bounded while it runs (:func:`bounded_construction`): a configuration
asking for thousands of layers stops with E_RESOURCE at the first submodule past
``max_node_modules``, or the first parameter or buffer past ``max_state_bytes``, of the
limits in force, instead of building every layer first. ``MemoryError`` and E_RESOURCE always
propagate; they never become a "cannot be traced" diagnostic. The same count measures an
architecture's state (:func:`measure_state`), which bounds the size of its weight files before
they are hashed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from hndl import HNDLError
from hndl.limits import active_limits

from .sources import BoundedCache, StateSize, fail

#: The batch extent of a trace input (any fixed positive number; axis 0 is the node's batch).
TRACE_BATCH = 2
FLOATING = ("float32", "float16", "bfloat16")
_INTEGER = {"int64": torch.int64, "int32": torch.int32}
_TRACES = BoundedCache(128)


def trace_outputs(
    factory: Callable[[], nn.Module],
    key: Any,
    input_shape: tuple[int, ...],
    input_dtype: str,
    *,
    label: str,
    provider: bool,
) -> tuple[tuple[int, ...], ...]:
    """Non-batch output shapes of the module ``factory()`` builds, run on a meta input.

    ``input_shape`` excludes the batch. Floating inputs are traced in float32 (shapes do not
    depend on the floating dtype); integer ids keep their dtype.
    """
    dtype = _INTEGER.get(input_dtype, torch.float32)
    return _TRACES.get((key, tuple(input_shape), dtype),
                       lambda: _trace(factory, input_shape, dtype, label=label, provider=provider))


def _trace(factory, input_shape, dtype, *, label: str, provider: bool) -> tuple[tuple[int, ...], ...]:
    shape = (TRACE_BATCH, *input_shape)
    try:
        with torch.device("meta"), torch.no_grad():
            module = factory()
            result = module(torch.empty(shape, dtype=dtype))
    except (HNDLError, MemoryError):
        raise
    except NotImplementedError as error:
        raise fail(f"{label} cannot run on the meta device, so its output shape cannot be traced: {error}") from None
    except Exception as error:
        if provider:
            # A provider fixes no input contract: the trace is what validates the declared shape.
            raise HNDLError(
                "E_CONSTRAINT",
                f"{label} rejects an input of shape [B, {', '.join(map(str, input_shape))}]: "
                f"{type(error).__name__}: {error}",
                remedies=("Declare the input shape the provider's model takes.",),
            ) from None
        raise fail(f"tracing {label} on the meta device failed: {type(error).__name__}: {error}") from None
    outputs = result if isinstance(result, tuple) else (result,)
    shapes = []
    for index, value in enumerate(outputs):
        what = f"{label} output {index}" if len(outputs) > 1 else f"{label} output"
        if not isinstance(value, torch.Tensor):
            raise fail(f"{what} is {type(value).__name__}, not one tensor")
        if not value.is_floating_point():
            raise fail(f"{what} has dtype {str(value.dtype).removeprefix('torch.')}; the node's ports carry "
                       "the floating compute dtype")
        if not 2 <= value.dim() <= 4:
            raise fail(f"{what} has rank {value.dim()} (shape {list(value.shape)}); HNDL ports have rank 2, 3 or 4",
                       "Select an output of rank 2 to 4 with output=, layer= or a readout.")
        if value.shape[0] != TRACE_BATCH:
            raise fail(f"{what} has shape {list(value.shape)}: axis 0 is not the batch "
                       f"(a batch of {TRACE_BATCH} went in)")
        shapes.append(tuple(int(extent) for extent in value.shape[1:]))
    return tuple(shapes)


def freeze_key(args: Mapping[str, Any]) -> tuple:
    """A hashable form of normalized arguments (tuples stay tuples)."""
    return tuple(sorted(args.items()))


def measure_state(construct: Callable[[], Any], label: str) -> StateSize:
    """The parameter and buffer bytes and tensors ``construct()`` registers on the meta device.

    Everything registered counts, including a tower the adapter drops afterwards, so the size
    bounds whole checkpoints. Construction is bounded as :func:`bounded_construction` describes.
    """
    try:
        with torch.device("meta"), torch.no_grad(), bounded_construction(label) as tally:
            construct()
    except (HNDLError, MemoryError):
        raise
    except Exception as error:
        raise fail(f"{label} cannot be built on the meta device, so the size of its weights cannot be bounded: "
                   f"{type(error).__name__}: {error}") from None
    return StateSize(state_bytes=tally.state_bytes, tensors=len(tally.tensors))


@dataclass
class Tally:
    """What a :func:`bounded_construction` block registered so far (distinct tensors, kept alive so
    that an id is never reused while counting)."""

    modules: int = 0
    state_bytes: int = 0
    tensors: dict = field(default_factory=dict)


@contextmanager
def bounded_construction(label: str) -> Iterator[Tally]:
    """Stop a module construction in this thread as soon as it registers more submodules than
    ``max_node_modules``, or more parameter and buffer bytes than ``max_state_bytes``.

    Only this thread's registrations count (``hndl.torch.registrations``), and the hooks go when
    the block exits. Counts are upper bounds: a tensor registered under two names is counted
    once, a module twice. The block receives the running :class:`Tally`.
    """
    limits = active_limits()
    module_limit, byte_limit = limits["max_node_modules"], limits["max_state_bytes"]
    tally = Tally()

    def on_module(name: str, child: nn.Module) -> None:
        tally.modules += 1
        if tally.modules > module_limit:
            raise HNDLError(
                "E_RESOURCE",
                f"{label} creates more than max_node_modules={module_limit} submodules (stopped at submodule "
                f"{tally.modules}, {type(child).__name__} {name!r}); its configuration asks for too large a model",
                remedies=("Use a smaller checkpoint, or raise limits['max_node_modules'] explicitly.",),
            )

    def on_tensor(name: str, tensor: torch.Tensor) -> None:
        if id(tensor) in tally.tensors:
            return
        tally.tensors[id(tensor)] = tensor
        tally.state_bytes += tensor.numel() * tensor.element_size()
        if tally.state_bytes > byte_limit:
            raise HNDLError(
                "E_RESOURCE",
                f"{label} registers more than max_state_bytes={byte_limit} bytes of parameters and buffers "
                f"(at least {tally.state_bytes}, reached at {name!r}); its configuration asks for too large a model",
                remedies=("Use a smaller checkpoint, or raise limits['max_state_bytes'] explicitly.",),
            )

    # Imported here, not at module level: loading the pack (every `hndl` command does) must not
    # import hndl.torch's builder, only a trace that constructs an architecture needs it.
    from hndl.torch.registrations import watching_registrations

    with watching_registrations(on_module=on_module, on_tensor=on_tensor):
        yield tally
