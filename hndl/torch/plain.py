"""``unsealed(model)``: a built network as a plain ``nn.Module`` whose structure may be edited.

A built ``Network`` is sealed (§7): its plan is the truth about the module, so replacing,
inserting or deleting a layer through it is refused. Tools that restructure a model (peft's
LoRA, activation-checkpoint wrappers, ``nn.SyncBatchNorm.convert_sync_batchnorm``,
``torch.ao.quantization.fuse_modules``) need a module that lets them. ``unsealed`` is the one
step from one to the other:

* The plain module holds **the same layer objects** as the network (so the same parameter and
  buffer tensors: nothing is copied, nothing is allocated) in its own ``nodes`` container, under
  the same names, so its state dict has the same keys (``nodes.n_<id>.<tensor>``) and loads the
  network's state dict and vice versa.
* ``forward`` runs the nodes in plan order with the same calling convention as the network
  (a ``Network``: inputs by position, keyword or both in declaration order, one public output
  returns a tensor and several a ``{name: tensor}`` dict; a ``GraphModule``: inputs by keyword,
  a dict out) and gives the same values. It looks every layer up in ``nodes`` when it is called,
  so whatever a tool puts there runs: a layer wrapped, fused, converted or deleted there is what
  the module computes.
* Its ``forward`` names the inputs (one generated class per tuple of input names, pickled by
  them), so fx, ``torch.export`` and ``torch.compile`` trace it. It checks nothing but that
  every input is given (``E_BINDING``; a call the signature does not fit is Python's
  ``TypeError``, as for any module): no contracts, no registered-state check. It carries no plan; ``source_plan`` keeps the plan it was unsealed
  from as a record, which stops describing the module as soon as its structure is edited.
* Because the layers are shared, the network and the plain module are two views of one set of
  weights: an optimizer step or ``load_state_dict`` through either is seen by both, and so is an
  in-place change to a shared layer (peft freezes base weights with ``requires_grad_(False)``,
  ``merge_and_unload`` adds the LoRA product into the base weight). Structural edits of the
  plain module's own ``nodes`` never reach the network; one that reaches inside a shared layer
  (replacing a child of a composite node) is reported by the network's registered-state check
  on its next call. For an independent module, unseal a copy: ``unsealed(copy.deepcopy(model))``.
"""

from __future__ import annotations

import keyword
from typing import Any, Mapping

from torch import nn

from ..errors import HNDLError
from .ports import call_slots, exactly_the_inputs, sequence_outputs

__all__ = ["PlainNetwork", "unsealed"]


class PlainNetwork(nn.Module):
    """A built network's layers under a plain ``nn.Module``: edit its structure freely.

    Made by ``hndl.torch.unsealed(model)``. ``nodes`` is an ordinary ``nn.ModuleDict`` holding
    the network's own layer objects as ``n_<id>``; ``forward`` runs them in plan order, looking
    each one up when it is called. ``model["<id>"]`` returns a node's current layer.
    ``source_plan`` is the plan the network was built from, kept only as a record.
    """

    def __init__(self, source: nn.Module) -> None:
        super().__init__()
        plan = source.plan
        layers = source._modules["nodes"]._modules
        self.nodes = nn.ModuleDict({f"n_{node.id}": layers[f"n_{node.id}"] for node in plan.nodes})
        self.source_plan = plan
        self.training = source.training
        traits = getattr(source, "_traits", {})
        #: Per node: (its layer's name in ``nodes``, refs it reads, refs it writes, call slots,
        #: output port names, node id).
        self._program = tuple(
            (f"n_{node.id}", tuple(node.inputs.values()), tuple(f"node:{node.id}/{port}" for port in node.outputs),
             call_slots(traits.get(node.id, frozenset()), tuple(node.inputs)), tuple(node.outputs), node.id)
            for node in plan.nodes
        )
        self._input_names = tuple(port["name"] for port in plan.inputs)
        self._outputs = tuple((port["name"], port["ref"]) for port in plan.outputs)
        self._positional_inputs = bool(getattr(source, "_positional_inputs", False))

    def __reduce_ex__(self, protocol: int) -> tuple:
        """Pickle and copy an instance of a named-forward class by its input names (``_plain_class``)."""
        if type(self) is PlainNetwork:
            return super().__reduce_ex__(protocol)
        return (_plain_instance, (self._input_names, self._positional_inputs), self.__getstate__())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run every node's current layer in plan order on the inputs, given as the network takes them.

        ``unsealed`` returns a subclass whose ``forward`` names the inputs (as the network's
        does, so fx makes one placeholder per input); this generic form serves input names
        that cannot be Python parameters.
        """
        inputs = self._bind(args, kwargs)
        return self._run(tuple(inputs[name] for name in self._input_names))

    def _run(self, inputs: tuple) -> Any:
        """The program over ``inputs`` in declaration order (None marks one the caller left out)."""
        if any(value is None for value in inputs):
            self._bind((), {name: value for name, value in zip(self._input_names, inputs) if value is not None})
        values = {f"input:{name}": value for name, value in zip(self._input_names, inputs)}
        layers = self.nodes._modules
        for key, reads, writes, slots, names, node_id in self._program:
            arguments = [values[ref] for ref in reads]
            if slots is not None:
                arguments = [None if index is None else arguments[index] for index in slots]
            layer = layers.get(key)
            if layer is None:
                raise HNDLError(
                    "E_RUNTIME", f"node {node_id!r} has no layer: nodes.{key} was removed or set to None",
                    node=node_id,
                    remedies=(f"Register a module under nodes.{key} (nn.Identity() to pass its input through).",),
                )
            result = layer(*arguments)
            for ref, value in zip(writes, _outputs(result, names, node_id)):
                values[ref] = value
        outputs = {name: values[ref] for name, ref in self._outputs}
        if self._positional_inputs and len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs

    def _bind(self, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The inputs by name: positionally (a Network's convention) and by keyword (E_BINDING when they do not fit)."""
        names = self._input_names
        if args and not self._positional_inputs:
            keywords = ", ".join(f"{name}=..." for name in names)
            raise HNDLError("E_BINDING", f"this module takes its inputs by keyword ({keywords}); got {len(args)} "
                            "positional argument(s)", remedies=(f"Call it as module({keywords}).",))
        if len(args) > len(names):
            raise HNDLError("E_BINDING", f"the network takes {len(names)} input(s) ({', '.join(names)}), "
                            f"got {len(args)} positionally", remedies=("Pass one tensor per declared input.",))
        inputs = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in inputs:
                raise HNDLError("E_BINDING", f"input {name!r} was given both positionally and by keyword",
                                remedies=("Pass each input once.",))
            inputs[name] = value
        exactly_the_inputs(inputs, names)
        return inputs

    def __getitem__(self, node_id: str) -> nn.Module:
        """The layer now registered for node ``node_id`` (KeyError for an unknown ID)."""
        if not isinstance(node_id, str) or f"n_{node_id}" not in self.nodes._modules:
            raise KeyError(f"no layer for node ID {node_id!r}; the layers are {', '.join(self.nodes.keys())}")
        return self.nodes[f"n_{node_id}"]

    def extra_repr(self) -> str:
        return f"inputs=({', '.join(self._input_names)}), outputs=({', '.join(name for name, _ in self._outputs)})"


def _outputs(result: Any, names: tuple[str, ...], node_id: str) -> tuple:
    """A layer's return value as one value per declared output port."""
    if len(names) == 1 and not isinstance(result, (Mapping, tuple, list)):
        return (result,)
    if isinstance(result, Mapping) and set(result) == set(names):
        return tuple(result[name] for name in names)
    values = sequence_outputs(result, len(names))
    if values is not None:
        return values
    raise HNDLError(
        "E_RUNTIME", f"node {node_id!r} returned {type(result).__name__}, expected {len(names)} value(s) for "
        f"{list(names)}", node=node_id,
        remedies=("A replacement layer must return what the node's original layer returned: one tensor per "
                  "output port, as a tuple or a dict keyed by port name.",),
    )


def unsealed(model: nn.Module) -> PlainNetwork:
    """A plain ``nn.Module`` over ``model``'s own layers, whose structure tools may edit.

    ``model`` is a built ``Network`` (or ``GraphModule``); it is left as it is, still sealed
    and usable. The result shares its layer objects (the same parameters and buffers), has the
    same state-dict keys, takes the same inputs and returns the same values, and lets peft,
    activation checkpointing, ``convert_sync_batchnorm``, ``fuse_modules`` and hand edits replace,
    wrap or remove layers. It carries no plan (``source_plan`` is a record of where it came from)
    and checks no contracts. Unseal ``copy.deepcopy(model)`` for independent weights. Hooks
    registered on ``model`` itself are not carried over (those on its layers are: the layers are
    the same objects). ``forward`` names the inputs as the network's does (keyword-only for a
    ``GraphModule``), so fx's symbolic tracer, ``torch.export`` and ``torch.compile`` trace it;
    a call that does not fit that signature raises Python's ``TypeError``, as for any module,
    and an input left out is ``E_BINDING``.
    """
    from .graph_module import GraphModule  # the backend's module, imported here to keep this one light

    if not isinstance(model, GraphModule):
        raise HNDLError(
            "E_RUNTIME", f"unsealed() takes a built HNDL network, got {type(model).__name__}",
            remedies=("Pass the module hndl.torch.network (or build/restore) returned; any other nn.Module "
                      "is already editable.",),
        )
    names = tuple(port["name"] for port in model.plan.inputs)
    positional = bool(getattr(model, "_positional_inputs", False))
    plain = nn.Module.__new__(_plain_class(names, positional))
    PlainNetwork.__init__(plain, model)
    return plain


#: One subclass per (input names, positional): see ``_plain_class``.
_CLASSES: dict[tuple[tuple[str, ...], bool], type] = {}


def _plain_class(names: tuple[str, ...], positional: bool) -> type:
    """The subclass of ``PlainNetwork`` whose ``forward`` names exactly these inputs.

    Tools read a module's inputs off ``type(module).forward`` (fx makes one placeholder per
    parameter), as for the network itself. A network's inputs are positional-or-keyword, a
    GraphModule's keyword-only. Each defaults to None, which ``_run`` turns into E_BINDING
    naming what is missing. Names that cannot be Python parameters keep the generic forward.
    """
    key = (names, positional)
    cls = _CLASSES.get(key)
    if cls is not None:
        return cls
    if not names or "self" in names or any(keyword.iskeyword(name) or not name.isidentifier() for name in names):
        return PlainNetwork
    parameters = ", ".join(f"{name}=None" for name in names)
    space: dict[str, Any] = {}
    exec(
        f"def forward(self, {'' if positional else '*, '}{parameters}):\n"
        f"    \"\"\"Run every node's current layer in plan order on {', '.join(names)}.\"\"\"\n"
        f"    return self._run(({', '.join(names)},))\n",
        space,
    )
    forward = space["forward"]
    forward.__qualname__ = "PlainNetwork.forward"
    forward.__module__ = __name__
    cls = type("PlainNetwork", (PlainNetwork,), {
        "forward": forward, "__module__": __name__, "__qualname__": "PlainNetwork", "__doc__": PlainNetwork.__doc__,
    })
    _CLASSES[key] = cls
    return cls


def _plain_instance(names: tuple[str, ...], positional: bool) -> PlainNetwork:
    """An empty instance of ``_plain_class(names, positional)`` for unpickling; the state follows."""
    return nn.Module.__new__(_plain_class(tuple(names), positional))
