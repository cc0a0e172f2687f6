"""The generated programs of a GraphModule: the fast path and the program torch.compile traces.

Both are straight-line Python source written from the module's steps (``hndl.torch.ports``)
and compiled with ``exec``. Each function takes the GraphModule to compile and reads its
steps, inputs and outputs; ``hndl.torch.graph_module`` imports this module and is never
imported back. GraphModule generates the traced program at construction (and unpickling or
deepcopy), and the fast path when its first input signature has been validated (until then no
call could take it); both again when a node stops returning a bare tensor, and the traced
program again after ``_apply`` (the device is bound into it).

* The fast path (``fast_program``). Calls with a remembered input signature build the
  signature tuple, look it up, run a generated straight-line function that calls each bound
  module directly (``r0 = m0(a0)``, registers reused once a value is dead, so intermediates
  are freed as early as in ``nn.Sequential``) and check one flag that the registration hooks
  set. ``GraphModule.__call__`` skips ``nn.Module.__call__`` when it would do nothing but call
  ``forward`` (no hooks, no JIT tracing) and sends a facade's positional call straight to the
  positional fast path; under ``torch.compile`` such a call traces a positional copy of the
  checked program. Neither path pays for a layer a handwritten module does not have.
* The traced program (``traced_program``). Under ``torch.compiler.is_compiling()`` forward
  traces the checked program without the cache. It is generated as straight-line code with
  every contract written out (extents as literals, dtypes and device as keyword defaults), so
  dynamo evaluates the port checks once while tracing and guards little more than a
  handwritten module needs; modules of one architecture share its code object, hence one
  compiled entry. The registered-state walk is traced only while a registration hook has
  marked the state as changed (one guard on that flag). A check that fails while tracing raises
  its HNDLError from a ``torch.compiler.disable``-d call, i.e. outside the graph; under
  ``fullgraph=True`` dynamo reports that call instead, with a reason naming HNDL.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from .ports import Port, autocast_dtypes

__all__ = ["fast_program", "traced_program", "signature", "outside_graph"]

#: The fast paths' check: a plain ``return False`` that dynamo folds to True while tracing (a
#: third of ``is_compiling``'s cost); the slow paths still ask ``is_compiling`` (export too).
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_any_autocast = torch._C._is_any_autocast_enabled


def _call_outside_graph(graph: Any, method: str, *args: Any) -> Any:
    """Run ``graph.<method>(*args)`` eagerly, never traced: the failure paths of the traced program."""
    return getattr(graph, method)(*args)


#: Why dynamo does not trace ``outside_graph``: the reason ``fullgraph=True`` reports.
OUTSIDE_GRAPH_REASON = (
    "HNDL: a contract or registered-state check failed while tracing; its HNDLError is raised "
    "outside the graph (compile without fullgraph=True, or call the model eagerly, to read it)"
)


def _lazily_disabled(function: Callable, reason: str) -> Callable:
    """``torch.compiler.disable(function, reason=reason)`` without importing ``torch._dynamo`` now.

    ``torch.compiler.disable`` imports ``torch._dynamo`` (with sympy, triton and
    torch.distributed: about 1.2 s of CPU, twice ``import torch``'s own cost beyond Python)
    to build its wrapper, so importing this module made every ``hndl`` command and every
    ``import hndl.torch`` pay for a compiler it never ran. torch's own lazy form,
    ``torch._disable_dynamo``, imports dynamo on the first call instead; its wrapper lives in
    a torch file, which dynamo never converts as a frame. It takes no reason, so the wrapper
    carries the attributes ``torch.compiler.disable`` sets, which is where dynamo reads them
    while tracing: a call of it is skipped (a graph break, or under ``fullgraph=True`` an
    error quoting ``reason``), exactly as for the eager wrapper.
    """
    wrapper = torch._disable_dynamo(function)
    wrapper._torchdynamo_disable = True
    wrapper._torchdynamo_disable_msg = reason
    wrapper._torchdynamo_disable_recursive = True
    wrapper._torchdynamo_orig_callable = function
    return wrapper


#: ``outside_graph(graph, method, *args)``: a failure path's call that dynamo never traces, so
#: its HNDLError is raised eagerly (and ``fullgraph=True`` reports a reason naming HNDL).
outside_graph = _lazily_disabled(_call_outside_graph, OUTSIDE_GRAPH_REASON)


def autocast_key() -> tuple:
    """The detailed autocast state, computed only when some autocast is enabled."""
    return tuple(
        (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        for device in ("cpu", "cuda")
    )


#: What an input contributes to the signature of a call; the training flag and the autocast state
#: follow the inputs. ``signature`` and the fast paths' generated key both read it.
INPUT_FIELDS = ("shape", "dtype", "device")


def signature(graph: nn.Module, inputs: Mapping[str, Any]) -> tuple:
    """The signature of a call with these inputs: the key the fast paths look up."""
    key = [getattr(inputs[name], field) for name in graph._input_names for field in INPUT_FIELDS]
    key += [graph.training, autocast_key() if _any_autocast() else False]
    return tuple(key)


def fast_program(graph: nn.Module) -> tuple[Callable, Callable, dict[int, int], tuple]:
    """Compile the fast paths for remembered signatures into straight-line functions.

    ``entry(graph, inputs)`` serves ``forward(**inputs)`` and returns the output dict;
    ``positional(graph, args)`` serves a facade called with every input positionally and
    returns the single output's tensor (the dict when there are several). ``entry`` defers to
    the traced program under torch.compile; ``positional`` is only called once that has been
    ruled out (``GraphModule.__call__``, ``Network.forward``). Both defer to the checked
    program for a signature that is not remembered. Modules are bound as closure variables of
    a factory, so the body reads no globals and no keyword defaults.

    Returns ``(entry, positional, fast_lines, fast_reads)``: ``fast_lines`` maps each line of
    the generated source that calls a node to that node's step index and ``fast_reads`` gives
    each step's argument names, so ``GraphModule._explain`` can find the failing node and its
    inputs from a traceback.
    """
    names = graph._input_names
    bound: dict[str, Any] = {
        "signatures": graph._signatures, "any_autocast": _any_autocast, "autocast_key": autocast_key,
        "is_compiling": _is_dynamo_compiling,
    }
    arguments = [f"a{index}" for index in range(len(names))]
    key = [f"{a}.{field}" for a in arguments for field in INPUT_FIELDS]
    key += ["graph.training", "autocast_key() if any_autocast() else False"]
    signature = f"known = ({', '.join(key)}) in signatures"
    for index, name in enumerate(names):
        bound[f"n{index}"] = name

    local: dict[str, str] = {f"input:{name}": argument for name, argument in zip(names, arguments)}
    kept = {ref for _, ref in graph._outputs}
    read = {ref for step in graph._steps for ref in step.reads}
    free: list[str] = []
    registers = 0
    body: list[tuple[Optional[int], str]] = []
    fast_reads = []
    for index, step in enumerate(graph._steps):
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
        call = f"m{index}({', '.join('None' if name is None else name for name in step.arranged(args))})"
        if len(step.writes) == 1 and graph._bare[index]:
            body.append((index, f"{targets[0]} = {call}"))
        else:
            bound[f"s{index}"] = step.outputs
            body.append((index, f"{', '.join(targets)}, = s{index}({call})"))
        if step.opaque:  # its own HNDLError names the node: no note
            bound[f"c{index}"] = step.check_outputs
            bound["device"] = graph._device
            bound["source"] = graph._inputs[0][1].label
            body.append((None, f"c{index}({arguments[0]}.shape[0], device, source, {', '.join(targets)})"))
    for index, (name, _) in enumerate(graph._outputs):
        bound[f"k{index}"] = name
    result = "{" + ", ".join(f"k{index}: {local[ref]}" for index, (_, ref) in enumerate(graph._outputs)) + "}"
    single = local[graph._outputs[0][1]] if len(graph._outputs) == 1 else result

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
    # Take the factory out of the functions' globals (no function <-> globals cycle, so
    # deleting the module frees it by reference counting); the closures hold what they bind.
    entry, positional = space.pop("make")(**bound)
    return entry, positional, fast_lines, tuple(fast_reads)


def traced_program(graph: nn.Module) -> tuple[Callable, Callable]:
    """Compile the checked program for torch.compile into one straight-line function.

    Every port check is written out with its extents as literals and its dtype and device as
    keyword defaults, so under dynamo the checks are evaluated once while tracing and cost no
    guard beyond the input tensors' own and those defaults; a failing check calls back into the module for the usual HNDLError. The
    registered-state check is traced only while a registration hook has marked the state as
    changed: dynamo guards on that one flag, the traced check clears it, and the next call
    retraces without it. ``_apply`` regenerates this function (the device is bound into it), so
    a compiled module retraces after a move.

    Returns ``(traced, traced_positional)``: ``traced(graph, inputs)`` for ``forward(**inputs)``
    and ``traced_positional(graph, args)`` for a facade called with every input positionally.
    """
    names = graph._input_names
    # Keyword defaults rather than globals: dynamo reads the classes and constants there without
    # walking ``torch``, and the source stays the same for every device.
    bound: dict[str, Any] = {"Tensor": torch.Tensor, "device": graph._device, "autocast_dtypes": autocast_dtypes,
                             "any_autocast": _any_autocast}
    arguments = [f"a{index}" for index in range(len(names))]
    header = [
        "def traced(graph, inputs, *, DEFAULTS):",
        f"    if inputs.__len__() != {len(names)} or " + " or ".join(f"{name!r} not in inputs" for name in names) + ":",
        "        fail(graph, '_bind', inputs)",
    ]
    for name, argument in zip(names, arguments):
        header.append(f"    {argument} = inputs[{name!r}]")
    positional_header = [
        "def traced_positional(graph, args, *, DEFAULTS):",
        f"    if args.__len__() != {len(names)}:",  # no guard on the builtin ``len``
        "        fail(graph, '_bind_args', args)",
        f"    {', '.join(arguments)}, = args",
    ]
    lines: list[str] = []
    lines += [
        "    if not isinstance(a0, Tensor) or a0.dim() == 0:",
        "        fail(graph, '_bind', inputs)",
        "    b = a0.shape[0]",
        "    loose = autocast_dtypes(device) if any_autocast() else ()",
    ]

    checked: dict[str, tuple] = {}  # value -> the contract a check already established

    def check(value: str, port: Port, where: str) -> None:
        if checked.get(value) == (port.entries, port.dtype) or (
            port.dtype is None and checked.get(value, (None,))[0] == port.entries
        ):
            return  # the producer's output check already established this contract
        checked[value] = (port.entries, port.dtype)
        condition, dtype = _check_condition(port.entries, port.dtype, port.floating)
        if dtype is not None:
            bound[dtype] = port.dtype
        lines.append(f"    if {condition.replace(_VALUE, value)}: fail(graph, '_traced_failure', {where}, {value}, b)")

    for index, (name, argument) in enumerate(zip(names, arguments)):
        check(argument, graph._inputs[index][1], f"None, {index}")
    local = {f"input:{name}": argument for name, argument in zip(names, arguments)}
    for index, step in enumerate(graph._steps):
        args = ", ".join("None" if name is None else name for name in step.arranged([local[ref] for ref in step.reads]))
        for position, (port, ref) in enumerate(zip(step.ports_in, step.reads)):
            check(local[ref], port, f"{index}, {position}")
        bound[f"m{index}"] = step.module
        if step.runtime_check is not None:  # the declaration's check of a call its contracts admit
            bound[f"s{index}"] = step
            lines.append(f"    s{index}.check_runtime(({', '.join(local[ref] for ref in step.reads)},))")
        targets = [f"v{index}_{position}" for position in range(len(step.writes))]
        if len(targets) == 1:
            target = targets[0]
            lines.append(f"    {target} = m{index}({args})")
            lines.append(
                f"    if not isinstance({target}, Tensor): {target}, = graph._steps[{index}].outputs({target})"
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
    result = "{" + ", ".join(f"{name!r}: {local[ref]}" for name, ref in graph._outputs) + "}"
    single = local[graph._outputs[0][1]] if len(graph._outputs) == 1 else result
    positional_body = [line.replace("fail(graph, '_bind', inputs)", "fail(graph, '_bind_args', args)") for line in lines]
    lines = [*header, *lines, f"    return {result}", *positional_header, *positional_body, f"    return {single}"]
    source = "\n".join(lines).replace("DEFAULTS", ", ".join(bound))
    traced, traced_positional = _traced_templates(source)
    return _instance(traced, bound), _instance(traced_positional, bound)


#: Where a port check's condition names the value it checks (``_check_condition``).
_VALUE = "@"


@functools.lru_cache(maxsize=1024)
def _check_condition(entries: tuple, dtype: Optional[torch.dtype], floating: bool) -> tuple[str, Optional[str]]:
    """A port check's condition with ``_VALUE`` for the value, and the name of its dtype (None for any).

    Written once per contract: the ports of a network repeat few contracts.
    """
    extents = ", ".join(
        ("b" if extent == 1 else f"{extent} * b") if kind else str(extent) for kind, extent, _ in entries
    )
    value = _VALUE
    condition = f"not isinstance({value}, Tensor) or {value}.shape != ({extents}{',' if len(entries) == 1 else ''})"
    name = None
    if dtype is not None:
        name = str(dtype).split('.')[-1]
        if floating:  # under autocast a floating port may also carry autocast's dtypes
            condition += f" or ({value}.dtype is not {name} and {value}.dtype not in loose)"
        else:
            condition += f" or {value}.dtype is not {name}"
    condition += f" or {value}.device != device"
    return condition, name


@functools.lru_cache(maxsize=256)
def _traced_templates(source: str) -> tuple[types.FunctionType, types.FunctionType]:
    """Compile a traced program once per distinct source.

    Dynamo guards a traced program by its code object, so modules of one architecture (the same
    source: the same contracts) share one code object and hence one compiled entry; with a code
    object per module, the ninth such module compiled in a process would exceed dynamo's
    recompile limit and run uncompiled.
    """
    space: dict[str, Any] = {"fail": outside_graph}
    exec(compile(source + "\n", "<hndl traced graph>", "exec"), space)
    return space["traced"], space["traced_positional"]


def _instance(template: types.FunctionType, defaults: dict[str, Any]) -> types.FunctionType:
    """The template's code with this module's nodes, device and dtypes as keyword defaults."""
    function = types.FunctionType(template.__code__, template.__globals__, template.__name__)
    function.__kwdefaults__ = dict(defaults)
    return function
