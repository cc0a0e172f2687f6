"""GraphModule: an ordinary torch module whose forward is a straight-line program over nodes.

Modules register once under ``nodes.n_<id>``; ``forward(**inputs)`` returns a dictionary keyed
by the public output names. The §7 facade ``Network`` (hndl.torch.network) builds on it.

Runtime validation is done once per input signature (SPEC.md §11, the runtime-validation
design):

* The signature of a call is every external input's ``(shape, dtype, device)``, the module's
  ``training`` flag and the autocast state. The first call for a signature runs the *checked
  program*: every port's shape (``k*B`` entries against this call's batch), dtype and device
  before and after its node (``hndl.torch.ports``), then the registered-state check
  (``hndl.torch.state_record``). Up to 64 validated signatures are remembered per module; the
  65th clears them.
* Later calls with a remembered signature run a generated straight-line fast path, and under
  torch.compile forward traces a generated straight-line copy of the checked program, without
  the cache; ``hndl.torch.programs`` generates both and explains how they are built. The
  traced program is generated with the module (dynamo must find it in place: a program
  generated on dynamo's first look would change the guards of every compiled entry); the fast
  path when the first signature is remembered, since no call can take it before.
  ``__call__`` goes straight to ``forward`` when ``nn.Module.__call__`` would do nothing else
  (no hooks, no JIT tracing).
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

Tools (SPEC.md "Tracers", "Dtype moves", "Runtime validation under autocast"): torch.export
traces the traced program and remembers nothing; fx's symbolic tracer and ``torch.jit.trace``
record the plain program (``_plain_call``), the latter after checking the inputs untraced;
``torch.jit.script`` is E_RUNTIME. A floating cast in ``_apply`` moves every floating port's
contract; under autocast a floating port also accepts autocast's dtypes. torch's
reparametrizations (``hndl.torch.torch_edits``) are not state changes, and a node replaced by
its torch.ao conversion is adopted (``_adopt_conversions``).

Errors: HNDL's own checks raise ``HNDLError`` (``E_BINDING`` for the input names and for inputs
passed positionally to a GraphModule, which takes them by keyword only; ``E_RUNTIME`` for
contracts and registered state). An exception raised inside a node propagates unchanged
(type, message, traceback) and gains exactly one note naming the node, its operator and source
line, the node's inputs against their contracts, and the registered-state difference if any;
through nested graphs only the innermost note is kept. The note is built only when something
has already failed.
"""

from __future__ import annotations

import copy
import keyword
import sys
import threading
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn
from torch.fx import Proxy
from torch.nn.modules.module import (
    _global_backward_hooks,
    _global_backward_pre_hooks,
    _global_forward_hooks,
    _global_forward_pre_hooks,
)

from ..errors import HNDLError
from ..plan import ResolvedPlan, shape_table
from . import state_watch
from .module_hooks import hook_probe, hooks_registered
from .ports import CONTRACT_REMEDY, FLOATING, Port, Step, autocast_dtypes, describe, exactly_the_inputs
from .programs import fast_program, outside_graph, signature, traced_program
from .state_record import record_state, state_difference
from .torch_edits import converted_from

#: Validated signatures remembered per module; one more clears them all.
MAX_SIGNATURES = 64
NOTE_PREFIX = "HNDL: raised inside node"
STATE_REMEDY = (
    "HNDL fixes every parameter, buffer and submodule when it builds a plan, so state added or "
    "removed later is not trained, seeded or saved as the plan describes; create it in __init__; to "
    "change how a node computes, register a parametrization (torch.nn.utils.parametrize) or a forward "
    "hook on its module; to restructure the model with a tool (peft, activation checkpointing, "
    "convert_sync_batchnorm, fuse_modules), call hndl.torch.unsealed(model) first and edit that; or resolve "
    "and build a new plan to change the architecture"
)
SCRIPT_REMEDY = (
    "Use torch.export.export(model, (x,), dynamic_shapes=...) for a deployable graph (TorchScript is in "
    "maintenance and torch.export replaces it), torch.compile(model) for speed, or torch.jit.trace(model, x) "
    "where TorchScript is required"
)

_tracing_state = torch._C._get_tracing_state
_set_tracing_state = torch._C._set_tracing_state
_is_compiling = torch.compiler.is_compiling
#: Set while a Python-level profiler observes calls: torch.profiler's Python tracer (``with_stack=True``,
#: which records one ``nn.Module: <Class>_<n>`` event per ``nn.Module.__call__``), cProfile.
_getprofile = sys.getprofile
_Module = nn.Module
_module_call = nn.Module.__call__
#: ``__call__``'s check, as in the fast paths (``hndl.torch.programs``): a plain ``return False``
#: that dynamo folds to True while tracing.
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling


# -- the module ------------------------------------------------------------------------------------
#: Derived attributes rebuilt from the plan and the bound modules (deepcopy, unpickling).
_RUNTIME = (
    "_inputs", "_steps", "_hook_probe", "_outputs", "_input_names", "_entry", "_signatures", "_state_dirty",
    "_validations", "_bare", "_positional", "_traced", "_traced_positional", "_args_call", "_traced_args",
    "_fast_lines", "_fast_reads", "_watches", "_node_of", "_plan_nodes",
)


def _forward_with_args(graph: "GraphModule", args: tuple) -> Any:
    """A call without keywords, for a module whose forward takes keywords only: E_BINDING."""
    if not args:
        return graph._entry(graph, {})  # nothing given: the binding error names what is missing
    outside_graph(graph, "_reject_positional", len(args))


def _deferred_entry(graph: "GraphModule", inputs: Mapping[str, Any]) -> Any:
    """``entry`` until the fast paths exist: the checked program until a signature is remembered."""
    if _is_dynamo_compiling():  # folded while tracing: dynamo never generates anything
        return graph._traced_call(inputs)
    if not graph._signatures:
        return graph._checked_call(inputs)
    return graph._fast_paths()[0](graph, inputs)


def _deferred_positional(graph: "GraphModule", args: tuple) -> Any:
    """``positional`` until the fast paths exist (only called once dynamo is ruled out)."""
    if not graph._signatures:
        return graph._positional_call(args)
    return graph._fast_paths()[1](graph, args)


#: ``_entry``, ``_positional``, ``_fast_lines``, ``_fast_reads`` while the fast paths are deferred.
_DEFERRED = (_deferred_entry, _deferred_positional, MappingProxyType({}), ())
#: Held while a graph generates its fast paths (rarely, and briefly).
_GENERATING = threading.Lock()


#: One class per (base, tuple of input names): see ``signature_class``.
_SIGNATURE_CLASSES: dict[tuple[type, tuple[str, ...]], type] = {}


def signature_class(base: type, names: tuple[str, ...]) -> type:
    """The subclass of ``base`` whose ``forward`` takes exactly these inputs as named parameters.

    Tools read a module's inputs off ``type(model).forward``: fx makes one placeholder per
    parameter and ``torch.export`` matches ``dynamic_shapes`` by name; both fail on ``*args``
    and ``**kwargs``. So each distinct tuple of input names gets one subclass, with the base's
    name, whose forward ``base._forward_source`` writes. Names that cannot be Python parameters
    (keywords, ``self``) keep the base's generic forward. Instances pickle by the names
    (``GraphModule.__reduce_ex__``), so the class is rebuilt wherever they are loaded.
    """
    key = (base, names)
    cls = _SIGNATURE_CLASSES.get(key)
    if cls is not None:
        return cls
    if not names or "self" in names or any(keyword.iskeyword(name) or not name.isidentifier() for name in names):
        return base
    space: dict[str, Any] = {}
    exec(base._forward_source(names), space)
    forward = space["forward"]
    forward.__qualname__ = f"{base.__qualname__}.forward"
    forward.__module__ = base.__module__
    cls = type(base.__name__, (base,), {
        "forward": forward, "_input_signature": names, "__module__": base.__module__,
        "__qualname__": base.__qualname__, "__doc__": base.__doc__,
    })
    _SIGNATURE_CLASSES[key] = cls
    return cls


def _signature_instance(base: type, names: tuple[str, ...]) -> "GraphModule":
    """An empty instance of ``signature_class(base, names)`` for unpickling; the state follows."""
    return nn.Module.__new__(signature_class(base, tuple(names)))


class GraphModule(nn.Module):
    """A built plan: ``forward(**inputs)`` returns ``{output name: tensor}``."""

    #: Whether ``forward`` takes the inputs positionally (the ``Network`` facade does).
    _positional_inputs = False
    #: The input names a ``signature_class`` forward takes; None on the generic base classes.
    _input_signature: Optional[tuple[str, ...]] = None

    #: The source of a ``forward`` naming the inputs (``signature_class``), or None to keep the
    #: generic one: a GraphModule's ``forward(*args, **inputs)`` turns a positional input into
    #: E_BINDING even when called directly, and fx traces it by keyword.
    _forward_source: Optional[Callable[[tuple[str, ...]], str]] = None

    def __new__(cls, plan: Any = None, *args: Any, **kwargs: Any) -> "GraphModule":
        """An instance of the class whose ``forward`` names this plan's inputs, where the class has one."""
        if cls._forward_source is not None and cls._input_signature is None and isinstance(plan, ResolvedPlan):
            cls = signature_class(cls, tuple(port["name"] for port in plan.inputs))
        return super().__new__(cls)

    def __reduce_ex__(self, protocol: int) -> tuple:
        """Pickle a signature class's instance by its base and input names, which rebuild the class."""
        cls = type(self)
        if cls._input_signature is None:
            return super().__reduce_ex__(protocol)
        return (_signature_instance, (cls.__bases__[0], self._input_names), self.__getstate__())

    def __init__(
        self,
        plan: ResolvedPlan,
        modules: Mapping[str, nn.Module],
        port_dtypes: Mapping[str, tuple],
        receipt: Mapping[str, Any],
        device: torch.device,
        traits: Optional[Mapping[str, frozenset]] = None,
    ) -> None:
        super().__init__()
        self.nodes = nn.ModuleDict({f"n_{node_id}": module for node_id, module in modules.items()})
        self.plan = plan
        self.build_receipt = receipt
        self._device = device
        state = self.__dict__
        state["_port_dtypes"] = port_dtypes
        state["_traits"] = dict(traits or {})
        #: Floating casts since the build (``.double()``, ``.to(torch.bfloat16)``): plan dtype -> current.
        state["_casts"] = {}
        state["_node_modules"] = tuple(modules[node.id] for node in plan.nodes)
        state["_record"] = record_state(self.nodes, {f"n_{node.id}": node.id for node in plan.nodes})
        self._setup_runtime()

    # -- runtime structures ------------------------------------------------------------------------
    def _setup_runtime(self) -> None:
        plan = self.plan
        state = self.__dict__
        self._compile_steps()
        state["_node_of"] = {f"n_{node.id}": node.id for node in plan.nodes}
        state["_plan_nodes"] = {node.id: node for node in plan.nodes}
        state["_signatures"] = {}
        state["_state_dirty"] = False
        state["_validations"] = 0
        state["_hook_probe"] = hook_probe(self)
        self._watch()
        self._generate()

    def _watch(self) -> None:
        container = self._record[0][2]
        self.__dict__["_watches"] = state_watch.watch(self, (self, *(entry[2] for entry in self._record), container))
        state_watch.watch_slots(self, container)

    def _compile_steps(self) -> None:
        """The ports and steps of the checked program, for the current modules and floating dtype."""
        plan = self.plan
        state = self.__dict__
        casts = self._casts
        state["_inputs"] = tuple(
            (port["name"], Port(f"input {port['name']!r}", port["name"], port["shape"], port["dtype"], plan.batch, casts))
            for port in plan.inputs
        )
        state["_input_names"] = tuple(name for name, _ in self._inputs)
        traits = self._traits
        steps = tuple(
            Step(module, node, plan.batch, self._port_dtypes[node.id], traits.get(node.id, frozenset()), casts)
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
        state["_bare"] = tuple(True for _ in steps)

    def _generate(self) -> None:
        """Defer the fast paths for remembered signatures, then compile the traced program.

        The fast paths serve only signatures the checked program has validated, so until the
        first is remembered ``_entry`` / ``_positional`` are stand-ins (``_deferred_entry``)
        that run the checked program, and ``programs.fast_program`` writes the real ones when
        one is; a build that is never called twice never pays for them. See ``_generate_traced``.
        """
        state = self.__dict__
        state["_entry"], state["_positional"], state["_fast_lines"], state["_fast_reads"] = _DEFERRED
        state["_args_call"] = _deferred_positional if self._positional_inputs else _forward_with_args
        self._generate_traced()

    def _fast_paths(self) -> tuple[Callable, Callable]:
        """The generated ``entry`` and ``positional``, generating them if they are still deferred.

        Under a lock, so that threads making the first fast calls at once generate them once.
        """
        with _GENERATING:
            state = self.__dict__
            if state["_entry"] is _deferred_entry:
                state["_entry"], state["_positional"], state["_fast_lines"], state["_fast_reads"] = fast_program(self)
                if self._positional_inputs:
                    state["_args_call"] = state["_positional"]
            return state["_entry"], state["_positional"]

    # -- forward -----------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``nn.Module.__call__`` minus its two extra frames when it would only call ``forward``.

        The conditions are exactly those under which ``Module._call_impl`` calls ``forward``
        directly (no module or global hooks, no JIT tracing), plus: ``module.compile()`` has not
        been used, nobody (``torch.fx``, profilers) has replaced ``nn.Module.__call__``, and no
        Python profiler is watching: ``torch.profiler.profile(with_stack=True)`` records a module
        event for each ``nn.Module.__call__`` frame, so a profiled network shows as one
        ``nn.Module: Network_0`` event holding its nodes' events, as a handwritten module does.
        Otherwise the call goes through ``nn.Module.__call__`` as usual. Under
        ``torch.compile(model)`` dynamo traces this frame; the hook check is folded while
        tracing, as torch does for its own modules (``hndl.torch.module_hooks``), and the
        other conditions concern eager calls alone.
        """
        if _is_dynamo_compiling():
            hooked = self._hook_probe()
            if hooked is None:  # torch is told to guard module hooks: check them in the traced code
                hooked = hooks_registered(self)
            if hooked:
                return _module_call(self, *args, **kwargs)
            program = self._traced_args
        elif (self._forward_pre_hooks or self._forward_hooks or self._backward_pre_hooks or self._backward_hooks
                or _global_forward_pre_hooks or _global_forward_hooks or _global_backward_pre_hooks
                or _global_backward_hooks or self._compiled_call_impl is not None
                or _Module.__call__ is not _module_call or _tracing_state() or _getprofile() is not None):
            # The expression is hooks_registered's, inlined. A replaced nn.Module.__call__ (fx's
            # tracer, profilers) is the one that must see this call, and a profiler its frame.
            if self._positional_inputs and not (self._forward_pre_hooks or _global_forward_pre_hooks):
                self._check_arguments(args, kwargs)  # E_BINDING rather than forward's TypeError
            return _Module.__call__(self, *args, **kwargs)
        else:
            program = self._args_call
        if "forward" in self.__dict__:  # a forward patched onto the instance
            return self.forward(*args, **kwargs)
        if kwargs:
            if not self._positional_inputs:  # keyword inputs of a GraphModule (positional ones are refused)
                return self._entry(self, kwargs) if not args else program(self, args)
            args = self._arguments(args, kwargs)  # a facade maps them onto its positional program
        return program(self, args)

    def _check_arguments(self, args: tuple, kwargs: Mapping[str, Any]) -> None:
        """A facade's inputs must fit its named ``forward`` (E_BINDING); a pre-hook may still rebind them."""
        if kwargs or len(args) != len(self._input_names):
            self._inputs_from(self._arguments(args, kwargs))

    def forward(self, *args: torch.Tensor, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the graph on its inputs given by keyword; a positional input is E_BINDING.

        ``*args`` exists only to turn ``module(x)`` into an HNDL error naming the keywords
        instead of Python's bare TypeError; the keyword path pays one empty-tuple test.
        """
        if isinstance(args, Proxy):  # fx's symbolic tracer: ``*args`` and ``**inputs`` are proxies
            return self._plain_call({name: inputs[name] for name in self._input_names})
        if args:
            outside_graph(self, "_reject_positional", len(args))
        return self._entry(self, inputs)

    def _reject_positional(self, given: int) -> None:
        """Raise E_BINDING for a GraphModule called with ``given`` positional inputs."""
        names = self._input_names
        by_name = ", ".join(f"{name}=..." for name in names)
        raise HNDLError(
            "E_BINDING",
            f"a GraphModule takes its inputs by keyword ({by_name}); got {given} positional argument(s)",
            remedies=(f"Call it as module({by_name}), or build the network facade (hndl.torch.network, "
                      "network_file, network_from_callable), which also takes inputs by position.",),
        )

    def _positional_call(self, args: tuple) -> Any:
        """``positional`` when the signature is not remembered."""
        outputs = self._checked_call(self._inputs_from(args))
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs

    def _checked_call(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Validate this call's signature: bind, check state, run every port check, remember it.

        Tracers that cannot run the checks take another program: torch.export (its shapes may be
        symbolic, so nothing is remembered) traces the traced program, as dynamo does; fx's
        symbolic tracer and ``torch.jit.trace`` record the straight-line program (``_plain_call``).
        """
        if _is_compiling():
            return self._traced(self, inputs)
        if _tracing_state():
            return self._jit_call(inputs)
        if any(isinstance(value, Proxy) for value in inputs.values()):
            return self._plain_call(inputs)
        state = self.__dict__
        state["_validations"] += 1
        self._adopt_conversions()
        loose = autocast_dtypes(self._device)
        values, batch = self._bind(inputs, loose)
        key = signature(self, inputs)
        difference = self._state_difference()
        if difference is not None:
            state["_state_dirty"] = True
            raise self._state_error(difference, during_forward=False)
        signatures = self._signatures
        if self._state_dirty:
            signatures.clear()
        state["_state_dirty"] = False
        outputs, bare = self._run_checked(values, batch, loose)
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

    def _run_checked(self, values: dict, batch: int, loose: tuple) -> tuple[dict, tuple]:
        device = self._device
        source = self._inputs[0][1].label if self._inputs else ""
        bare = []
        for step in self._steps:
            args = [values[ref] for ref in step.reads]
            for port, value in zip(step.ports_in, args):
                port.check(value, batch, device, loose, source, **step.location)
            if step.runtime_check is not None:
                step.check_runtime(args)
            try:
                result = step.module(*step.arranged(args))
                results = step.outputs(result)
            except Exception as error:
                self._annotate(error, step, args, batch)
                raise
            bare.append(isinstance(result, torch.Tensor))
            for port, value in zip(step.ports_out, results):
                port.check(value, batch, device, loose, source, **step.location)
            for ref, value in zip(step.writes, results):
                values[ref] = value
            for ref in step.release:
                del values[ref]
        return {name: values[ref] for name, ref in self._outputs}, tuple(bare)

    def _plain_call(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Every node in plan order and nothing else: the program fx and ``jit.trace`` record.

        Under fx the values are proxies, so no check can run; each node module is called
        through ``nn.Module.__call__``, so fx records it as a ``call_module`` of
        ``nodes.n_<id>`` (or traces into it), named after the node.
        """
        values = {f"input:{name}": inputs[name] for name in self._input_names}
        for step in self._steps:
            results = step.outputs(step.module(*step.arranged([values[ref] for ref in step.reads])))
            for ref, value in zip(step.writes, results):
                values[ref] = value
        return {name: values[ref] for name, ref in self._outputs}

    def _jit_call(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """``torch.jit.trace``: check the inputs with the tracer paused, then record the plain program.

        The checks read shapes as Python values; traced, each would warn that the trace might
        not generalize (and record nothing useful), so they run untraced.
        """
        tracing = _tracing_state()
        _set_tracing_state(None)
        try:
            self._bind(inputs)
        finally:
            _set_tracing_state(tracing)
        return self._plain_call(inputs)
    def _traced_call(self, inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The checked program as dynamo traces it (see ``programs.traced_program``); no cache."""
        return self._traced(self, inputs)

    def _generate_traced(self) -> None:
        """Compile the checked program for torch.compile (``programs.traced_program``)."""
        state = self.__dict__
        state["_traced"], state["_traced_positional"] = traced_program(self)
        state["_traced_args"] = state["_traced_positional"] if self._positional_inputs else _forward_with_args

    def _traced_failure(self, step: Optional[int], position: int, value: Any, batch: int) -> None:
        """Raise the checked program's error for a port that failed in the traced program."""
        source = self._inputs[0][1].label
        loose = autocast_dtypes(self._device)
        if step is None:
            raise self._inputs[position][1].error(value, batch, self._device, source, loose)
        target = self._steps[step]
        port = target.ports_in[position] if position >= 0 else target.ports_out[-1 - position]
        raise port.error(value, batch, self._device, source, loose, **target.location)

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

    def _bind(self, inputs: Mapping[str, Any], loose: Optional[tuple] = None) -> tuple[dict[str, torch.Tensor], int]:
        if loose is None:
            loose = autocast_dtypes(self._device)
        names = self._input_names
        exactly_the_inputs(inputs, names, "runtime inputs")
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
            port.check(inputs[name], batch, self._device, loose, source)
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

    def _adopt_conversions(self) -> None:
        """Rebind the nodes that torch's conversions replaced (``torch_edits.converted_from``).

        torch.ao's ``convert`` (behind ``quantize_dynamic``) writes each quantized module
        straight into ``nodes._modules`` in place of the float one; such a replacement is the
        node itself, quantized, so the graph adopts it: it runs, is recorded and is watched from
        now on. Any other replacement is left for the state check to report.
        """
        container = self._modules.get("nodes")
        if container is None:
            return
        current = container._modules
        modules = list(self._node_modules)
        adopted = False
        for index, node in enumerate(self.plan.nodes):
            replacement = current.get(f"n_{node.id}")
            if replacement is not modules[index] and converted_from(modules[index], replacement):
                modules[index] = replacement
                adopted = True
        if adopted:
            state = self.__dict__
            state["_node_modules"] = tuple(modules)
            state["_record"] = record_state(container, self._node_of)
            self._compile_steps()
            self._watch()
            self._generate()

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

    def _annotate(self, error: BaseException, step: Step, args: list, batch: int) -> None:
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
            loose = autocast_dtypes(device)
            for port, value, ref in zip(step.ports_in, args, step.reads):
                problem = port.problem(value, batch, device, loose)
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
        device = self._device
        self._device = fn(torch.empty(0, device=device)).device
        # A floating cast moves every floating port with the parameters (integer ports stay):
        # probe where ``fn`` sends each floating dtype the plan uses, as torch's own casts do.
        casts = {}
        for declared in FLOATING:
            moved = fn(torch.empty(0, dtype=self._casts.get(declared, declared), device=device)).dtype
            if moved != declared:
                casts[declared] = moved
        if casts != self._casts:
            self.__dict__["_casts"] = casts
            self._compile_steps()
            self._generate()
        # Moves and casts replace tensors but never add or remove a registration: the state
        # check of the next (now unremembered) signature covers them.
        self._signatures.clear()
        self._generate_traced()
        return result

    def __prepare_scriptable__(self) -> "GraphModule":
        """``torch.jit.script`` is not supported: say what to use instead (E_RUNTIME)."""
        raise HNDLError(
            "E_RUNTIME",
            "torch.jit.script cannot compile a built HNDL network: its forward is generated per plan, "
            "and TorchScript is in maintenance mode",
            remedies=(SCRIPT_REMEDY,),
        )

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        for name in _RUNTIME:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._setup_runtime()

    def __deepcopy__(self, memo: dict) -> "GraphModule":
        for shared in (self.plan, self.build_receipt, self._port_dtypes, self._traits):
            memo[id(shared)] = shared  # immutable: the clone shares them
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return clone

    def __repr__(self) -> str:
        return shape_table(self.plan)

    def _repr_html_(self) -> str:
        """Jupyter: the plan's diagram above the shape table ``print(model)`` shows (the table alone
        when drawing fails)."""
        return self.plan._repr_html_()
