"""The network constructors of §7: resolve with one frontend, then build a ``Network``."""

from __future__ import annotations

from operator import index as _index
from typing import Any, Callable, Iterator, Mapping, Optional

import torch
from torch import nn
from torch.fx import Proxy

from ..errors import HNDLError
from ..frontends.pipeline import resolve, resolve_callable, resolve_file
from ..plan import is_unary_chain
from ..registry import Registry
from .build import construct
from .graph_module import GraphModule

_is_dynamo_compiling = torch.compiler.is_dynamo_compiling


class Network(GraphModule):
    """The §7 facade over a built plan.

    Calling: inputs positionally (declaration order), by keyword, or mixed; one public
    output returns a bare tensor, several return ``{output name: tensor}`` in declaration order.

    Layer access (§7 "Layer access"):

    * ``model["n0"]`` looks a node's registered module up by its node ID (explicit or
      generated, never a local variable name) in every graph; an unknown ID raises KeyError.
    * For a consecutive unary chain (``hndl.plan.is_unary_chain``: one external input, one
      public output, every node reading exactly the previous node's only output) whose two
      ports are unnamed (the default ``x`` and ``output``; §7: a graph with named ports on
      either side supports node-name lookup only),
      ``model[0]``, ``model[-1]`` (IndexError out of range), ``len(model)``, ``iter(model)``
      and ``reversed(model)`` walk the registered modules in plan order, and
      ``model[i:j]`` returns an ordinary ``torch.nn.Sequential`` over those same module
      objects (shared parameters, buffers, mode and device moves; no plan guarantees, no
      change to this model's registrations). A slice needs step 1 and tensor-in/tensor-out
      adapters: a node whose operator declares a variadic port (``chunk(1)`` returns a
      one-tuple) or more than one port cannot be chained by ``nn.Sequential``.
    * ``x in model`` is True for a node ID or for one of the registered layer modules.

    Errors: integer indexing, ``len``, iteration and slicing on a branched graph or a graph
    with named ports (even one named input or output) raise **TypeError** (the container
    does not support the sequence protocol, as for any non-sequence Python object), naming
    why the graph is not a chain.
    A slice that would chain an incompatible adapter also raises TypeError, a slice with a
    step other than 1 raises ValueError. None of these is an ``HNDLError``: nothing about the
    specification is wrong, the caller asked the container for an operation its shape lacks.

    The network is sealed: its plan describes every layer. ``model[i] = m``, ``del model[i]``,
    ``model["n0"] = m``, ``insert``/``append``/``extend``/``pop``, assigning or registering a
    new submodule, parameter or buffer on the model (``model.extra = nn.Linear(2, 2)``),
    replacing ``model.plan``, replacing the ``nodes`` container (``model.nodes = ...``, also
    straight through ``model._modules["nodes"] = ...``), and the same edits on the
    ``model.nodes`` container all raise ``SealedNetworkError``: an ``HNDLError`` with code
    ``E_RUNTIME`` (and a ``TypeError``, as these edits were before) whose remedy names
    ``hndl.torch.unsealed(model)``, the step to a plain ``nn.Module`` over the same layers that
    tools such as peft, activation checkpointing, ``convert_sync_batchnorm`` and
    ``fuse_modules`` may restructure. Re-assigning or re-registering the object already
    registered under a name (torch's module walkers do it for every child) is not an edit: it
    changes nothing and is accepted. Ordinary attribute state (``.train()``/``.eval()``, device
    and dtype moves) and parameter updates (optimizer steps, ``load_state_dict``, in-place
    writes to parameters) work as usual, and every module stays registered once under
    ``nodes.n_<id>``.
    """

    _positional_inputs = True

    @staticmethod
    def _forward_source(names: tuple[str, ...]) -> str:  # type: ignore[override]
        """``forward(self, <names>)``, the source ``signature_class`` compiles for a facade."""
        parameters = ", ".join(names)
        return (f"def forward(self, {parameters}):\n"
                f"    \"\"\"Run the network on {parameters}, given by position or keyword.\"\"\"\n"
                f"    return self._run(({parameters},))\n")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plan = self.plan
        self.__dict__["_chain_reason"] = _not_a_chain(plan)
        self.__dict__["_node_ids"] = tuple(node.id for node in plan.nodes)
        nodes = self.__dict__["_modules"].get("nodes")
        if type(nodes) is nn.ModuleDict:
            nodes.__class__ = _SealedNodes
        self.__dict__["_hndl_sealed"] = True
        _seal_slots(self)

    def __setstate__(self, state: dict) -> None:
        """Unpickled or deep-copied: the slots dict comes back plain, so seal it again."""
        super().__setstate__(state)
        if self.__dict__.get("_hndl_sealed"):
            _seal_slots(self)

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        """Run the network; ``signature_class`` gives each plan a forward that names its inputs.

        This generic form serves only plans whose input names cannot be Python parameters.
        """
        return self._run(self._arguments(args, kwargs))

    def _arguments(self, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
        """Inputs given by position, keyword or both, in declaration order (E_BINDING when they do not fit)."""
        if not kwargs:
            return args
        names = self._input_names
        if len(args) > len(names):
            raise HNDLError("E_BINDING", f"the network takes {len(names)} input(s) ({', '.join(names)}), got {len(args)} positionally")
        inputs = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in inputs:
                raise HNDLError("E_BINDING", f"input {name!r} was given both positionally and by keyword")
            inputs[name] = value
        unknown = [name for name in inputs if name not in names]
        missing = [name for name in names if name not in inputs]
        if unknown or missing:
            self._bind(inputs)  # raises the E_BINDING naming what is missing or undeclared
        return tuple(inputs[name] for name in names)

    def _run(self, args: tuple) -> Any:
        """Every input in declaration order: the fast entry, or the traced or plain program under a tracer."""
        if _is_dynamo_compiling():
            return self._traced_positional(self, args)
        if args and isinstance(args[0], Proxy):  # fx's symbolic tracer: the plain program, no check
            outputs = self._plain_call(self._inputs_from(args))
            return next(iter(outputs.values())) if len(outputs) == 1 else outputs
        return self._positional(self, args)

    # -- layer access ------------------------------------------------------------------------
    def _layer(self, node_id: str) -> nn.Module:
        return self.__dict__["_modules"]["nodes"][f"n_{node_id}"]

    def _require_chain(self, what: str) -> tuple[str, ...]:
        reason = self.__dict__["_chain_reason"]
        if reason is not None:
            hint = f"; look layers up by node ID instead, e.g. model[{self._node_ids[0]!r}]" if self._node_ids else ""
            raise TypeError(
                f"{what} needs a consecutive unary chain (one unnamed external input, one unnamed public "
                f"output, each node reading the previous node's only output), but {reason}{hint}"
            )
        return self._node_ids

    def __getitem__(self, key: Any) -> nn.Module:
        if isinstance(key, str):
            if key not in self._node_ids:
                known = ", ".join(self._node_ids[:20]) + (", ..." if len(self._node_ids) > 20 else "")
                raise KeyError(f"no node with ID {key!r}; node IDs are: {known or '(none)'}")
            return self._layer(key)
        if isinstance(key, slice):
            return self._slice(key)
        try:
            index = _index(key)
        except TypeError:
            raise TypeError(
                f"Network indices must be node IDs (str), integers or slices, not {type(key).__name__}"
            ) from None
        ids = self._require_chain("integer indexing")
        try:
            return self._layer(ids[index])
        except IndexError:
            raise IndexError(f"layer index {index} is out of range for a chain of {len(ids)} layers") from None

    def _slice(self, key: slice) -> nn.Sequential:
        ids = self._require_chain("slicing")
        if key.step not in (None, 1):
            raise ValueError(f"a Network slice must take consecutive layers (step 1), got step {key.step!r}")
        chosen = ids[key]
        for node_id, node in zip(chosen, self.plan.nodes[key]):
            problem = _chaining_problem(self._traits.get(node_id, frozenset()), node)
            if problem is not None:
                raise TypeError(
                    f"cannot slice through node {node_id!r} ({node.alias}): {problem}; nn.Sequential chains "
                    f"only tensor-in/tensor-out modules. Index the layers individually instead."
                )
        sequential = nn.Sequential(*(self._layer(node_id) for node_id in chosen))
        sequential.training = self.training  # the container's own flag; the layers keep theirs
        return sequential

    def __len__(self) -> int:
        return len(self._require_chain("len()"))

    def __iter__(self) -> Iterator[nn.Module]:
        ids = self._require_chain("iteration")
        return iter([self._layer(node_id) for node_id in ids])

    def __bool__(self) -> bool:
        return True

    def __contains__(self, item: Any) -> bool:
        if isinstance(item, str):
            return item in self._node_ids
        if isinstance(item, nn.Module):
            return any(self._layer(node_id) is item for node_id in self._node_ids)
        return False

    # -- the architecture is fixed -----------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        if not _same_layer(self, key, value):
            _structural(f"model[{key!r}] = ...")

    def __delitem__(self, key: Any) -> None:
        _structural(f"del model[{key!r}]")

    def insert(self, *args: Any, **kwargs: Any) -> None:
        _structural("model.insert(...)")

    def append(self, *args: Any, **kwargs: Any) -> None:
        _structural("model.append(...)")

    def extend(self, *args: Any, **kwargs: Any) -> None:
        _structural("model.extend(...)")

    def pop(self, *args: Any, **kwargs: Any) -> None:
        _structural("model.pop(...)")

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_hndl_sealed"):
            if _already(self, name, value):
                return  # the object registered under this name: nothing changes
            if _registers(self, name, value) or name == "plan":
                _structural(f"model.{name} = {type(value).__name__}(...)")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if self.__dict__.get("_hndl_sealed") and (_registered(self, name) or name == "plan"):
            _structural(f"del model.{name}")
        super().__delattr__(name)

    def add_module(self, name: str, module: Optional[nn.Module]) -> None:
        if self.__dict__.get("_hndl_sealed"):
            if _already(self, name, module):
                return
            _structural(f"model.add_module({name!r}, ...)")
        super().add_module(name, module)

    def register_module(self, name: str, module: Optional[nn.Module]) -> None:
        self.add_module(name, module)

    def register_parameter(self, name: str, param: Optional[nn.Parameter]) -> None:
        if self.__dict__.get("_hndl_sealed"):
            _structural(f"model.register_parameter({name!r}, ...)")
        super().register_parameter(name, param)

    def register_buffer(self, name: str, tensor: Optional[torch.Tensor], persistent: bool = True) -> None:
        if self.__dict__.get("_hndl_sealed"):
            _structural(f"model.register_buffer({name!r}, ...)")
        super().register_buffer(name, tensor, persistent)


class _SealedNodes(nn.ModuleDict):
    """``model.nodes`` of a Network: lookups as usual, every structural edit rejected.

    The Network's forward binds its modules once; replacing one here would silently split the
    state dict from what runs, so the container refuses (``SealedNetworkError``). Putting back
    the module already registered under a name is accepted and changes nothing. It still
    prints as ``ModuleDict``.
    """

    def _get_name(self) -> str:
        return "ModuleDict"

    def __setitem__(self, key: str, module: nn.Module) -> None:
        if not _already(self, key, module):
            _structural(f"model.nodes[{key!r}] = ...")

    def __delitem__(self, key: str) -> None:
        _structural(f"del model.nodes[{key!r}]")

    def __setattr__(self, name: str, value: Any) -> None:
        if _already(self, name, value):
            return
        if _registers(self, name, value):
            _structural(f"model.nodes.{name} = {type(value).__name__}(...)")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if _registered(self, name):
            _structural(f"del model.nodes.{name}")
        super().__delattr__(name)

    def update(self, modules: Any) -> None:
        items = modules.items() if isinstance(modules, (Mapping, nn.ModuleDict)) else modules
        try:
            pairs = [(key, module) for key, module in items]
        except (TypeError, ValueError):
            pairs = None
        if pairs is None or not all(_already(self, key, module) for key, module in pairs):
            _structural("model.nodes.update(...)")

    def pop(self, key: str) -> nn.Module:
        _structural(f"model.nodes.pop({key!r})")

    def clear(self) -> None:
        _structural("model.nodes.clear()")

    def add_module(self, name: str, module: Optional[nn.Module]) -> None:
        if not _already(self, name, module):
            _structural(f"model.nodes.add_module({name!r}, ...)")

    def register_module(self, name: str, module: Optional[nn.Module]) -> None:
        if not _already(self, name, module):
            _structural(f"model.nodes.register_module({name!r}, ...)")

    def register_parameter(self, name: str, param: Optional[nn.Parameter]) -> None:
        _structural(f"model.nodes.register_parameter({name!r}, ...)")

    def register_buffer(self, name: str, tensor: Optional[torch.Tensor], persistent: bool = True) -> None:
        _structural(f"model.nodes.register_buffer({name!r}, ...)")


class _SealedSlots(dict):
    """A Network's own ``_modules``: holds ``nodes`` and refuses to hold anything else.

    torch runs no hook for a write straight into ``module._modules``, so without this
    ``model._modules["nodes"] = nn.ModuleDict(...)`` would let ``parameters()`` and
    ``state_dict()`` report modules the forward never runs. Every write that changes the dict
    is a structural edit (``SealedNetworkError``); writing back the registered object is not.
    It copies and pickles as a plain dict (``Network.__setstate__`` seals it again).
    """

    __slots__ = ()

    def __setitem__(self, name: str, module: Any) -> None:
        if self.get(name, _ABSENT) is not module:
            _structural(f"model._modules[{name!r}] = ...")

    def __delitem__(self, name: str) -> None:
        _structural(f"del model._modules[{name!r}]")

    def pop(self, *args: Any) -> Any:
        _structural("model._modules.pop(...)")

    def popitem(self) -> Any:
        _structural("model._modules.popitem()")

    def clear(self) -> None:
        _structural("model._modules.clear()")

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            _structural(f"model._modules.setdefault({name!r}, ...)")
        return self[name]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, module in dict(*args, **kwargs).items():
            self[name] = module

    def __ior__(self, other: Any) -> "_SealedSlots":
        self.update(other)
        return self

    def __reduce_ex__(self, protocol: int) -> tuple:
        return (dict, (dict(self),))


_ABSENT = object()


def _seal_slots(model: nn.Module) -> None:
    state = model.__dict__
    if type(state["_modules"]) is not _SealedSlots:
        state["_modules"] = _SealedSlots(state["_modules"])


def _already(module: nn.Module, name: Any, value: Any) -> bool:
    """Whether ``value`` is the very module or parameter registered on ``module`` as ``name``."""
    if not isinstance(name, str) or value is None:
        return False
    d = module.__dict__
    return any(d.get(store, {}).get(name, _ABSENT) is value for store in ("_modules", "_parameters"))


def _same_layer(model: "Network", key: Any, value: Any) -> bool:
    """Whether ``model[key] = value`` would put back the layer ``model[key]`` already is."""
    if not isinstance(value, nn.Module):
        return False
    try:
        return model[key] is value
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def _registers(module: nn.Module, name: str, value: Any) -> bool:
    """Whether ``module.name = value`` would add or replace a registered module/parameter."""
    if isinstance(value, (nn.Module, nn.Parameter)):
        return True
    return name in module.__dict__.get("_modules", ()) or name in module.__dict__.get("_parameters", ())


def _registered(module: nn.Module, name: str) -> bool:
    d = module.__dict__
    return any(name in d.get(store, ()) for store in ("_modules", "_parameters", "_buffers"))


UNSEAL_REMEDY = (
    "To restructure the model (peft's get_peft_model, apply_activation_checkpointing, "
    "nn.SyncBatchNorm.convert_sync_batchnorm, torch.ao.quantization.fuse_modules, replacing a layer by hand), "
    "first take the plain nn.Module over the same layers: plain = hndl.torch.unsealed(model) (same parameters "
    "and buffers, state-dict keys, inputs and outputs; no plan attached), then edit plain"
)
KEEP_REMEDY = (
    "To change how a node computes and keep the plan, register a parametrization "
    "(torch.nn.utils.parametrize) or a forward hook on its module; to change the architecture the plan "
    "describes, change the specification and resolve/build a new network (parameter updates such as "
    "optimizer steps and load_state_dict work as usual)"
)


class SealedNetworkError(HNDLError, TypeError):
    """A structural edit of a built network (``E_RUNTIME``); also a ``TypeError``, as it always was."""

    def __reduce__(self):
        return (_sealed_error, (self.message,))


def _sealed_error(what: str) -> SealedNetworkError:
    return SealedNetworkError("E_RUNTIME", what, remedies=(UNSEAL_REMEDY, KEEP_REMEDY))


def _structural(what: str) -> None:
    raise _sealed_error(
        f"{what}: a built HNDL network is sealed (its plan describes every layer), so replacing, inserting "
        f"or deleting a layer, submodule, parameter or buffer through it is refused"
    )


def _not_a_chain(plan: Any) -> Optional[str]:
    """Why ``plan`` does not support §7's sequence protocol, in words; None when it does.

    That needs a consecutive unary chain (``is_unary_chain``) between the default, unnamed
    ports ``x`` and ``output``: §7 gives a graph with named ports on either side node-name
    lookup only, so ``output_shape={"out1": ...}`` over a chain is looked up by ID.
    """
    if len(plan.inputs) != 1:
        return f"the graph has {len(plan.inputs)} external inputs ({', '.join(p['name'] for p in plan.inputs)})"
    if len(plan.outputs) != 1:
        return f"the graph has {len(plan.outputs)} public outputs ({', '.join(p['name'] for p in plan.outputs)})"
    named = [f"{side} {port['name']!r}" for side, port, default in
             (("input", plan.inputs[0], "x"), ("output", plan.outputs[0], "output")) if port["name"] != default]
    if named:
        return f"the graph names its {' and '.join(named)}, and a graph with named ports supports node-name lookup only"
    if is_unary_chain(plan):
        return None
    if not plan.nodes:
        return "the graph has no nodes"
    previous = f"input:{plan.inputs[0]['name']}"
    for node in plan.nodes:
        if len(node.inputs) != 1:
            return f"node {node.id!r} ({node.alias}) has {len(node.inputs)} inputs"
        if len(node.outputs) != 1:
            return f"node {node.id!r} ({node.alias}) has {len(node.outputs)} outputs"
        (ref,) = node.inputs.values()
        if ref != previous:
            return f"node {node.id!r} ({node.alias}) reads {ref}, not the previous {previous}"
        previous = f"node:{node.id}/{node.outputs[0]}"
    return f"the public output reads {plan.output_ref}, not the last node's {previous}"


def _chaining_problem(traits: frozenset, node: Any) -> Optional[str]:
    """Why ``node``'s module cannot sit in an nn.Sequential, or None when it takes and returns one tensor.

    ``traits`` are what build read off the node's declaration (``build.node_traits``).
    """
    if "unary" not in traits:
        return f"{node.op} declares several or variadic ports and passes more than one tensor"
    return None




def network(
    source: str,
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Resolve configuration text and build it; ``model(x)`` returns a tensor."""
    return _network(resolve, source, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def network_file(
    path: Any,
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Load a configuration file (bounded UTF-8), resolve and build it."""
    return _network(resolve_file, path, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def network_from_callable(
    fn: Callable[..., Any],
    *,
    input_shape: Any,
    output_shape: Any,
    device: Any,
    dtype: str = "float32",
    input_dtype: Any = None,
    registry: Optional[Registry] = None,
    initialization_seed: Optional[int] = None,
    limits: Optional[Mapping[str, int]] = None,
) -> Network:
    """Capture trusted ``fn`` once, resolve and build it."""
    return _network(resolve_callable, fn, device=device, initialization_seed=initialization_seed, registry=registry,
                    limits=limits, input_shape=input_shape, output_shape=output_shape, dtype=dtype,
                    input_dtype=input_dtype)


def _network(resolver, specification, *, device, initialization_seed, registry, limits, **contract) -> Network:
    """Resolve with one frontend, then build under the same registry and limits."""
    registry = Registry.builtins() if registry is None else registry
    plan = resolver(specification, registry=registry, limits=limits, **contract)
    return construct(plan, Network, device=device, initialization_seed=initialization_seed,
                     registry=registry, limits=limits)
