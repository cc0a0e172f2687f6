"""GraphModule: an ordinary torch module whose forward is a straight-line program over nodes.

Modules register once under ``nodes.n_<id>``; ``forward(**inputs)`` returns a dictionary keyed
by the public output names. The §7 facade ``Network`` (hndl.torch.network) builds on it.

Runtime validation is done once per input signature (SPEC.md §11, the runtime-validation
design):

* The signature of a call is every external input's ``(shape, dtype, device)``, the module's
  ``training`` flag and the autocast state. The first call for a signature runs the *checked
  program*: every port's shape (``k*B`` entries against this call's batch), dtype and device
  before and after its node, then the registered-state check. Up to 64 validated signatures
  are remembered per module; the 65th clears them.
* Later calls with a remembered signature build the signature tuple, look it up, run a
  generated straight-line function that calls each bound module directly (``r0 = m0(a0)``,
  registers reused once a value is dead, so intermediates are freed as early as in
  ``nn.Sequential``) and check one flag that the registration hooks set. ``__call__`` goes
  straight to ``forward`` when ``nn.Module.__call__`` would do nothing else (no hooks, no JIT
  tracing), and a positional call under ``torch.compile`` traces a positional copy of the
  checked program, so neither path pays for a layer a handwritten module does not have.
* ``_apply`` (``.to()``, ``.cuda()``, ``.double()``, ...) on this module clears the
  signatures, so the next call runs the checked program and the registered-state check
  (moves replace tensors but never add or remove a registration). Any parameter / buffer /
  submodule registration on a module of the graph (torch's global registration hooks,
  installed by ``state_watch``) clears the signatures too and marks the state as changed; a
  registration during a call that used a remembered signature is checked at the end of that
  call. ``deepcopy`` gives the clone a fresh cache and watches the clone's modules.
  ``load_state_dict`` needs nothing (it copies in place; ``assign=True`` assigns, so the
  hooks fire). ``.to()`` on a single node module bypasses this module's ``_apply``: a dtype
  or device it changes is caught where a later node raises, not before.
* Known gap: PyTorch runs no hook for ``del module.x``, ``module.param = None`` or writes
  straight into ``_parameters`` / ``_buffers`` / ``_modules``. After a signature has been
  validated these are reported at the next full check (a new signature, ``.to()``, any hooked
  registration) or as soon as a node raises (the failure path re-runs the state check). The
  only silent case is ``param = None`` on a module that tolerates it (``linear.bias = None``
  runs bias-free until the next revalidation).
* Under ``torch.compiler.is_compiling()`` forward traces the checked program without the
  cache. It is generated as straight-line code with every contract written as literals, so
  dynamo evaluates the port checks once while tracing and guards only what a handwritten
  module needs; the registered-state walk is traced only while a registration hook has marked
  the state as changed (one guard on that flag). A check that fails while tracing raises its
  HNDLError from a ``torch.compiler.disable``-d call, i.e. outside the graph; under
  ``fullgraph=True`` dynamo reports that call instead, with a reason naming HNDL.

Errors: HNDL's own checks raise ``HNDLError`` (``E_BINDING`` for the input names, ``E_RUNTIME``
for contracts and registered state). An exception raised inside a node propagates unchanged
(type, message, traceback) and gains exactly one note naming the node, its operator and source
line, the node's inputs against their contracts, and the registered-state difference if any;
through nested graphs only the innermost note is kept. The note is built only when something
has already failed.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Optional

import torch
from torch import nn
from torch.nn.modules import module as _hooks

from ..contracts import batch_multiple
from ..declaration import spec_of
from ..errors import HNDLError
from ..plan import ResolvedPlan, shape_table
from . import state_watch

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
DTYPE_NAMES = {value: key for key, value in TORCH_DTYPES.items()}

#: Validated signatures remembered per module; one more clears them all.
MAX_SIGNATURES = 64
NOTE_PREFIX = "HNDL: raised inside node"
STATE_REMEDY = (
    "HNDL fixes every parameter, buffer and submodule when it builds a plan, so state added or "
    "removed later is not trained, seeded or saved as the plan describes; create it in __init__, "
    "or resolve and build a new plan to change the architecture"
)
CONTRACT_REMEDY = "Call the module with tensors matching the plan's contracts."

_is_compiling = torch.compiler.is_compiling
_tracing_state = torch._C._get_tracing_state
_module_call = nn.Module.__call__
#: The fast paths' check: a plain ``return False`` that dynamo folds to True while tracing (a
#: third of ``is_compiling``'s cost); the slow paths still ask ``is_compiling`` (export too).
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_any_autocast = torch._C._is_any_autocast_enabled


def _call_outside_graph(graph: Any, method: str, *args: Any) -> Any:
    """Run ``graph.<method>(*args)`` eagerly, never traced: the failure paths of the traced program."""
    return getattr(graph, method)(*args)


_outside_graph = torch.compiler.disable(
    _call_outside_graph,
    reason=(
        "HNDL: a contract or registered-state check failed while tracing; its HNDLError is raised "
        "outside the graph (compile without fullgraph=True, or call the model eagerly, to read it)"
    ),
)


def _autocast_key() -> tuple:
    """The detailed autocast state, computed only when some autocast is enabled."""
    return tuple(
        (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        for device in ("cpu", "cuda")
    )


def dtype_name(dtype: Any) -> str:
    """HNDL's spelling of a torch dtype: ``float64``, not ``torch.float64``."""
    name = DTYPE_NAMES.get(dtype)
    if name is not None:
        return name
    text = str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else text


def describe(value: Any) -> str:
    """``[3, 5]:float32 on cpu`` for a tensor, the type name for anything else."""
    if isinstance(value, torch.Tensor):
        return f"{list(value.shape)}:{dtype_name(value.dtype)} on {value.device}"
    return type(value).__name__


class _Port:
    """A compiled port contract: batch multiples and fixed extents, dtype, label."""

    __slots__ = ("label", "name", "entries", "dtype", "symbol")

    def __init__(self, label: str, name: str, shape: tuple, dtype: Optional[str], batch: str) -> None:
        self.label = label
        self.name = name
        self.symbol = batch
        self.dtype = TORCH_DTYPES.get(dtype) if dtype not in (None, "any") else None
        self.entries = tuple(_entry(value, batch) for value in shape)

    def expected(self, batch: int) -> list:
        return [value * batch if kind else value for kind, value, _ in self.entries]

    def contract(self, batch: int) -> str:
        """``[B=3, 4]`` (``[2*B=6, 4]`` for a multiple) for this call's batch."""
        return "[" + ", ".join(f"{text}={value * batch}" if kind else str(value) for kind, value, text in self.entries) + "]"

    def contract_full(self, batch: int, device: torch.device) -> str:
        dtype = dtype_name(self.dtype) if self.dtype is not None else "any"
        return f"{self.contract(batch)}:{dtype} on {device}"

    def problem(self, value: Any, batch: int, device: torch.device) -> Optional[str]:
        """The first line of what is wrong with ``value`` at this port, or None."""
        if not isinstance(value, torch.Tensor):
            return f"{self.label}: expected a tensor, got {type(value).__name__}"
        shape = value.shape
        expected = self.expected(batch)
        if len(shape) != len(expected) or any(a != b for a, b in zip(shape, expected)):
            return f"{self.label}: expected shape {self.contract(batch)}, got {list(shape)}"
        if self.dtype is not None and value.dtype != self.dtype:
            return f"{self.label}: expected dtype {dtype_name(self.dtype)}, got {dtype_name(value.dtype)}"
        if value.device != device:
            return f"{self.label}: expected device {device}, got {value.device}"
        return None

    def check(self, value: Any, batch: int, device: torch.device, source: str, **where: Any) -> None:
        """Raise E_RUNTIME when ``value`` breaks this port's contract for the call's ``batch``."""
        if isinstance(value, torch.Tensor):
            shape = value.shape
            entries = self.entries
            if len(shape) == len(entries):
                for (kind, extent, _), actual in zip(entries, shape):
                    if actual != (extent * batch if kind else extent):
                        break
                else:
                    if (self.dtype is None or value.dtype == self.dtype) and value.device == device:
                        return
        raise self.error(value, batch, device, source, **where)

    def error(self, value: Any, batch: int, device: torch.device, source: str, **where: Any) -> HNDLError:
        message = self.problem(value, batch, device) or f"{self.label}: breaks its contract"
        if isinstance(value, torch.Tensor):
            message += f"\n  expected {self.contract_full(batch, device)}\n  got      {describe(value)}"
            if self._batch_axis_differs(value, batch) and source != self.label:
                message += f"\n  {self.symbol}={batch} is this call's batch size, read from {source}"
        return HNDLError("E_RUNTIME", message, remedies=(CONTRACT_REMEDY,), **where)

    def _batch_axis_differs(self, value: torch.Tensor, batch: int) -> bool:
        return any(
            kind and index < value.dim() and value.shape[index] != extent * batch
            for index, (kind, extent, _) in enumerate(self.entries)
        )


def _entry(value: Any, batch: str) -> tuple[bool, int, str]:
    """(is a batch entry, multiple or extent, original text)."""
    if isinstance(value, int):
        return (False, value, str(value))
    return (True, batch_multiple(value, batch), str(value))


class _Step:
    """One node of the compiled program."""

    __slots__ = ("module", "node", "reads", "writes", "ports_in", "ports_out", "where", "location", "release", "opaque")

    def __init__(self, module: nn.Module, node, batch: str, dtypes: tuple[Mapping[str, str], Mapping[str, str]]) -> None:
        self.module = module
        self.node = node
        self.reads = tuple(node.inputs.values())
        self.writes = tuple(f"node:{node.id}/{port}" for port in node.outputs)
        expected, produced = dtypes
        self.ports_in = tuple(
            _Port(f"{node.alias} {node.id!r} input {port!r} (from {ref})", port, node.input_shapes[port], expected[port], batch)
            for port, ref in node.inputs.items()
        )
        self.ports_out = tuple(
            _Port(f"{node.alias} {node.id!r} output {port!r}", port, node.output_shapes[port], produced[port], batch)
            for port in node.outputs
        )
        line = node.source.get("line")
        column = node.source.get("column")
        self.where = f"{node.alias}" + (f", line {line}, column {column}" if line else "")
        self.location = {"node": node.id, "line": line, "column": column if line else None}
        self.release: tuple = ()
        spec = spec_of(type(module))
        self.opaque = spec is not None and spec.opaque

    def check_outputs(self, batch: int, device: torch.device, source: str, *values: Any) -> None:
        """An opaque node's asserted output contract, checked on every call (E_RUNTIME)."""
        for port, value in zip(self.ports_out, values):
            port.check(value, batch, device, source, **self.location)

    def outputs(self, result: Any) -> tuple:
        """Map the module's return value onto the declared output ports, in order."""
        if len(self.writes) == 1 and isinstance(result, torch.Tensor):
            return (result,)
        names = self.node.outputs
        if isinstance(result, Mapping):
            if set(result) != set(names):
                raise HNDLError(
                    "E_RUNTIME",
                    f"node {self.node.id!r} returned keys {sorted(result)}, expected exactly {list(names)}",
                    **self.location,
                )
            return tuple(result[name] for name in names)
        if isinstance(result, (tuple, list)) and len(result) == len(names):
            return tuple(result)
        raise HNDLError(
            "E_RUNTIME",
            f"node {self.node.id!r} returned {type(result).__name__}, expected {len(names)} tensor(s) for {list(names)}",
            **self.location,
        )


# -- registered state ------------------------------------------------------------------------------
def _record_state(container: nn.Module, node_of: Mapping[str, str]) -> tuple:
    """Every module under ``container`` with its parameter, buffer and submodule slots.

    Each entry is ``(path, node id, module, ((name, present), ...) for parameters, the same for
    buffers, ((name, child or None), ...))``. Parameters and buffers are recorded by presence
    (a tensor replaced under the same name is legitimate: ``load_state_dict(assign=True)``);
    submodules by identity.
    """
    entries = []
    seen: set[int] = set()
    pending = [(container, "nodes", None)]  # depth-first, children in registration order
    while pending:
        module, path, node = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        children = tuple(module._modules.items())
        entries.append((
            path, node, module,
            tuple((name, value is not None) for name, value in module._parameters.items()),
            tuple((name, value is not None) for name, value in module._buffers.items()),
            children,
        ))
        for name, child in reversed(children):
            if child is not None:
                pending.append((child, f"{path}.{name}", node if node is not None else node_of.get(name)))
    return tuple(entries)


def _slot_difference(path: str, kind: str, recorded: tuple, current: Mapping[str, Any]) -> Optional[str]:
    if len(recorded) == len(current):
        for name, present in recorded:
            if name not in current or (current[name] is not None) != present:
                break
        else:
            return None
    names = set()
    for name, present in recorded:
        names.add(name)
        if name not in current:
            return f"{kind} '{path}.{name}' was removed"
        value = current[name]
        if present and value is None:
            return f"{kind} '{path}.{name}' was set to None"
        if not present and value is not None:
            return f"{kind} '{path}.{name}' was filled in (it was None at build)"
    for name in current:
        if name not in names:
            return f"{kind} '{path}.{name}' was added"
    return None


def _children_difference(path: str, recorded: tuple, current: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    if len(recorded) == len(current):
        for name, child in recorded:
            if current.get(name, _MISSING) is not child:
                break
        else:
            return None
    names = set()
    for name, child in recorded:
        names.add(name)
        value = current.get(name, _MISSING)
        if value is child:
            continue
        if value is _MISSING:
            return name, f"submodule '{path}.{name}' was removed"
        if child is None:
            return name, f"submodule '{path}.{name}' was filled in with {type(value).__name__} (it was None at build)"
        if value is None:
            return name, f"submodule '{path}.{name}' was set to None (it was {type(child).__name__} at build)"
        other = "another " if type(value) is type(child) else ""
        return name, f"submodule '{path}.{name}' was replaced with {other}{type(value).__name__} (it was {type(child).__name__} at build)"
    for name, value in current.items():
        if name not in names:
            added = "None" if value is None else type(value).__name__
            return name, f"submodule '{path}.{name}' was added ({added})"
    return None


_MISSING = object()


def state_difference(record: tuple, node_of: Mapping[str, str]) -> Optional[tuple[Optional[str], str]]:
    """Replay ``record``: ``(node id or None, what differs)`` for the first difference, else None."""
    for path, node, module, parameters, buffers, children in record:
        text = _slot_difference(path, "parameter", parameters, module._parameters)
        if text is None:
            text = _slot_difference(path, "buffer", buffers, module._buffers)
        if text is not None:
            return node, text
        found = _children_difference(path, children, module._modules)
        if found is not None:
            name, text = found
            return (node if node is not None else node_of.get(name)), text
    return None


# -- the module ------------------------------------------------------------------------------------
#: Derived attributes rebuilt from the plan and the bound modules (deepcopy, unpickling).
_RUNTIME = (
    "_inputs", "_steps", "_outputs", "_input_names", "_entry", "_signatures", "_state_dirty",
    "_validations", "_bare", "_positional", "_traced", "_traced_positional", "_fast_lines", "_fast_reads", "_watches", "_node_of", "_plan_nodes",
)


class GraphModule(nn.Module):
    """A built plan: ``forward(**inputs)`` returns ``{output name: tensor}``."""

    def __init__(
        self,
        plan: ResolvedPlan,
        modules: Mapping[str, nn.Module],
        port_dtypes: Mapping[str, tuple],
        receipt: Mapping[str, Any],
        device: torch.device,
    ) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict({f"n_{node_id}": module for node_id, module in modules.items()})
        self.plan = plan
        self.build_receipt = receipt
        self._device = device
        state = self.__dict__
        state["_port_dtypes"] = port_dtypes
        state["_node_modules"] = tuple(modules[node.id] for node in plan.nodes)
        state["_record"] = _record_state(self.nodes, {f"n_{node.id}": node.id for node in plan.nodes})
        self._setup_runtime()

    # -- runtime structures ------------------------------------------------------------------------
    def _setup_runtime(self) -> None:
        plan = self.plan
        state = self.__dict__
        state["_inputs"] = tuple(
            (port["name"], _Port(f"input {port['name']!r}", port["name"], port["shape"], port["dtype"], plan.batch))
            for port in plan.inputs
        )
        state["_input_names"] = tuple(name for name, _ in self._inputs)
        steps = tuple(
            _Step(module, node, plan.batch, self._port_dtypes[node.id])
            for module, node in zip(self._node_modules, plan.nodes)
        )
        outputs = tuple((port["name"], port["ref"]) for port in plan.outputs)
        kept = {ref for _, ref in outputs}
        last = {}
        for index, step in enumerate(steps):
            for ref in step.reads:
                last[ref] = index
        for index, step in enumerate(steps):
            step.release = tuple(ref for ref in dict.fromkeys(step.reads) if last[ref] == index and ref not in kept)
        state["_steps"] = steps
        state["_outputs"] = outputs
        state["_node_of"] = {f"n_{node.id}": node.id for node in plan.nodes}
        state["_plan_nodes"] = {node.id: node for node in plan.nodes}
        state["_signatures"] = {}
        state["_state_dirty"] = False
        state["_validations"] = 0
        state["_bare"] = tuple(True for _ in steps)
        container = self._record[0][2]
        state["_watches"] = state_watch.watch(self, (self, *(entry[2] for entry in self._record), container))
        self._generate()

    def _generate(self) -> None:
        """Compile the fast paths for remembered signatures into straight-line functions.

        ``entry(graph, inputs)`` serves ``forward(**inputs)`` and returns the output dict;
        ``positional(graph, args)`` serves a facade called with every input positionally and
        returns the single output's tensor (the dict when there are several). Both first defer
        to the traced program under torch.compile and to the checked program for a signature
        that is not remembered. Modules are bound as closure variables of a factory, so the body
        reads no globals and no keyword defaults.
        """
        names = self._input_names
        bound: dict[str, Any] = {
            "signatures": self._signatures, "any_autocast": _any_autocast, "autocast_key": _autocast_key,
            "is_compiling": _is_dynamo_compiling,
        }
        arguments = [f"a{index}" for index in range(len(names))]
        key = [f"{a}.{field}" for a in arguments for field in ("shape", "dtype", "device")]
        key += ["graph.training", "autocast_key() if any_autocast() else False"]
        signature = f"known = ({', '.join(key)}) in signatures"
        for index, name in enumerate(names):
            bound[f"n{index}"] = name

        local: dict[str, str] = {f"input:{name}": argument for name, argument in zip(names, arguments)}
        kept = {ref for _, ref in self._outputs}
        read = {ref for step in self._steps for ref in step.reads}
        free: list[str] = []
        registers = 0
        body: list[tuple[Optional[int], str]] = []
        fast_reads = []
        for index, step in enumerate(self._steps):
            args = [local[ref] for ref in step.reads]
            fast_reads.append(tuple(args))
            for ref in step.release:
                if local[ref].startswith("r"):
                    free.append(local[ref])
            targets = []
            for position, ref in enumerate(step.writes):
                if ref not in read and ref not in kept:
                    targets.append(f"o{index}_{position}" if step.opaque else "_")
                    continue
                if free:
                    register = free.pop()
                else:
                    register = f"r{registers}"
                    registers += 1
                local[ref] = register
                targets.append(register)
            bound[f"m{index}"] = step.module
            call = f"m{index}({', '.join(args)})"
            if len(step.writes) == 1 and self._bare[index]:
                body.append((index, f"{targets[0]} = {call}"))
            else:
                bound[f"s{index}"] = step.outputs
                body.append((index, f"{', '.join(targets)}, = s{index}({call})"))
            if step.opaque:  # its own HNDLError names the node: no note
                bound[f"c{index}"] = step.check_outputs
                bound["device"] = self._device
                bound["source"] = self._inputs[0][1].label
                body.append((None, f"c{index}({arguments[0]}.shape[0], device, source, {', '.join(targets)})"))
        for index, (name, _) in enumerate(self._outputs):
            bound[f"k{index}"] = name
        result = "{" + ", ".join(f"k{index}: {local[ref]}" for index, (_, ref) in enumerate(self._outputs)) + "}"
        single = local[self._outputs[0][1]] if len(self._outputs) == 1 else result

        # The functions are made by a factory that takes what they bind as closure variables
        # (read with LOAD_DEREF: no per-call keyword-default lookups).
        lines: list[str] = ["def make(" + ", ".join(bound) + "):"]
        fast_lines: dict[int, int] = {}

        def emit(*statements: str) -> None:
            lines.extend("    " + statement for statement in statements)

        def emit_body(returned: str) -> None:
            emit("    try:")
            for index, statement in body:
                emit(f"        {statement}")
                if index is not None:
                    fast_lines[len(lines)] = index
            if not body:
                emit("        pass")
            emit(
                "    except Exception as error:",
                "        graph._explain(error, locals())",
                "        raise",
                "    if graph._state_dirty:",
                "        graph._state_changed_during_call()",
                f"    return {returned}",
            )

        emit(
            "def entry(graph, inputs):",
            "    if is_compiling():",
            "        return graph._traced_call(inputs)",
            f"    if len(inputs) != {len(names)}:",
            "        return graph._checked_call(inputs)",
            "    try:",
            *(f"        {argument} = inputs[n{index}]" for index, argument in enumerate(arguments)),
            f"        {signature}",
            "    except Exception:",
            "        return graph._checked_call(inputs)",
            "    if not known:",
            "        return graph._checked_call(inputs)",
        )
        emit_body(result)
        emit(
            "def positional(graph, args):",
            "    if is_compiling():",
            "        return graph._traced_positional(graph, args)",
            "    try:",
            f"        {', '.join(arguments)}, = args",
            f"        {signature}",
            "    except Exception:",
            "        return graph._positional_call(args)",
            "    if not known:",
            "        return graph._positional_call(args)",
        )
        emit_body(single)
        emit("return entry, positional")
        space: dict[str, Any] = {}
        exec(compile("\n".join(lines) + "\n", "<hndl graph>", "exec"), space)
        state = self.__dict__
        # Take the factory out of the functions' globals (no function <-> globals cycle, so
        # deleting the module frees it by reference counting); the closures hold what they bind.
        state["_entry"], state["_positional"] = space.pop("make")(**bound)
        state["_fast_lines"] = fast_lines
        state["_fast_reads"] = tuple(fast_reads)
        self._generate_traced()

    # -- forward -----------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``nn.Module.__call__`` minus its two extra frames when it would only call ``forward``.

        The conditions are exactly those under which ``Module._call_impl`` calls ``forward``
        directly (no module or global hooks, no JIT tracing), plus: ``module.compile()`` has not
        been used and nobody (``torch.fx``, profilers) has replaced ``nn.Module.__call__``.
        Otherwise the call goes through ``nn.Module.__call__`` as usual. Under
        ``torch.compile(model)`` dynamo traces this frame and only the hook checks become guards
        (the other conditions concern eager calls alone), as for a ``torch.nn`` container.
        """
        hooked = (self._forward_pre_hooks or self._forward_hooks or self._backward_pre_hooks or self._backward_hooks
                  or _hooks._global_forward_pre_hooks or _hooks._global_forward_hooks
                  or _hooks._global_backward_pre_hooks or _hooks._global_backward_hooks)
        if _is_dynamo_compiling():
            return _module_call(self, *args, **kwargs) if hooked else self._compiled_call(args, kwargs)
        if hooked or self._compiled_call_impl is not None or nn.Module.__call__ is not _module_call or _tracing_state():
            return _module_call(self, *args, **kwargs)
        return self.forward(*args, **kwargs)

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._entry(self, inputs)

    def _compiled_call(self, args: tuple, kwargs: dict) -> Any:
        """What an unhooked call runs while dynamo traces it: the traced program, directly."""
        if args:
            return self.forward(*args, **kwargs)  # forward's own TypeError
        return self._traced_call(kwargs)

    def _positional_call(self, args: tuple) -> Any:
        """``positional`` when the signature is not remembered."""
        outputs = self._checked_call(self._inputs_from(args))
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs

    def _signature(self, inputs: Mapping[str, Any]) -> tuple:
        key: list = []
        for name in self._input_names:
            value = inputs[name]
            key += [value.shape, value.dtype, value.device]
        key += [self.training, _autocast_key() if _any_autocast() else False]
        return tuple(key)

    def _checked_call(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Validate this call's signature: bind, check state, run every port check, remember it."""
        state = self.__dict__
        state["_validations"] += 1
        values, batch = self._bind(inputs)
        key = self._signature(inputs)
        difference = self._state_difference()
        if difference is not None:
            state["_state_dirty"] = True
            raise self._state_error(difference, during_forward=False)
        signatures = self._signatures
        if self._state_dirty:
            signatures.clear()
        state["_state_dirty"] = False
        outputs, bare = self._run_checked(values, batch)
        difference = self._state_difference()
        if difference is not None:
            state["_state_dirty"] = True
            signatures.clear()
            raise self._state_error(difference, during_forward=True)
        if self._state_dirty:
            return outputs  # registered during this call but still as built: validate next call again
        if len(signatures) >= MAX_SIGNATURES:
            signatures.clear()
        signatures[key] = True
        if any(old and not new for old, new in zip(self._bare, bare)):
            state["_bare"] = tuple(old and new for old, new in zip(self._bare, bare))
            self._generate()
        return outputs

    def _run_checked(self, values: dict, batch: int) -> tuple[dict, tuple]:
        device = self._device
        source = self._inputs[0][1].label if self._inputs else ""
        bare = []
        for step in self._steps:
            args = [values[ref] for ref in step.reads]
            for port, value in zip(step.ports_in, args):
                port.check(value, batch, device, source, **step.location)
            try:
                result = step.module(*args)
                results = step.outputs(result)
            except Exception as error:
                self._annotate(error, step, args, batch)
                raise
            bare.append(isinstance(result, torch.Tensor))
            for port, value in zip(step.ports_out, results):
                port.check(value, batch, device, source, **step.location)
            for ref, value in zip(step.writes, results):
                values[ref] = value
            for ref in step.release:
                del values[ref]
        return {name: values[ref] for name, ref in self._outputs}, tuple(bare)

    def _traced_call(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The checked program as dynamo traces it (see ``_generate_traced``); no cache."""
        return self._traced(self, inputs)

    def _generate_traced(self) -> None:
        """Compile the checked program for torch.compile into one straight-line function.

        Every port check is written out with its extents, dtype and device as literals, so under
        dynamo the checks are evaluated once while tracing and cost no guard beyond the input
        tensors' own; a failing check calls back into the module for the usual HNDLError. The
        registered-state check is traced only while a registration hook has marked the state as
        changed: dynamo guards on that one flag, the traced check clears it, and the next call
        retraces without it. ``_apply`` regenerates this function (the device is a literal), so
        a compiled module retraces after a move.
        """
        names = self._input_names
        device = self._device
        device_text = "torch.device(" + ", ".join(
            [repr(device.type)] + ([str(device.index)] if device.index is not None else [])) + ")"
        bound: dict[str, Any] = {}
        arguments = [f"a{index}" for index in range(len(names))]
        header = [
            "def traced(graph, inputs, *, DEFAULTS):",
            f"    if len(inputs) != {len(names)} or " + " or ".join(f"{name!r} not in inputs" for name in names) + ":",
            "        fail(graph, '_bind', inputs)",
        ]
        for name, argument in zip(names, arguments):
            header.append(f"    {argument} = inputs[{name!r}]")
        # ``positional`` calls this one with exactly one argument per input (it checked the count).
        positional_header = [
            "def traced_positional(graph, args, *, DEFAULTS):",
            f"    if len(args) != {len(names)}:",
            "        fail(graph, '_bind_args', args)",
            f"    {', '.join(arguments)}, = args",
        ]
        lines: list[str] = []
        lines += [
            "    if not isinstance(a0, torch.Tensor) or a0.dim() == 0:",
            "        fail(graph, '_bind', inputs)",
            "    b = a0.shape[0]",
        ]

        checked: dict[str, tuple] = {}  # value -> the contract a check already established

        def check(value: str, port: _Port, where: str) -> None:
            if checked.get(value) == (port.entries, port.dtype) or (
                port.dtype is None and checked.get(value, (None,))[0] == port.entries
            ):
                return  # the producer's output check already established this contract
            checked[value] = (port.entries, port.dtype)
            extents = ", ".join(
                ("b" if extent == 1 else f"{extent} * b") if kind else str(extent) for kind, extent, _ in port.entries
            )
            condition = f"not isinstance({value}, torch.Tensor) or {value}.shape != ({extents}{',' if len(port.entries) == 1 else ''})"
            if port.dtype is not None:
                condition += f" or {value}.dtype is not torch.{str(port.dtype).split('.')[-1]}"
            condition += f" or {value}.device != {device_text}"
            lines.append(f"    if {condition}: fail(graph, '_traced_failure', {where}, {value}, b)")

        for index, (name, argument) in enumerate(zip(names, arguments)):
            check(argument, self._inputs[index][1], f"None, {index}")
        local = {f"input:{name}": argument for name, argument in zip(names, arguments)}
        for index, step in enumerate(self._steps):
            args = ", ".join(local[ref] for ref in step.reads)
            for position, (port, ref) in enumerate(zip(step.ports_in, step.reads)):
                check(local[ref], port, f"{index}, {position}")
            bound[f"m{index}"] = step.module
            targets = [f"v{index}_{position}" for position in range(len(step.writes))]
            if len(targets) == 1:
                target = targets[0]
                lines.append(f"    {target} = m{index}({args})")
                lines.append(
                    f"    if not isinstance({target}, torch.Tensor): {target}, = graph._steps[{index}].outputs({target})"
                )
            else:
                result = f"t{index}"
                lines.append(f"    {result} = m{index}({args})")
                lines.append(
                    f"    {', '.join(targets)}, = {result} if isinstance({result}, (tuple, list)) and "
                    f"len({result}) == {len(targets)} else graph._steps[{index}].outputs({result})"
                )
            for position, (port, ref, target) in enumerate(zip(step.ports_out, step.writes, targets)):
                local[ref] = target
                check(target, port, f"{index}, {-1 - position}")
        lines += [
            "    if graph._state_dirty and graph._traced_state_check():",
            "        fail(graph, '_traced_state_failure')",
        ]
        result = "{" + ", ".join(f"{name!r}: {local[ref]}" for name, ref in self._outputs) + "}"
        single = local[self._outputs[0][1]] if len(self._outputs) == 1 else result
        positional_body = [line.replace("fail(graph, '_bind', inputs)", "fail(graph, '_bind_args', args)") for line in lines]
        lines = [*header, *lines, f"    return {result}", *positional_header, *positional_body, f"    return {single}"]
        source = "\n".join(lines).replace("DEFAULTS", ", ".join(f"{name}={name}" for name in bound) or "_=None")
        space: dict[str, Any] = {"torch": torch, "fail": _outside_graph, **bound}
        exec(compile(source + "\n", "<hndl traced graph>", "exec"), space)
        self.__dict__["_traced"] = space.pop("traced")
        self.__dict__["_traced_positional"] = space.pop("traced_positional")
        for name in bound:
            del space[name]

    def _traced_failure(self, step: Optional[int], position: int, value: Any, batch: int) -> None:
        """Raise the checked program's error for a port that failed in the traced program."""
        source = self._inputs[0][1].label
        if step is None:
            raise self._inputs[position][1].error(value, batch, self._device, source)
        target = self._steps[step]
        port = target.ports_in[position] if position >= 0 else target.ports_out[-1 - position]
        raise port.error(value, batch, self._device, source, **target.location)

    def _traced_state_check(self) -> bool:
        """Traced while the state is marked changed: True on a difference, else clear the mark."""
        if self._state_difference() is not None:
            return True
        self._state_dirty = False
        return False

    def _traced_state_failure(self) -> None:
        difference = self._state_difference()
        if difference is not None:
            raise self._state_error(difference, during_forward=False)

    def _inputs_from(self, args: tuple) -> dict[str, Any]:
        """Inputs given positionally, in declaration order, keyed by name (E_BINDING on a wrong count)."""
        names = self._input_names
        if len(args) != len(names):
            raise HNDLError(
                "E_BINDING",
                f"the network takes {len(names)} input(s) ({', '.join(names)}), got {len(args)} positionally",
                remedies=("Pass one tensor per declared input.",),
            )
        return dict(zip(names, args))

    def _bind_args(self, args: tuple) -> tuple[dict[str, torch.Tensor], int]:
        """``_bind`` for the traced positional program."""
        return self._bind(self._inputs_from(args))

    def _bind(self, inputs: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], int]:
        names = self._input_names
        unknown = [name for name in inputs if name not in names]
        missing = [name for name in names if name not in inputs]
        if unknown or missing:
            raise HNDLError(
                "E_BINDING",
                "runtime inputs must be exactly " + ", ".join(names)
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; undeclared {', '.join(unknown)}" if unknown else ""),
                remedies=("Pass one tensor per declared input.",),
            )
        first = inputs[names[0]]
        if not isinstance(first, torch.Tensor) or first.dim() == 0:
            raise HNDLError(
                "E_RUNTIME",
                f"input {names[0]!r}: expected a tensor with a batch axis, got "
                + (describe(first) if isinstance(first, torch.Tensor) else type(first).__name__),
                remedies=(CONTRACT_REMEDY,),
            )
        batch = first.shape[0]
        source = self._inputs[0][1].label
        values = {}
        for name, port in self._inputs:
            port.check(inputs[name], batch, self._device, source)
            values[f"input:{name}"] = inputs[name]
        return values, batch

    # -- registered state --------------------------------------------------------------------------
    def _state_difference(self) -> Optional[tuple[Optional[str], str]]:
        record = self._record
        if self._modules.get("nodes") is not record[0][2]:
            current = self._modules.get("nodes")
            return None, f"submodule 'nodes' was replaced with {type(current).__name__}"
        return state_difference(record, self._node_of)

    def _state_error(self, difference: tuple[Optional[str], str], *, during_forward: bool) -> HNDLError:
        node_id, text = difference
        verb = "changed during forward" if during_forward else "no longer matches the build"
        if node_id is not None and node_id in self._plan_nodes:
            node = self._plan_nodes[node_id]
            line = node.source.get("line")
            return HNDLError(
                "E_RUNTIME", f"registered state of {node.alias} {node_id!r} {verb}: {text}",
                node=node_id, line=line, column=node.source.get("column") if line else None,
                remedies=(STATE_REMEDY,),
            )
        return HNDLError("E_RUNTIME", f"registered state of the graph {verb}: {text}", remedies=(STATE_REMEDY,))

    def _registered_state_changed(self) -> None:
        """Called by the registration hooks (state_watch) for a module of this graph."""
        state = self.__dict__
        state["_state_dirty"] = True
        signatures = state.get("_signatures")
        if signatures is not None:
            signatures.clear()

    def _state_changed_during_call(self) -> None:
        """A registration hook fired during a call that used a remembered signature."""
        self._signatures.clear()
        difference = self._state_difference()
        if difference is not None:
            raise self._state_error(difference, during_forward=True)

    # -- failure notes (built only once something failed) ------------------------------------------
    def _explain(self, error: BaseException, frame: Mapping[str, Any]) -> None:
        """Annotate an exception that left a fast path, finding the node from the traceback."""
        try:
            trace = error.__traceback__
            index = self._fast_lines.get(trace.tb_lineno) if trace is not None else None
            if index is None:
                return
            first = frame["a0"]
            self._annotate(error, self._steps[index], [frame.get(name) for name in self._fast_reads[index]], first.shape[0])
        except Exception:  # a note must never replace the real error
            pass
        finally:
            if isinstance(frame, dict):
                frame.pop("error", None)  # the frame's locals snapshot must not keep the error alive

    def _annotate(self, error: BaseException, step: _Step, args: list, batch: int) -> None:
        try:
            if any(isinstance(note, str) and note.startswith(NOTE_PREFIX) for note in getattr(error, "__notes__", ())):
                return  # nested graphs: keep the innermost node's note only
            device = self._device
            lines = [f"{NOTE_PREFIX} {step.node.id!r} ({step.where})"]
            module_name = type(error).__module__ or ""
            if module_name.startswith(("torch._dynamo", "torch._inductor")):
                lines.append("  the error comes from torch.compile (dynamo/inductor), not from the node's own code")
            difference = self._state_difference()
            if difference is not None:
                lines.append(f"  registered state no longer matches the build: {difference[1]}")
            for port, value, ref in zip(step.ports_in, args, step.reads):
                problem = port.problem(value, batch, device)
                if problem is None:
                    lines.append(f"  input {port.name!r}: got {describe(value)}; contract {port.contract_full(batch, device)}")
                    continue
                lines.append(f"  {problem}")
                if ref.startswith("node:"):
                    producer = ref[len("node:"):].split("/", 1)[0]
                    node = self._plan_nodes.get(producer)
                    alias = f"{node.alias} " if node is not None else ""
                    lines.append(
                        f"  {alias}{producer!r} returned this; it met the contract when this input signature was "
                        "validated, so its output now depends on something else (data, or state changed behind "
                        "HNDL's back) and is caught here, where it breaks"
                    )
            error.add_note("\n".join(lines))
        except Exception:
            pass

    # -- torch.nn.Module integration ---------------------------------------------------------------
    def _apply(self, fn, recurse: bool = True):
        result = super()._apply(fn, recurse)
        self._device = fn(torch.empty(0, device=self._device)).device
        # Moves and casts replace tensors but never add or remove a registration: the state
        # check of the next (now unremembered) signature covers them.
        self._signatures.clear()
        self._generate_traced()
        return result

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for name in _RUNTIME:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._setup_runtime()

    def __deepcopy__(self, memo: dict) -> "GraphModule":
        for shared in (self.plan, self.build_receipt, self._port_dtypes):
            memo[id(shared)] = shared  # immutable: the clone shares them
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return clone

    def __repr__(self) -> str:
        return shape_table(self.plan)
