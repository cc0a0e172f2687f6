"""Dimension facts: variables joined by exact ratios, with values that are only ever added.

Each tensor axis the resolver sees is a variable. Variables are joined into classes by exact
rational ratios (``a = 2 * b``), so equality and integer scales propagate in every direction
at once. A class holds at most one value; adding a second, different value is a contradiction
reported with the facts that produced both. The plan's batch is one special class that never
receives a value: a variable in it renders as ``B`` or ``k*B``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from ..contracts import MAX_BATCH_MULTIPLE
from ..errors import HNDLError


class Facts:
    """Union-find over dimension variables with exact ratios, values and reasons."""

    def __init__(self, *, batch_symbol: str = "B", max_dimension: int = 2**31 - 1, max_multiple: int = MAX_BATCH_MULTIPLE) -> None:
        self.batch_symbol = batch_symbol
        self.max_multiple = max_multiple
        self.max_dimension = max_dimension
        self._parent: list[int] = []
        self._ratio: list = []  # value(var) = ratio * value(parent); an int, or a Fraction when not whole
        self._members: dict[int, list[int]] = {}
        self._value: dict[int, int] = {}
        self._reason: dict[int, str] = {}
        self._origin: dict[int, tuple] = {}  # root -> (var given the value, why, premise vars, actor)
        self._bounds: dict[int, tuple[int, int, str]] = {}  # root -> (lo, hi, reason), root units
        self._labels: list[str] = []
        self._proof: dict[int, tuple[int, str, Optional[str]]] = {}  # proof forest: var -> (neighbour, equation, actor)
        self._ports: set[int] = set()  # the variables that are axes of a tensor (what messages name)
        #: The Watch of the tensor each port variable is an axis of, told when the variable's
        #: rendering changes. A Watch holds no reference back, so no reference cycle forms.
        self._observers: dict[int, "Watch"] = {}
        #: Who is adding facts now: (name, location keywords) of the node being applied, or None
        #: for the external contracts. Contradictions blame the node whose fact disagrees with them.
        self.actor: Optional[tuple[str, dict]] = None
        #: Incremented whenever a fact is added; the solver's fixed-point test reads it.
        self.version = 0
        self.batch = self.new("batch")

    # -- variables ------------------------------------------------------------------------
    def new(self, label: str, *, port: bool = False, observer: Optional["Watch"] = None) -> int:
        """A fresh, unconstrained variable; ``port`` marks an axis of a tensor, ``observer`` is
        that tensor's Watch, told whenever the variable's rendering changes."""
        var = len(self._parent)
        self._parent.append(var)
        self._ratio.append(1)
        self._members[var] = [var]
        self._labels.append(label)
        if port:
            self._ports.add(var)
        if observer is not None:
            self._observers[var] = observer
        return var

    def new_known(self, label: str, value: int, reason: str, *, port: bool = False,
                  observer: Optional["Watch"] = None) -> int:
        """A fresh variable that already holds ``value`` (a checked extent, e.g. from a saved plan)."""
        if type(value) is not int or not 0 < value <= self.max_dimension:
            raise HNDLError("E_CONSTRAINT", f"{label} would be {value!r}, not a positive extent", chain=(reason,))
        var = self.new(label, port=port, observer=observer)
        self._value[var] = value
        self._reason[var] = reason
        self._origin[var] = (var, reason, (), None)
        self.version += 1
        return var

    def label(self, var: int) -> str:
        return self._labels[var]

    def find(self, var: int) -> tuple[int, "int | Fraction"]:
        """The class root of ``var`` and the ratio with ``value(var) = ratio * value(root)``."""
        parent = self._parent
        up = parent[var]
        if up == var:
            return var, 1
        if parent[up] == up:
            return up, self._ratio[var]
        path = []
        while parent[var] != var:
            path.append(var)
            var = parent[var]
        root = var
        # Compress: walk back from the node nearest the root.
        ratios = self._ratio
        acc = 1
        for node in reversed(path):
            acc = _whole(ratios[node] * acc)
            ratios[node] = acc
            parent[node] = root
        return root, ratios[path[0]]

    # -- reading ----------------------------------------------------------------------------
    def value(self, var: int) -> Optional[int]:
        """The concrete extent of ``var``, or None while unknown (always None for batch)."""
        root, ratio = self.find(var)
        if root not in self._value:
            return None
        return int(ratio * self._value[root])

    def batch_multiple(self, var: int) -> Optional[Fraction]:
        """k when ``var`` is known to be k times the plan batch, else None."""
        root, ratio = self.find(var)
        batch_root, batch_ratio = self.find(self.batch)
        if root != batch_root:
            return None
        return _quotient(ratio, batch_ratio)

    def render(self, var: int) -> Optional[object]:
        """``B``, ``k*B`` or an int for a known extent; None while unknown."""
        root, ratio = self.find(var)
        value = self._value.get(root)
        if value is not None:
            return ratio * value if type(ratio) is int else int(ratio * value)
        batch_root, batch_ratio = self.find(self.batch)
        if root != batch_root:
            return None
        multiple = _quotient(ratio, batch_ratio)
        if multiple == 1:
            return self.batch_symbol
        if type(multiple) is int:
            return f"{multiple}*{self.batch_symbol}"
        return None

    def interval(self, var: int) -> Optional[tuple[int, int]]:
        """The inclusive integer interval known for an unknown ``var``, if any."""
        root, ratio = self.find(var)
        if root not in self._bounds or root in self._value:
            return None
        lo, hi, _ = self._bounds[root]
        return int(lo * ratio), int(hi * ratio)

    def explain(self, var: int, *, premises: bool = True) -> tuple[str, ...]:
        """How ``var``'s value was derived: the premises' derivations (unless ``premises`` is
        False), the fact that fixed its class, then the equations leading from that fact to ``var``."""
        steps: list[str] = []
        self._explain(var, steps, set(), premises)
        return tuple(dict.fromkeys(steps))

    def _explain(self, var: int, steps: list[str], seen: set[int], deep: bool = True) -> None:
        root = self.find(var)[0]
        origin = self._origin.get(root)
        if origin is None or root in seen:
            return
        seen.add(root)
        source, why, premises, _ = origin
        for premise in premises if deep else ():
            self._explain(premise, steps, seen)
        steps.append(why)
        steps.extend(self.connection(source, var))

    def connection(self, a: int, b: int) -> tuple[str, ...]:
        """The equations that relate ``a`` to ``b`` in one class: the path between them in the proof forest."""
        return tuple(dict.fromkeys(why for why, _ in self._path(a, b)))

    def _path(self, a: int, b: int) -> list[tuple[str, Optional[str]]]:
        """(equation, actor) for each step of the proof-forest path from ``a`` to ``b``."""
        ancestors = {a: 0}
        steps_a = []
        node = a
        while node in self._proof:
            node, why, actor = self._proof[node]
            steps_a.append((why, actor))
            ancestors[node] = len(steps_a)
        steps_b = []
        node = b
        while node not in ancestors and node in self._proof:
            node, why, actor = self._proof[node]
            steps_b.append((why, actor))
        meet = ancestors.get(node, len(steps_a))
        return steps_a[:meet] + steps_b[::-1]

    def _link_proof(self, a: int, b: int, reason: str) -> None:
        """Record the equation a ~ b: re-root a's proof tree at a, then hang it under b."""
        node = a
        chain = []
        while node in self._proof:
            chain.append((node, self._proof[node]))
            node = self._proof[node][0]
        for child, _ in chain:
            del self._proof[child]
        for child, (parent, why, actor) in chain:
            self._proof[parent] = (child, why, actor)
        self._proof[a] = (b, reason, self.actor[0] if self.actor else None)

    def fixed_by(self, var: int) -> Optional[str]:
        """The node (``node n0 (conv)``) whose fact fixed the value of ``var``'s class; None when a
        contract fixed it or it has no value."""
        origin = self._origin.get(self.find(var)[0])
        return None if origin is None or origin[3] is None else origin[3][0]

    def reason(self, var: int) -> Optional[str]:
        """The fact that fixed the value of ``var``'s class, if any."""
        return self._reason.get(self.find(var)[0])

    # -- adding facts -------------------------------------------------------------------
    def set_value(self, var: int, value: int, reason: str, *, code: str = "E_CONSTRAINT", premises: tuple = ()) -> None:
        """Record ``var == value``; a different known value is a contradiction.

        ``premises`` are the variables the value was computed from, so explanations can follow them.
        """
        root, ratio = self.find(var)
        if root == self.find(self.batch)[0]:
            raise HNDLError(
                code,
                f"{self.label(var)} is a batch axis and cannot be fixed to {value}",
                chain=(reason,),
            )
        root_value = _quotient(value, ratio)
        if root in self._value:
            if self._value[root] != root_value:
                current = int(ratio * self._value[root])
                shown = self._shown(root, var)
                if shown != var:  # name a tensor axis of the class, at the extent the new fact gives it
                    implied = Fraction(value) * self.find(shown)[1] / ratio
                    if implied.denominator == 1:
                        value, current = int(implied), self.value(shown)
                    else:
                        shown = var
                raise HNDLError(
                    code,
                    f"{self.label(shown)} must be {value} but is already {current}",
                    chain=(self._reason[root], reason),
                )
            return
        members = self._members[root]
        if len(members) != 1 or type(root_value) is not int or not 0 < root_value <= self.max_dimension:
            self._check_members(root, root_value, reason, code, origin=var)
        if root in self._bounds:
            self._check_bounds(root, root_value, reason, code)
        self._value[root] = int(root_value)
        self._reason[root] = reason
        self._origin[root] = (var, reason, tuple(premises), self.actor)
        self.version += 1
        self._gained(members)

    def bound(self, var: int, lo: int, hi: int, reason: str, *, code: str = "E_CONSTRAINT", premises: tuple = ()) -> None:
        """Intersect ``var`` with the inclusive interval [lo, hi]; a single survivor fixes it."""
        root, ratio = self.find(var)
        if self.batch_multiple(var) is not None:
            return  # batch axes carry multiples, never extents
        if lo == hi and root not in self._bounds:
            self.set_value(var, lo, f"{reason} (the interval leaves one value)", code=code, premises=premises)
            return
        low = math.ceil(Fraction(lo) / ratio)
        high = math.floor(Fraction(hi) / ratio)
        if root in self._bounds:
            old_lo, old_hi, old_reason = self._bounds[root]
            if low <= old_lo and high >= old_hi:
                return
            low, high = max(low, old_lo), min(high, old_hi)
            reason = f"{old_reason}; {reason}"
        if low > high:
            raise HNDLError(
                code,
                f"{self.label(var)} has no admissible value: the intervals it must lie in do not overlap",
                chain=(reason,),
            )
        if root in self._value:
            self._check_bounds_value(root, low, high, self._value[root], reason, code)
            return
        self._bounds[root] = (low, high, reason)
        self.version += 1
        self._gained(self._members[root])  # a narrower interval is news to every relation reading it
        if low == high:
            self.set_value(root, int(low), f"{reason} (the interval leaves one value)", code=code, premises=premises)

    def equate(self, a: int, b: int, reason: str, *, ratio: int | Fraction = 1, code: str = "E_CONSTRAINT") -> None:
        """Record ``a == ratio * b``, merging the two classes."""
        if self._join_lone(a, b, reason, ratio):
            return
        root_a, ra = self.find(a)
        root_b, rb = self.find(b)
        # value(a) = ra * A, value(b) = rb * B, and value(a) = ratio * value(b)  =>  A = ratio*rb/ra * B
        if ra == 1 and type(ratio) is int and type(rb) is int:
            link = ratio * rb
        else:
            link = _quotient(ratio * rb, ra)
        if root_a == root_b:
            if link != 1:
                raise HNDLError(
                    code,
                    f"{self.label(a)} cannot equal {ratio} * {self.label(b)}: they are already related differently",
                    chain=(reason,),
                )
            return
        members = self._members
        # Attach the smaller class beneath the larger one; ``small`` is the variable on its side.
        if len(members[root_a]) > len(members[root_b]):
            root_a, root_b, link = root_b, root_a, _quotient(1, link)
            small, large = b, a
        else:
            small, large = a, b
        # now: A = link * B, attach A under B.
        values = self._value
        value_a, value_b = values.get(root_a), values.get(root_b)
        batch_root = self.find(self.batch)[0]
        if value_a is not None or value_b is not None:
            if (root_a == batch_root and value_b is not None) or (root_b == batch_root and value_a is not None):
                fixed = value_b if value_b is not None else value_a
                raise HNDLError(
                    code,
                    f"a batch axis cannot equal the fixed extent {fixed}",
                    chain=tuple(r for r in (self._reason.get(root_a), self._reason.get(root_b), reason) if r),
                )
            if value_a is not None and value_b is not None:
                if value_a == link * value_b:
                    return  # two known, agreeing extents: merging would add no information
                raise self._disagreement(a, b, ratio, reason, code)
            if value_a is not None:
                implied = _quotient(value_a, link)
                self._check_members(root_b, implied, f"{self._reason[root_a]}; {reason}", code)
                self._check_bounds(root_b, implied, reason, code)
                values[root_b] = int(implied)
                self._reason[root_b] = f"{self._reason[root_a]}; {reason}"
            else:
                extent = link * value_b
                if len(members[root_a]) != 1 or type(extent) is not int or not 0 < extent <= self.max_dimension:
                    self._check_members(root_a, extent, f"{self._reason[root_b]}; {reason}", code)
        moved = members[root_a]
        # The side whose variables render differently once merged: it gains a value or the batch.
        if value_a is not None or root_a == batch_root:
            gaining = list(members[root_b])
        elif value_b is not None or root_b == batch_root:
            gaining = moved
        else:
            gaining = ()
        self._link_proof(small, large, reason)
        origins = self._origin
        if root_a in origins:
            if root_b not in origins:
                origins[root_b] = origins[root_a]
            del origins[root_a]
        self._parent[root_a] = root_b
        self._ratio[root_a] = link
        members[root_b].extend(members.pop(root_a))
        if value_a is not None:
            values.pop(root_a, None)
            self._reason.pop(root_a, None)
        self.version += 1
        if gaining:
            self._gained(gaining)
        if root_a == batch_root:
            self._check_multiples(members[root_b], reason)
        elif root_b == batch_root:
            # A lone variable joining the batch at a whole multiple within bounds needs no walk.
            if len(moved) != 1 or type(link) is not int or not 1 <= link <= self.max_multiple or batch_root != self.batch:
                self._check_multiples(moved, reason)
        if root_a in self._bounds:
            lo, hi, why = self._bounds.pop(root_a)
            self.bound(root_a, lo, hi, why, code=code)

    def _join_lone(self, a: int, b: int, reason: str, ratio) -> bool:
        """``equate`` for its commonest case, with the same outcome: a lone, unconstrained
        variable (a pattern's fresh symbol or a new tensor axis) joins another class at a whole
        ratio that needs no check. False, having changed nothing, for every other case."""
        if type(ratio) is not int or ratio < 1:
            return False
        parent, members = self._parent, self._members
        if parent[a] == a and len(members[a]) == 1:
            lone, other = a, b  # equate attaches a lone ``a`` beneath b's class
            root, through = self.find(b)
        elif parent[b] == b and len(members[b]) == 1:
            lone, other = b, a  # ... and a lone ``b`` beneath a's class when that one is larger
            root, through = self.find(a)
            if len(members[root]) == 1:
                return False
        else:
            return False
        values = self._value
        if lone in values or lone in self._bounds:
            return False
        batch_root = self.find(self.batch)[0]
        if root == lone or lone == batch_root or type(through) is not int:
            return False
        if lone == a:
            link = ratio * through  # value(a) = ratio * value(b) = ratio * through * value(root)
        elif through % ratio == 0:
            link = through // ratio  # value(b) = value(a) / ratio
        else:
            return False
        value = values.get(root)
        if value is not None:
            if root == batch_root or not 0 < link * value <= self.max_dimension:
                return False
        elif root == batch_root:
            if not 1 <= link <= self.max_multiple or batch_root != self.batch:
                return False
        elif link < 1:
            return False
        # A lone class has no proof edges, origin or members to move: hang it beneath ``other``.
        self._proof[lone] = (other, reason, self.actor[0] if self.actor else None)
        parent[lone] = root
        self._ratio[lone] = link
        members[root].append(lone)
        del members[lone]
        self.version += 1
        if value is not None or root == batch_root:
            observer = self._observers.get(lone)
            if observer is not None:
                observer.changed()  # it now renders as an extent or a batch multiple
        return True

    def _gained(self, members) -> None:
        """Tell the tensors among ``members`` that what they know changed (a value, an interval or the
        batch), so their renderings are redrawn and their readers applied again."""
        observers = self._observers
        for member in members:
            tensor = observers.get(member)
            if tensor is not None:
                tensor.changed()

    def _shown(self, root: int, *preferred: int) -> int:
        """The variable a message names for a class: the first preferred one that is a tensor
        axis, else the class's first tensor axis, else the first preferred one."""
        for var in preferred:
            if var in self._ports:
                return var
        for member in self._members[root]:
            if member in self._ports:
                return member
        return preferred[0]

    def _side(self, var: int) -> tuple[int, Optional[tuple]]:
        """(the variable to name, the origin of the value) for the known class holding ``var``."""
        root = self.find(var)[0]
        origin = self._origin.get(root)
        if origin is None:
            return self._shown(root, var), None
        return self._shown(root, origin[0], var), origin

    def _disagreement(self, a: int, b: int, ratio, reason: str, code: str) -> HNDLError:
        """Two known classes that ``a == ratio * b`` would join disagree.

        The message names a tensor axis on each side with the fact that gave it its value, and
        the nodes whose equations carry one value to the other. It is located at the node that
        derived its side when the other side is an external contract: that node's rule is the
        one the contract contradicts.
        """
        (shown_a, origin_a), (shown_b, origin_b) = self._side(a), self._side(b)
        # value(shown_a) = factor * value(shown_b) is what the new equation would require.
        factor = Fraction(self.find(shown_a)[1]) * ratio * self.find(b)[1] / (self.find(a)[1] * self.find(shown_b)[1])
        first, second = (shown_a, origin_a, a), (shown_b, origin_b, b)
        actor_a = origin_a[3] if origin_a else None
        actor_b = origin_b[3] if origin_b else None
        if actor_a is None and actor_b is not None:
            first, second, factor = second, first, 1 / factor
        (var_1, origin_1, end_1), (var_2, origin_2, end_2) = first, second
        path = [*self._path(var_1, end_1), (reason, self.actor[0] if self.actor else None), *self._path(end_2, var_2)]
        through = tuple(dict.fromkeys(actor for _, actor in path if actor is not None))

        def given(origin):
            return f" ({origin[1]})" if origin else ""

        relation = "equal" if factor == 1 else f"be {_whole(Fraction(factor))} times"
        message = (f"{self.label(var_1)} is {self.value(var_1)}{given(origin_1)} but must {relation} "
                   f"{self.label(var_2)}, which is {self.value(var_2)}{given(origin_2)}")
        if through:
            message += f", through the equations of {' and '.join(through)}"
        steps: list[str] = []
        for var in (var_1, var_2):
            self._explain(var, steps, set())
        steps.extend(equation for equation, _ in path)
        blamed = [origin[3] for origin in (origin_1, origin_2) if origin and origin[3] is not None]
        where = blamed[0][1] if len(blamed) == 1 else {}
        return HNDLError(code, message, chain=tuple(dict.fromkeys(steps)), **where)

    def _check_multiples(self, members: list[int], reason: str) -> None:
        """Every variable tied to the batch must be a whole multiple of it, at most max_multiple."""
        for member in members:
            multiple = self.batch_multiple(member)
            if multiple.denominator != 1 or multiple < 1:
                raise HNDLError(
                    "E_CONSTRAINT",
                    f"{self.label(member)} would hold {multiple} plan batches; only whole multiples of "
                    f"the batch are possible",
                    chain=(reason,),
                )
            if multiple > self.max_multiple:
                raise HNDLError(
                    "E_RESOURCE",
                    f"{self.label(member)} would hold {multiple} plan batches, above {self.max_multiple}",
                    chain=(reason,),
                )

    def _check_bounds(self, root: int, root_value: Fraction, reason: str, code: str) -> None:
        if root in self._bounds:
            lo, hi, _ = self._bounds[root]
            self._check_bounds_value(root, lo, hi, root_value, reason, code)

    def _check_bounds_value(self, root: int, lo, hi, value, reason: str, code: str) -> None:
        if not lo <= value <= hi:
            raise HNDLError(
                code,
                f"{self.label(root)} would be {value}, outside the admissible interval [{lo}, {hi}]",
                chain=(self._bounds[root][2] if root in self._bounds else "", reason),
            )

    def _check_members(self, root: int, root_value: Fraction, reason: str, code: str, origin: Optional[int] = None) -> None:
        """Every member of the class must land on a positive integer within bounds."""
        worst = None
        for member in self._members[root]:
            _, ratio = self.find(member)
            extent = ratio * root_value
            if extent.denominator != 1 or extent <= 0:
                rank = (extent.denominator, "[" in self.label(member))
                if worst is None or rank > worst[0]:
                    worst = (rank, member, extent)
                continue
            if extent > self.max_dimension:
                raise HNDLError(
                    "E_RESOURCE",
                    f"{self.label(member)} would be {int(extent)}, above max_dimension={self.max_dimension}",
                    chain=(reason,),
                    remedies=("Shrink the specification or raise limits['max_dimension'].",),
                )
        if worst is not None:
            _, member, extent = worst
            shown = float(extent) if extent.denominator != 1 else int(extent)
            raise HNDLError(
                code,
                f"{self.label(member)} would be {shown}, which is not a positive integer",
                chain=(reason, *(self.connection(origin, member) if origin is not None else self.explain(member))),
            )


SUPPORTED_RANKS = (2, 3, 4)


class Mark:
    """A reader's dirty flag: set whenever something the reader reads changed."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty = True


class Watch:
    """One tensor's cached rendering and the Marks of its readers; Facts tells it of changes."""

    __slots__ = ("rendered", "readers")

    def __init__(self) -> None:
        self.rendered: Optional[tuple] = None
        self.readers: list[Mark] = []

    def changed(self) -> None:
        """The rank or an axis's rendering changed: drop the rendering, mark every reader dirty."""
        self.rendered = None
        for reader in self.readers:
            reader.dirty = True


class TensorFacts:
    """What is known about one tensor of the graph: its rank, then one variable per axis."""

    def __init__(self, facts: Facts, label: str) -> None:
        self.facts = facts
        self.label = label
        self.rank: Optional[int] = None
        self.rank_reason: Optional[str] = None
        #: The supported ranks a rank search found possible, while several remain (for diagnostics).
        self.rank_options: Optional[tuple[int, ...]] = None
        self.dims: Optional[list[int]] = None
        self.dtype: Optional[str] = None
        #: The rendering cache and the Marks of whoever reads this tensor (the solver's nodes).
        self.watch = Watch()

    def set_rank(self, rank: int, reason: str, *, code: str = "E_CONSTRAINT") -> None:
        """Fix the rank, creating the axis variables; a different rank is a contradiction."""
        if self.rank is not None:
            if self.rank != rank:
                raise HNDLError(
                    code,
                    f"{self.label} must have rank {rank} but has rank {self.rank}",
                    chain=(self.rank_reason, reason),
                )
            return
        if rank not in SUPPORTED_RANKS:
            raise HNDLError(
                code,
                f"{self.label} would have rank {rank}; supported ranks are 2, 3 and 4",
                chain=(reason,),
            )
        self.rank = rank
        self.rank_reason = reason
        self.dims = [self.facts.new(f"{self.label}[{axis}]", port=True, observer=self.watch) for axis in range(rank)]
        self.facts.version += 1
        self.changed()

    def seed(self, shape: tuple, batch_ratio: int, reason: str) -> None:
        """Give an unranked tensor a concrete shape at once: its batch multiple and known extents."""
        if self.rank is not None:
            raise HNDLError("E_CONSTRAINT", f"{self.label} is seeded twice", chain=(reason,))
        self.rank = len(shape)
        self.rank_reason = reason
        facts = self.facts
        batch = facts.new(f"{self.label}[0]", port=True, observer=self.watch)
        facts.equate(batch, facts.batch, reason, ratio=batch_ratio)
        self.dims = [batch, *(facts.new_known(f"{self.label}[{axis}]", extent, reason, port=True, observer=self.watch)
                              for axis, extent in enumerate(shape[1:], start=1))]
        facts.version += 1
        self.changed()

    def changed(self) -> None:
        """The rank or an axis's rendering changed (see Watch.changed)."""
        self.watch.changed()

    def rendered(self) -> Optional[tuple]:
        """The rendered entries as a tuple, computed once per change (see ``shape``)."""
        watch = self.watch
        rendered = watch.rendered
        if rendered is None and self.dims is not None:
            render = self.facts.render
            rendered = watch.rendered = tuple([render(var) for var in self.dims])
        return rendered

    def shape(self) -> Optional[list]:
        """Rendered entries (``B``, ``2*B``, ints, or None while unknown), or None without a rank."""
        rendered = self.rendered()
        return None if rendered is None else list(rendered)

    def complete(self) -> bool:
        rendered = self.rendered()
        return rendered is not None and None not in rendered


def _whole(ratio):
    """A ratio as an int when it is whole, so the common cases stay in fast int arithmetic."""
    if type(ratio) is int or ratio.denominator != 1:
        return ratio
    return ratio.numerator


def _quotient(numerator, denominator):
    """The exact quotient of two ratios, as an int when whole."""
    if type(numerator) is int and type(denominator) is int:
        if numerator % denominator == 0:
            return numerator // denominator
        return Fraction(numerator, denominator)
    return _whole(Fraction(numerator) / denominator)
