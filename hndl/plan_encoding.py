"""Canonical plan JSON, its two digests and the size bound a plan is refused by (§10, §12).

Encoding: sorted keys, compact separators, UTF-8 without ASCII escaping, arrays for tuples,
finite numbers only. The semantic digest covers the concrete graph (identities, arguments,
port contracts, construction records, contracts, dtypes); the artifact digest covers the
whole saved plan except itself. Everything here reads a plan's attributes; nothing imports
the plan types, so the plan's own methods can use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from itertools import chain
from json.encoder import encode_basestring
from operator import attrgetter, itemgetter, methodcaller
from types import MappingProxyType
from typing import Any, Mapping, Optional

from .collector import collector_paused
from .errors import HNDLError
from .plan_values import DEFAULT_INITIALIZATION, DEFAULT_TRAINABILITY, thaw

MAX_PLAN_BYTES = 16 * 2**20
PLAN_FILE_REMEDY = "Pass the path of a plan written by `hndl resolve --save` or ResolvedPlan.to_json()."
#: Deepest container nesting a saved plan may use (real plans stay near a dozen levels).
MAX_PLAN_DEPTH = 64
DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
#: A JSON escape of a UTF-16 surrogate; canonical text never holds one (it writes characters
#: as themselves), so only text that does is searched for a lone surrogate.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE = re.compile("[\ud800-\udfff]")
SOURCE_FIELDS = {"line", "column", "policy", "derivations"}
PLAN_FIELDS = {
    "schema_version", "resolution_version", "frontend", "dtype", "input_dtype", "input_shape",
    "output_shape", "output_ref", "nodes", "digests",
}
OPTIONAL_PLAN_FIELDS = {"inputs", "outputs"}
NODE_FIELDS = {
    "id", "op", "args", "inputs", "outputs", "input_shapes", "output_shapes", "initialization",
    "trainability", "source", "provenance",
}
SEMANTIC_NODE_FIELDS = (
    "id", "op", "args", "inputs", "outputs", "input_shapes", "output_shapes", "initialization", "trainability",
)
ORIGINS = ("explicit", "default", "policy", "inferred")


# -- encoding ------------------------------------------------------------------------------------
def canonical(value: Any) -> bytes:
    """The canonical JSON bytes of ``value`` (plan mapping proxies encode as objects, tuples as arrays)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_as_object,
    ).encode("utf-8")


def _as_object(value: Any) -> dict:
    if isinstance(value, MappingProxyType):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not part of the plan format")


def digest_of(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def is_single_port(plan) -> bool:
    return (
        len(plan.inputs) == 1 and plan.inputs[0]["name"] == "x"
        and len(plan.outputs) == 1 and plan.outputs[0]["name"] == "output"
    )


def semantic_record(record: Mapping[str, Any]) -> dict:
    """The part of a plan record the semantic digest covers."""
    semantic = {
        key: record[key]
        for key in ("schema_version", "resolution_version", "dtype", "input_dtype", "input_shape",
                    "output_shape", "output_ref", "inputs", "outputs")
        if key in record
    }
    semantic["nodes"] = [{key: node[key] for key in SEMANTIC_NODE_FIELDS} for node in record["nodes"]]
    return semantic


def plan_record(plan) -> dict:
    """The saved form of ``plan`` without its digests, ready for ``canonical``."""
    record = _header_record(plan)
    record["nodes"] = [_node_record(node) for node in plan.nodes]
    return record


def _header_record(plan) -> dict:
    """Every saved field of ``plan`` but its nodes and digests."""
    record: dict[str, Any] = {
        "schema_version": plan.schema_version,
        "resolution_version": plan.resolution_version,
        "frontend": plan.frontend,
        "dtype": plan.dtype,
        "input_dtype": plan.input_dtype,
        "input_shape": plan.input_shape,
        "output_shape": plan.output_shape,
        "output_ref": plan.output_ref,
    }
    if not is_single_port(plan):
        record["inputs"] = plan.inputs
        record["outputs"] = plan.outputs
    return record


_PLAIN_DEFAULTS = {id(DEFAULT_INITIALIZATION): thaw(DEFAULT_INITIALIZATION),
                   id(DEFAULT_TRAINABILITY): thaw(DEFAULT_TRAINABILITY)}


def _node_record(node: PlanNode) -> dict:
    """One node as plain JSON data; each field's shape is known, so no generic walk is needed."""
    source = node.source
    return {
        "id": node.id,
        "op": node.op,
        "args": dict(node.args),
        "inputs": dict(node.inputs),
        "outputs": node.outputs,
        "input_shapes": dict(node.input_shapes),
        "output_shapes": dict(node.output_shapes),
        "initialization": _PLAIN_DEFAULTS.get(id(node.initialization)) or thaw(node.initialization),
        "trainability": _PLAIN_DEFAULTS.get(id(node.trainability)) or thaw(node.trainability),
        "source": {key: (dict(value) if key == "derivations" else value) for key, value in source.items()},
        "provenance": dict(node.provenance),
    }


def fields_body(record: Mapping[str, Any]) -> bytes:
    """Canonical bytes of every field but ``digests``, after the opening brace.

    ``digests`` sorts first among the plan's fields, so the full encoding is the digests object
    followed by this body: one encoding serves both digests and the saved text.
    """
    return canonical({key: value for key, value in record.items() if key != "digests"})[1:]


def with_digests(body: bytes, semantic: str, artifact: Optional[str] = None) -> bytes:
    digests = (f'"artifact":"{artifact}",' if artifact is not None else "") + f'"semantic":"{semantic}"'
    return b'{"digests":{' + digests.encode("ascii") + b"}," + body


def sha256_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def to_json(plan) -> str:
    """Canonical JSON text of ``plan``, with its semantic and artifact digests."""
    with collector_paused():
        return _encode(plan)


def _encode(plan) -> str:
    record = plan_record(plan)
    semantic = digest_of(semantic_record(record))
    body = fields_body(record)
    artifact = sha256_of(with_digests(body, semantic))
    return with_digests(body, semantic, artifact).decode("utf-8")


def semantic_digest(plan) -> str:
    return digest_of(semantic_record(plan_record(plan)))


# -- the size a plan will have once saved -------------------------------------------------------------
_DIGEST_PLACEHOLDER = "sha256:" + "0" * 64
#: Bytes the digests object adds to the encoded fields (both digests are fixed-width).
DIGESTS_BYTES = len(with_digests(b"}", _DIGEST_PLACEHOLDER, _DIGEST_PLACEHOLDER)) - 1
#: Bytes of a node's field names and punctuation around its values.
NODE_OVERHEAD = len(canonical({field: 0 for field in NODE_FIELDS})) - len(NODE_FIELDS)
_SHARED_SIZES = {id(DEFAULT_INITIALIZATION): len(canonical(DEFAULT_INITIALIZATION)),
                 id(DEFAULT_TRAINABILITY): len(canonical(DEFAULT_TRAINABILITY))}
_WIDE_INT = 10**19  # any int strictly inside +-10**19 is at most 20 characters


def require_savable(plan) -> None:
    """Refuse, at resolution, a plan that could not be saved and restored (§10: 16 MiB, UTF-8).

    Node sizes are bounded without encoding them (numbers at their widest, text exactly,
    1.2-1.5x the real size); only a plan whose bound passes MAX_PLAN_BYTES is encoded to
    measure it exactly. ``_gathered_bound`` computes the bound in one flat pass; a plan it does
    not expect, or one holding bad text or a digit flood, is walked by ``_walked_bound``, which
    names the node at fault.
    """
    size = _gathered_bound(plan)
    if size is None:
        size = _walked_bound(plan)
    if size <= MAX_PLAN_BYTES:
        return
    exact = len(fields_body(plan_record(plan))) + DIGESTS_BYTES
    if exact > MAX_PLAN_BYTES:
        raise HNDLError(
            "E_RESOURCE",
            f"the plan of {len(plan.nodes)} nodes would be saved as {exact} bytes of JSON, above the "
            f"{MAX_PLAN_BYTES // 2**20} MiB a saved plan may hold (MAX_PLAN_BYTES), so it could not be restored",
            remedies=("Shrink the graph, or shorten the names and text arguments its nodes repeat.",),
        )


def _plan_frame_bytes(plan) -> int:
    """The bytes of the saved plan outside its node list's items."""
    return len(canonical(_header_record(plan))) + DIGESTS_BYTES + len(',"nodes":[]')


#: Per node, the bytes of its field names and punctuation, the braces of its eight containers
#: (args, inputs, outputs, both shape maps, source, derivations, provenance) and the comma
#: after it in the node list.
_NODE_FRAME = NODE_OVERHEAD + 1 + 2 * 8
_NODE_FIELDS = attrgetter(
    "id", "op", "args", "inputs", "outputs", "input_shapes", "output_shapes", "initialization",
    "trainability", "source", "provenance",
)
_SOURCE_SCALARS = itemgetter(*sorted(SOURCE_FIELDS - {"derivations"}))
_values = methodcaller("values")
_flat = chain.from_iterable
#: Integers whose JSON no float equal to them outgrows (floats below 1e16 print as at most 19 characters).
_NARROW_INT = 10**16


def _gathered_bound(plan) -> Optional[int]:
    """The bound ``_walked_bound`` gives (to a few bytes), computed field by field over all nodes
    at once with no Python code per node; None where only that walk can tell: a form it does not
    expect, a lone surrogate, a digit flood.

    The texts of every node (ids, names, keys, port bindings, explanations) are joined and
    measured once: a JSON escape is per character, so the joined escape is the sum of the parts.
    The other values are bounded once per distinct value, however many nodes repeat it.
    """
    nodes = plan.nodes
    if not nodes:
        return None
    try:
        (ids, ops, args, inputs, outputs, input_shapes, output_shapes, initializations, trainabilities,
         sources, provenances) = zip(*map(_NODE_FIELDS, nodes))
        derivations = tuple(map(itemgetter("derivations"), sources))
        source_scalars = tuple(_flat(map(_SOURCE_SCALARS, sources)))  # KeyError unless every source has them
        steps = tuple(_flat(map(_values, derivations)))
        expected = (
            set(map(type, outputs)) == {tuple} and set(map(type, derivations)) == {MappingProxyType}
            and set(map(type, steps)) <= {tuple} and sum(map(len, sources)) == len(SOURCE_FIELDS) * len(nodes)
        )
        if not expected:
            return None
        keys = list(_flat((*args, *inputs, *input_shapes, *output_shapes, *sources, *derivations, *provenances)))
        items = list(_flat((*outputs, *steps)))
        texts = [*ids, *ops, *_flat(map(_values, inputs)), *_flat(map(_values, provenances))]
        text_bytes = _text_bytes("".join(_flat((keys, items, texts))))
        values_bound = _distinct_values_bound((
            *_flat(map(_values, args)), *source_scalars,
            *_flat(map(_values, input_shapes)), *_flat(map(_values, output_shapes)),
        ))
        records_bound = _shared_objects_bound(initializations + trainabilities)
        return (
            _plan_frame_bytes(plan) + _NODE_FRAME * len(nodes) + 2 * len(steps)
            + text_bytes + 4 * len(keys) + 3 * len(items) + 2 * len(texts) + values_bound + records_bound
        )
    except Exception:  # a form, text or number only the walk reports, each exactly as it always has
        return None


def _text_bytes(text: str) -> int:
    """The UTF-8 bytes of ``text`` written as a JSON string, without its quotes."""
    if text.isascii() and text.isprintable():  # only quotes and backslashes are escaped
        return len(text) + text.count('"') + text.count("\\")
    escaped = encode_basestring(text)
    return (len(escaped) if escaped.isascii() else len(escaped.encode("utf-8"))) - 2


def _distinct_values_bound(values: tuple) -> int:
    """``_size_bound`` summed over ``values``, bounding each distinct value once.

    Equal values share one bound when the first of them stands for the others (``_stands_for_equals``);
    otherwise, and when a value is unhashable, each distinct object is bounded instead.
    """
    try:
        counts = Counter(values)
    except TypeError:  # a mapping among the values
        return _shared_objects_bound(values)
    if not all(map(_stands_for_equals, counts)):
        return _shared_objects_bound(values)
    return sum(count * _size_bound(value) for value, count in counts.items())


def _stands_for_equals(value: Any) -> bool:
    """Whether ``_size_bound(value)`` also bounds every value equal to it.

    Equality crosses types (``1 == 1.0 == True``): text, booleans and None are bounded
    alike whatever they equal, an int under 10**16 by 20 characters, which no float equal to
    it outgrows, and a float by 24, which only a long integer equal to it would outgrow.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_NARROW_INT < value < _NARROW_INT
    if kind is float:
        return -_NARROW_INT < value < _NARROW_INT or not value.is_integer()
    return kind is tuple and all(map(_stands_for_equals, value))


def _shared_objects_bound(values: tuple) -> int:
    """``_size_bound`` summed over ``values``, bounding each distinct object once."""
    counts = Counter(map(id, values))
    shared = _SHARED_SIZES
    if shared.keys() >= counts.keys():
        return sum(count * shared[key] for key, count in counts.items())
    objects = dict(zip(map(id, values), values))
    return sum(count * (shared.get(key) or _size_bound(objects[key])) for key, count in counts.items())


def _walked_bound(plan) -> int:
    """The plan's size bound, node by node, refusing the node that holds a lone surrogate or
    an integer too long to write."""
    node_id = None
    try:
        size = _plan_frame_bytes(plan)
        shapes: dict[int, int] = {}
        for node in plan.nodes:
            node_id = node.id
            size += _node_bound(node, shapes)
    except UnicodeEncodeError as error:
        raise HNDLError(
            "E_SCHEMA",
            f"the plan holds the lone surrogate {ascii(error.object[error.start])}, which is not UTF-8 text "
            "and could never be saved",
            node=node_id,
            remedies=("Pass names and text arguments as valid Unicode text.",),
        ) from None
    except ValueError as error:  # Python's 4300-digit limit on int -> str
        raise HNDLError("E_RESOURCE", f"the plan holds an integer too long to save ({error})", node=node_id,
                        remedies=("Use integers of at most a few dozen digits.",)) from None
    return size


def _node_bound(node: PlanNode, shapes: dict) -> int:
    """At least the bytes ``node`` adds to the saved node list, its comma included.

    ``shapes`` memoizes shape tuples by identity: a resolved plan shares one tuple between the
    producer's output and each consumer's input.
    """
    shared = _SHARED_SIZES
    initialization, trainability = node.initialization, node.trainability
    source = node.source
    derivations = source["derivations"]
    return (
        NODE_OVERHEAD + 1  # the comma after it in the node list
        + _text_bound(node.id) + _text_bound(node.op) + _size_bound(node.args) + _texts_bound(node.inputs)
        + _size_bound(node.outputs) + _shapes_bound(node.input_shapes, shapes)
        + _shapes_bound(node.output_shapes, shapes)
        + (shared.get(id(initialization)) or _size_bound(initialization))
        + (shared.get(id(trainability)) or _size_bound(trainability))
        + (_source_bound(source, derivations) if type(derivations) is MappingProxyType else _size_bound(source))
        + _texts_bound(node.provenance)
    )


def _text_bound(value: Any) -> int:
    if type(value) is not str:
        return _size_bound(value)
    text = encode_basestring(value)
    return len(text) if value.isascii() else len(text.encode("utf-8"))


def _texts_bound(mapping: Mapping) -> int:
    """A mapping of text to text (port bindings, provenance)."""
    return 2 + 2 * len(mapping) + sum(map(_text_bound, mapping)) + sum(map(_text_bound, mapping.values()))


def _shapes_bound(mapping: Mapping, seen: dict) -> int:
    size = 2 + 2 * len(mapping) + sum(map(_text_bound, mapping))
    for shape in mapping.values():
        known = seen.get(id(shape))
        if known is None:
            known = seen[id(shape)] = _size_bound(shape)
        size += known
    return size


def _source_bound(source: Mapping, derivations: Mapping) -> int:
    size = 2 + 2 * len(source) + sum(map(_text_bound, source))
    for key, value in source.items():
        if key != "derivations":
            size += _size_bound(value)
    size += 2 + 2 * len(derivations) + sum(map(_text_bound, derivations))
    for steps in derivations.values():
        size += 2 + len(steps) + sum(map(_text_bound, steps)) if type(steps) is tuple else _size_bound(steps)
    return size


def _size_bound(value: Any) -> int:
    """At least the canonical JSON bytes of plan data ``value``, computed without encoding it."""
    kind = type(value)
    if kind is str:
        text = encode_basestring(value)  # quoted and escaped exactly as the encoder writes it
        return len(text) if value.isascii() else len(text.encode("utf-8"))
    if kind is int:
        return 20 if -_WIDE_INT < value < _WIDE_INT else len(str(value))
    if kind is tuple or kind is list:
        return 2 + len(value) + sum(map(_size_bound, value))
    if kind is MappingProxyType or kind is dict:
        return 2 + 2 * len(value) + sum(map(_size_bound, value)) + sum(map(_size_bound, value.values()))
    return 24  # float (repr is at most 24 characters), bool, None
