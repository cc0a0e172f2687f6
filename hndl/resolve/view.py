"""The bounded view a relation function receives (§8): one node, never the solver itself.

Every member only adds facts. Naming a port the operator does not declare is a bug in the
declaration and fails with E_REGISTRY; so does asserting about an optional input port the call
left unbound (``s.bound(port)`` says which; ``s.shape`` of such a port is None).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from ..contracts import batch_multiple
from ..errors import HNDLError
from .facts import TensorFacts
from .patterns import NodeState


class NodeView:
    """What a relation may read and assert about its own node."""

    __slots__ = ("_state", "args", "_read")

    def __init__(self, state: NodeState) -> None:
        self._state = state
        #: A mutable copy of the normalized arguments; the resolver merges new keys back.
        self.args: dict[str, Any] = dict(state.args)
        #: Tensors whose shapes the relation read, in first-read order (a dict used as an
        #: ordered set): the premises of whatever it asserts next.
        self._read: dict[TensorFacts, None] = {}

    # -- reading -------------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[str, ...]:
        """The node's bound input ports in declared order (an unbound optional port is absent)."""
        return tuple(self._state.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self._state.outputs)

    @property
    def spec(self):
        return self._state.spec

    @property
    def policy(self) -> Optional[str]:
        return self._state.policy

    def bound(self, port: str) -> bool:
        """Whether ``port`` is bound at this node: always for a required port, and for an
        optional input port (``name?``) only when the call passed a tensor for it."""
        state = self._state
        if port in state.inputs or port in state.outputs:
            return True
        if port in state.spec.optional_inputs:
            return False
        self._tensor(port)  # an undeclared port: E_REGISTRY
        return False

    def shape(self, port: str) -> Optional[list]:
        """Known entries of ``port`` (None where unknown), or None while its rank is unknown
        and for an unbound optional port."""
        tensor = self._tensor(port, absent=True)
        if tensor is None:
            return None
        self._read[tensor] = None
        rendered = tensor.rendered()
        return None if rendered is None else list(rendered)

    def dtype(self, port: str) -> Optional[str]:
        """The dtype the port's edge carries; None for an unbound optional port."""
        tensor = self._tensor(port, absent=True)
        return None if tensor is None else tensor.dtype

    def batch(self, port: str) -> Optional[str]:
        """The port's batch entry, ``B`` or a multiple such as ``2*B``, or None (also for an
        unbound optional port)."""
        tensor = self._tensor(port, absent=True)
        if tensor is None or tensor.dims is None:
            return None
        entry = tensor.facts.render(tensor.dims[0])
        return entry if isinstance(entry, str) else None

    # -- asserting -----------------------------------------------------------------------
    def rank(self, port: str, rank: int) -> list:
        """Assert the rank of ``port`` and return its shape list."""
        tensor = self._tensor(port)
        tensor.set_rank(rank, self._reason(f"{port} has rank {rank}"))
        return tensor.shape()

    def axis(self, port: str, index: int, value: Any, code: str = "E_CONSTRAINT") -> None:
        """Assert one extent of ``port``: an int, or a batch entry such as ``2*B``."""
        tensor = self._tensor(port)
        dims = tensor.dims
        if dims is None or not -tensor.rank <= index < tensor.rank:
            self._unranked_axis(port, index)
        facts = tensor.facts
        var = dims[index]
        if type(value) is int and _known(tensor, index, var) == value:
            return  # already known: asserting it again would add nothing
        reason = self._reason(f"{port}[{index}] = {value}")
        if isinstance(value, str):
            facts.equate(var, facts.batch, reason, ratio=batch_multiple(value, facts.batch_symbol), code=code)
        else:
            facts.set_value(var, value, reason, code=code, premises=self._premises(var))

    def equal(self, first: str, second: str) -> None:
        """Assert that two ports have the same shape."""
        a, b = self._tensor(first), self._tensor(second)
        reason = self._reason(f"{first} has the shape of {second}")
        if a.rank is None and b.rank is not None:
            a.set_rank(b.rank, reason)
        elif b.rank is None and a.rank is not None:
            b.set_rank(a.rank, reason)
        if a.rank is not None:
            a.set_rank(b.rank, reason)
            for var_a, var_b in zip(a.dims, b.dims):
                a.facts.equate(var_a, var_b, reason)

    def share_batch(self, *ports: str) -> None:
        """Give the named ports the one batch entry they share."""
        tensors = [self._tensor(port) for port in ports]
        known = [tensor for tensor in tensors if tensor.dims is not None]
        for tensor in known[1:]:
            tensor.facts.equate(tensor.dims[0], known[0].dims[0], self._reason(f"{', '.join(ports)} share a batch"))

    def arg(self, name: str, value: Any) -> None:
        """Fill an inferable argument, or confirm the value it already has.

        The value passes the argument's declared validation first, so a relation may write
        ``3`` for a ``"pair"`` argument and confirm it again on the next sweep.
        """
        if name not in self.spec.args:
            raise HNDLError("E_REGISTRY", f"{self.spec.alias} declares no argument {name!r}", node=self._state.node.id)
        value = self.spec.args[name].normalize(value, name=name, node=self._state.node.id)
        if name in self.args and self.args[name] != value:
            raise HNDLError(
                "E_CONSTRAINT",
                f"{name} is {self.args[name]!r} ({self._state.origins.get(name, 'inferred')}) but the "
                f"relation of {self.spec.alias} requires {value!r}",
                node=self._state.node.id,
                field=name,
            )
        self.args[name] = value

    def product(self, first: str, second: str, code: str = "E_RESHAPE") -> None:
        """Assert equal per-example element counts, solving one unknown factor exactly."""
        a, b = self._tensor(first), self._tensor(second)
        if a.dims is None or b.dims is None:
            return
        facts = a.facts
        sides = []
        for port, tensor in ((first, a), (second, b)):
            known, unknown = 1, []
            for var in tensor.dims[1:]:
                value = facts.value(var)
                if value is None:
                    unknown.append(var)
                else:
                    known *= value
            sides.append((port, tensor, known, unknown))
        (pa, ta, ka, ua), (pb, tb, kb, ub) = sides
        if ua and ub:
            return
        if ub and not ua:
            (pa, ta, ka, ua), (pb, tb, kb, ub) = (pb, tb, kb, ub), (pa, ta, ka, ua)
        # now the second side is fully known
        if not ua:
            if ka != kb:
                self._reshape_error(pa, ta, pb, tb, code)
            return
        if kb % ka:
            self._reshape_error(pa, ta, pb, tb, code)
        if len(ua) == 1:
            premises = tuple(var for var in (*ta.dims[1:], *tb.dims[1:]) if var != ua[0])
            facts.set_value(ua[0], kb // ka, self._reason(f"{pa} and {pb} hold the same {kb} elements per example"),
                            code=code, premises=premises)

    def interval(self, port: str, index: int, low: int, high: int) -> None:
        """Intersect one axis with the inclusive interval [low, high]; it is fixed once it collapses."""
        tensor = self._tensor(port)
        dims = tensor.dims
        if dims is None or not -tensor.rank <= index < tensor.rank:
            self._unranked_axis(port, index)
        var = dims[index]
        known = _known(tensor, index, var)
        if known is not None and low <= known <= high:
            return  # a known extent inside the interval: intersecting would add nothing
        tensor.facts.bound(var, low, high, self._reason(f"{port}[{index}] lies in [{low}, {high}]"),
                           premises=self._premises(var))

    def scale(self, port: str, index: int, other: str, other_index: int, factor: int = 1) -> None:
        """Assert ``port[index] == factor * other[other_index]`` exactly, in both directions.

        An HNDL addition to the §8 view: per-axis equality (factor 1) and exact multiples
        between two axes, for relations whose axes depend on arguments (split, concat, chunk,
        transposed convolution).
        """
        tensor, source = self._tensor(port), self._tensor(other)
        self._check_axis(tensor, port, index)
        self._check_axis(source, other, other_index)
        tensor.facts.equate(
            tensor.dims[index], source.dims[other_index],
            self._reason(f"{port}[{index}] = {factor} * {other}[{other_index}]"), ratio=factor,
        )

    def _premises(self, target: int) -> tuple[int, ...]:
        """Known extents the relation has read so far, other than ``target``; the batch axis
        never is one. A current rendering answers for a whole tensor at once (see ``_known``)."""
        premises = []
        for tensor in self._read:
            dims = tensor.dims
            if dims is None:
                continue
            rendered = tensor.watch.rendered
            if rendered is None:
                value = tensor.facts.value
                premises.extend(var for var in dims[1:] if var != target and value(var) is not None)
            else:
                for axis in range(1, len(dims)):
                    if type(rendered[axis]) is int and dims[axis] != target:
                        premises.append(dims[axis])
        return tuple(premises)

    def _check_axis(self, tensor: TensorFacts, port: str, index: int) -> None:
        if tensor.dims is None or not -tensor.rank <= index < tensor.rank:
            self._unranked_axis(port, index)

    def _unranked_axis(self, port: str, index: int) -> None:
        """A relation named an axis its port does not have (yet): a bug in the declaration."""
        raise HNDLError(
            "E_REGISTRY",
            f"relation of {self.spec.alias} used axis {index} of {port!r} before its rank was known",
            node=self._state.node.id,
        )

    def _reshape_error(self, first: str, a: TensorFacts, second: str, b: TensorFacts, code: str) -> None:
        def spelled(tensor):
            entries = [tensor.facts.value(var) for var in tensor.dims[1:]]
            text = " * ".join("?" if value is None else str(value) for value in entries)
            if None not in entries:
                total = 1
                for value in entries:
                    total *= value
                text += f" = {total}" if len(entries) > 1 else ""
            return text

        chain = tuple(
            reason for var in (*a.dims[1:], *b.dims[1:]) for reason in a.facts.explain(var)
        )
        raise HNDLError(
            code,
            f"{first} holds {spelled(a)} elements per example, which cannot supply the "
            f"{spelled(b)} elements {second} requires",
            chain=tuple(dict.fromkeys(chain)),
            remedies=("Change the literal widths or factors so both ports hold the same element count.",),
        )

    def error(self, code: str, message: str, *, remedies: Iterable[str] = (),
              because: Iterable[tuple[str, int]] = ()) -> None:
        """Fail with a stable code at this node's location.

        ``remedies`` name the fix (what to change, to which value); without them the code's
        default remedy stands. ``because`` lists ``(port, axis)`` extents whose derivations
        become the error's chain, so the message can state an equation and the chain say
        where its known numbers came from.
        """
        raise HNDLError(code, message, chain=self.derivation(*because), remedies=remedies,
                        **self._state.node.where())

    def derivation(self, *axes: tuple[str, int]) -> tuple[str, ...]:
        """The facts that gave each ``(port, axis)`` extent its value, in order, each once: the
        fact that fixed it and the equations carrying it here, not the premises of that fact."""
        steps: list[str] = []
        for port, index in axes:
            tensor = self._tensor(port, absent=True)
            if tensor is None or tensor.dims is None or not -tensor.rank <= index < tensor.rank:
                continue
            steps.extend(tensor.facts.explain(tensor.dims[index], premises=False))
        return tuple(dict.fromkeys(steps))

    def fixed_by(self, port: str, index: int) -> Optional[str]:
        """The node (``node n0 (conv)``) whose fact gave ``port[index]`` its value; None when an
        input or output contract gave it (carried unchanged by equalities) or it is unknown."""
        tensor = self._tensor(port, absent=True)
        if tensor is None or tensor.dims is None or not -tensor.rank <= index < tensor.rank:
            return None
        return tensor.facts.fixed_by(tensor.dims[index])

    # -- helpers -------------------------------------------------------------------------
    def _tensor(self, port: str, absent: bool = False) -> Optional[TensorFacts]:
        """The facts of ``port``. An unbound optional port gives None where ``absent`` allows
        it (the reading members) and E_REGISTRY elsewhere: asserting about a tensor the call
        did not pass is a bug in the relation, which must test ``s.bound(port)`` first."""
        state = self._state
        tensor = state.inputs.get(port) or state.outputs.get(port)
        if tensor is not None:
            return tensor
        if port in state.spec.optional_inputs:
            if absent:
                return None
            raise HNDLError(
                "E_REGISTRY",
                f"relation of {self.spec.alias} asserts about optional port {port!r}, which this call "
                f"leaves unbound",
                node=state.node.id,
                remedies=(f"Guard the assertion with `if s.bound({port!r}):` in the relation.",),
            )
        raise HNDLError(
            "E_REGISTRY",
            f"relation of {self.spec.alias} names port {port!r}, which it does not declare "
            f"(ports: {', '.join((*state.inputs, *state.outputs))})",
            node=state.node.id,
        )

    def _reason(self, text: str) -> str:
        return f"node {self._state.node.id} ({self.spec.alias}) relation: {text}"


def _known(tensor: TensorFacts, axis: int, var: int) -> Optional[int]:
    """The value of ``tensor``'s axis variable ``var``, or None: read from the tensor's cached
    rendering while it is current (an entry renders as an int exactly when its variable holds a
    value), else asked of the facts, so that a rendering dropped by a new fact is not redrawn here."""
    rendered = tensor.watch.rendered
    if rendered is None:
        return tensor.facts.value(var)
    entry = rendered[axis]
    return entry if type(entry) is int else None
