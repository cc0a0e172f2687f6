"""Canonical plan JSON, its two digests, and validated restoration (§10, §12).

Encoding: sorted keys, compact separators, UTF-8 without ASCII escaping, arrays for tuples,
finite numbers only. The semantic digest covers the concrete graph (identities, arguments,
port contracts, construction records, contracts, dtypes); the artifact digest covers the
whole saved plan except itself. Restoration never re-runs source, a callable or a policy
choice: it checks the format, the versions and the digests, then revalidates every node's
concrete equations against the supplied registry's declarations.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from json.encoder import encode_basestring
from types import MappingProxyType
from typing import Any, Mapping, Optional

from .bounded_read import read_bounded
from .collector import collector_paused
from .construction import check_initialization_record, check_trainability_record
from .contracts import COMPUTE_DTYPES, INTEGER_DTYPES, PORT_NAME, batch_multiple
from .errors import HNDLError
from .graph import NODE_ID, Ref
from .limits import validate_limits
from .plan import (
    SCALARS,
    freeze,
    thaw,
    DEFAULT_INITIALIZATION,
    DEFAULT_TRAINABILITY,
    RESOLUTION_VERSION,
    SCHEMA_VERSION,
    PlanNode,
    ResolvedPlan,
)

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


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def _is_single_port(plan: ResolvedPlan) -> bool:
    return (
        len(plan.inputs) == 1 and plan.inputs[0]["name"] == "x"
        and len(plan.outputs) == 1 and plan.outputs[0]["name"] == "output"
    )


def _semantic_record(record: Mapping[str, Any]) -> dict:
    """The part of a plan record the semantic digest covers."""
    semantic = {
        key: record[key]
        for key in ("schema_version", "resolution_version", "dtype", "input_dtype", "input_shape",
                    "output_shape", "output_ref", "inputs", "outputs")
        if key in record
    }
    semantic["nodes"] = [{key: node[key] for key in SEMANTIC_NODE_FIELDS} for node in record["nodes"]]
    return semantic


def plan_record(plan: ResolvedPlan) -> dict:
    """The saved form of ``plan`` without its digests, ready for ``canonical``."""
    record = _header_record(plan)
    record["nodes"] = [_node_record(node) for node in plan.nodes]
    return record


def _header_record(plan: ResolvedPlan) -> dict:
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
    if not _is_single_port(plan):
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


def _body(record: Mapping[str, Any]) -> bytes:
    """Canonical bytes of every field but ``digests``, after the opening brace.

    ``digests`` sorts first among the plan's fields, so the full encoding is the digests object
    followed by this body: one encoding serves both digests and the saved text.
    """
    return canonical({key: value for key, value in record.items() if key != "digests"})[1:]


def _with_digests(body: bytes, semantic: str, artifact: Optional[str] = None) -> bytes:
    digests = (f'"artifact":"{artifact}",' if artifact is not None else "") + f'"semantic":"{semantic}"'
    return b'{"digests":{' + digests.encode("ascii") + b"}," + body


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def to_json(plan: ResolvedPlan) -> str:
    """Canonical JSON text of ``plan``, with its semantic and artifact digests."""
    with collector_paused():
        return _encode(plan)


def _encode(plan: ResolvedPlan) -> str:
    record = plan_record(plan)
    semantic = _digest(_semantic_record(record))
    body = _body(record)
    artifact = _sha256(_with_digests(body, semantic))
    return _with_digests(body, semantic, artifact).decode("utf-8")


def semantic_digest(plan: ResolvedPlan) -> str:
    return _digest(_semantic_record(plan_record(plan)))


# -- the size a plan will have once saved -------------------------------------------------------------
_DIGEST_PLACEHOLDER = "sha256:" + "0" * 64
#: Bytes the digests object adds to the encoded fields (both digests are fixed-width).
DIGESTS_BYTES = len(_with_digests(b"}", _DIGEST_PLACEHOLDER, _DIGEST_PLACEHOLDER)) - 1
#: Bytes of a node's field names and punctuation around its values.
NODE_OVERHEAD = len(canonical({field: 0 for field in NODE_FIELDS})) - len(NODE_FIELDS)
_SHARED_SIZES = {id(DEFAULT_INITIALIZATION): len(canonical(DEFAULT_INITIALIZATION)),
                 id(DEFAULT_TRAINABILITY): len(canonical(DEFAULT_TRAINABILITY))}
_WIDE_INT = 10**19  # any int strictly inside +-10**19 is at most 20 characters


def require_savable(plan: ResolvedPlan) -> None:
    """Refuse, at resolution, a plan that could not be saved and restored (§10: 16 MiB, UTF-8).

    Node sizes are bounded without encoding them (``_size_bound``: exact for ASCII text,
    numbers at their widest, 1.2-1.5x the real size), a walk about half the cost of encoding;
    only a plan whose bound passes MAX_PLAN_BYTES is encoded to measure it exactly.
    """
    node_id = None
    try:
        size = len(canonical(_header_record(plan))) + DIGESTS_BYTES + len(',"nodes":[]')
        for node in plan.nodes:
            node_id = node.id
            size += _node_bound(node)
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
    if size <= MAX_PLAN_BYTES:
        return
    exact = len(_body(plan_record(plan))) + DIGESTS_BYTES
    if exact > MAX_PLAN_BYTES:
        raise HNDLError(
            "E_RESOURCE",
            f"the plan of {len(plan.nodes)} nodes would be saved as {exact} bytes of JSON, above the "
            f"{MAX_PLAN_BYTES // 2**20} MiB a saved plan may hold (MAX_PLAN_BYTES), so it could not be restored",
            remedies=("Shrink the graph, or shorten the names and text arguments its nodes repeat.",),
        )


def _node_bound(node: PlanNode) -> int:
    """At least the bytes ``node`` adds to the saved node list, its comma included."""
    shared = _SHARED_SIZES
    initialization, trainability = node.initialization, node.trainability
    return (
        NODE_OVERHEAD + 1  # the comma after it in the node list
        + _size_bound(node.id) + _size_bound(node.op) + _size_bound(node.args) + _size_bound(node.inputs)
        + _size_bound(node.outputs) + _size_bound(node.input_shapes) + _size_bound(node.output_shapes)
        + (shared.get(id(initialization)) or _size_bound(initialization))
        + (shared.get(id(trainability)) or _size_bound(trainability))
        + _size_bound(node.source) + _size_bound(node.provenance)
    )


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


# -- restoration --------------------------------------------------------------------------------------
def from_json(text: Any, *, registry=None, limits: Optional[Mapping[str, int]] = None) -> ResolvedPlan:
    """Restore a saved plan, checking format, versions, digests and every concrete equation."""
    with collector_paused():
        return _restore(text, registry, limits)


def _restore(text: Any, registry, limits: Optional[Mapping[str, int]]) -> ResolvedPlan:
    validate_limits(limits)
    text, record = _load(text)
    try:
        _check_format(record)
        _check_versions(record)
        _check_digests(record, text)
        from .registry import Registry  # the registry imports plans' consumers; keep this edge lazy

        registry = Registry.builtins() if registry is None else registry
        plan = _rebuild(record, registry)
        from .resolve.revalidate import revalidate

        revalidate(plan, registry, limits=validate_limits(limits))
    except RecursionError:  # a backstop: the format checks bound every nesting they allow
        raise HNDLError("E_RESOURCE", "plan JSON nests too deeply") from None
    return plan


def read_plan_file(path: str) -> bytes:
    """The bytes of a host-supplied plan file, read bounded and non-blocking (E_SCHEMA if unreadable)."""
    return read_bounded(path, MAX_PLAN_BYTES, what="the saved plan", remedy=PLAN_FILE_REMEDY)


def _schema(message: str, field: Optional[str] = None) -> HNDLError:
    return HNDLError(
        "E_SCHEMA", f"saved plan: {message}", field=field,
        remedies=("Restore from the file HNDL wrote; saved plans are not meant to be edited by hand.",),
    )


def _load(text: Any) -> tuple[str, dict]:
    """The text and its decoded record (duplicate keys are looked for once digests are checked).

    Both must be UTF-8 text: a lone surrogate, raw in a ``str`` or as a ``\\udXXX`` escape,
    can never be encoded again, so it is refused here instead of failing as a UnicodeError later.
    """
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_PLAN_BYTES:
            raise HNDLError("E_RESOURCE", f"plan JSON is {len(text)} bytes, above the 16 MiB bound")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise _schema(f"not UTF-8 text (byte {error.start}: {error.reason})") from None
    if not isinstance(text, str):
        raise _schema(f"expected JSON text, got {type(text).__name__}")
    if len(text) > MAX_PLAN_BYTES:
        raise HNDLError("E_RESOURCE", "plan JSON is above the 16 MiB bound")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise _schema(f"not UTF-8 text: character {error.start} is the lone surrogate "
                      f"{ascii(text[error.start])}") from None
    if size > MAX_PLAN_BYTES:
        raise HNDLError("E_RESOURCE", "plan JSON is above the 16 MiB bound")
    record = _decode(text)
    if not isinstance(record, dict):
        raise _schema("the top level must be an object")
    if SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogates(record)
    return text, record


def _refuse_lone_surrogates(record: dict) -> None:
    """E_SCHEMA, naming the top-level field, if any key or string below holds a lone surrogate
    (JSON pairs of escapes decode to one character and pass). Iterative: nesting is unchecked yet."""
    for field, value in record.items():
        pending = [field, value]
        while pending:
            item = pending.pop()
            if isinstance(item, str):
                found = SURROGATE.search(item)
                if found is not None:
                    raise _schema(f"{field} holds the lone surrogate {ascii(found.group())}, which is not UTF-8 text",
                                  field)
            elif isinstance(item, dict):
                pending.extend(item)
                pending.extend(item.values())
            elif isinstance(item, list):
                pending.extend(item)


def _decode(text: str, *, pairs_hook=None) -> Any:
    try:
        return json.loads(text, object_pairs_hook=pairs_hook, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise HNDLError("E_RESOURCE", "plan JSON nests too deeply") from None
    except ValueError as error:
        if isinstance(error, _Refused):
            raise _schema(str(error)) from None
        raise _schema(f"not valid JSON ({error})") from None


def _check_depth(value: Any, depth: int) -> None:
    """Refuse free-form data (frontend, argument values) nesting past MAX_PLAN_DEPTH in all.

    Checked iteratively before anything recursive (digests, freezing) touches the record;
    every other field has a fixed shape that the format checks pin down.
    """
    level = [value] if type(value) is dict or type(value) is list else []
    while level:
        depth += 1
        if depth > MAX_PLAN_DEPTH:
            raise HNDLError("E_RESOURCE", f"plan JSON nests deeper than {MAX_PLAN_DEPTH} levels")
        below = []
        for item in level:
            for child in (item.values() if type(item) is dict else item):
                if type(child) is dict or type(child) is list:
                    below.append(child)
        level = below


class _Refused(ValueError):
    pass


def _unique_keys(pairs: list) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _Refused(f"duplicate field {duplicate!r}")
    return result


def _no_constant(name: str):
    raise _Refused(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"non-finite number {text}")
    return value


def _check_format(record: dict) -> None:
    keys = set(record)
    missing = PLAN_FIELDS - keys
    unexpected = keys - PLAN_FIELDS - OPTIONAL_PLAN_FIELDS
    if missing or unexpected:
        raise _schema(
            "; ".join(part for part in (
                f"missing {', '.join(sorted(missing))}" if missing else "",
                f"unexpected {', '.join(sorted(unexpected))}" if unexpected else "",
            ) if part),
        )
    if ("inputs" in record) != ("outputs" in record):
        raise _schema("inputs and outputs are saved together or not at all", "inputs")
    for field in ("schema_version", "resolution_version"):
        if type(record[field]) is not int:
            raise _schema(f"{field} must be an integer", field)
    _expect(isinstance(record["frontend"], dict), "frontend must be an object", "frontend")
    _check_depth(record["frontend"], 1)
    _expect(record["dtype"] in COMPUTE_DTYPES, f"dtype {record['dtype']!r} is not a compute dtype", "dtype")
    _expect(record["input_dtype"] in COMPUTE_DTYPES + INTEGER_DTYPES, "input_dtype is malformed", "input_dtype")
    _expect(isinstance(record["output_ref"], str), "output_ref must be text", "output_ref")
    digests = record["digests"]
    _expect(isinstance(digests, dict) and set(digests) == {"semantic", "artifact"}
            and all(isinstance(value, str) and DIGEST.match(value) for value in digests.values()),
            "digests must be exactly semantic and artifact, each 'sha256:' and 64 lowercase hex digits",
            "digests")
    _expect(isinstance(record["nodes"], list), "nodes must be a list", "nodes")
    for node in record["nodes"]:
        _check_node_format(node)
    batch = _check_contracts(record)
    for node in record["nodes"]:
        _check_node_shapes(node, batch)


def _ports(record: dict) -> tuple[Any, Any]:
    """The saved external inputs and public outputs, or the single-port defaults they stand for."""
    if "inputs" in record:  # an empty list is malformed, not the single-port default
        return record["inputs"], record["outputs"]
    return ([{"name": "x", "shape": record["input_shape"], "dtype": record["input_dtype"]}],
            [{"name": "output", "ref": record["output_ref"], "shape": record["output_shape"]}])


def _check_contracts(record: dict) -> str:
    """Check the external contracts and return the plan's batch symbol (§3: one, never a multiple)."""
    inputs, outputs = _ports(record)
    _check_ports(inputs, ("name", "shape", "dtype"), "inputs")
    _check_ports(outputs, ("name", "ref", "shape"), "outputs")
    _expect(inputs[0]["shape"] == record["input_shape"] and inputs[0]["dtype"] == record["input_dtype"]
            and outputs[0]["shape"] == record["output_shape"] and outputs[0]["ref"] == record["output_ref"],
            "input_shape/input_dtype/output_shape/output_ref must restate the first input and output", "inputs")
    if "inputs" in record:
        _expect(not (len(inputs) == 1 and inputs[0]["name"] == "x" and len(outputs) == 1
                     and outputs[0]["name"] == "output"),
                "a single x -> output plan stores no inputs/outputs fields", "inputs")
    batch = inputs[0]["shape"][0]
    _expect(isinstance(batch, str) and batch.isidentifier(), "axis 0 of input_shape must be the batch symbol", "input_shape")
    for port in (*inputs, *outputs):
        _expect(port["shape"][0] == batch, "every external contract must use the plan's batch symbol", "inputs")
        _check_extents(port["shape"][1:], "inputs")
    return batch


def _check_node_shapes(node: dict, batch: str) -> None:
    """Every port shape is a well-spelled batch entry (§3) and positive extents, digests unseen."""
    for field in ("input_shapes", "output_shapes"):
        for shape in node[field].values():
            try:
                batch_multiple(shape[0], batch, field=field)
            except HNDLError as error:
                raise error.located(node=node["id"]) from None
            _check_extents(shape[1:], field)


def _check_node_format(node: Any) -> None:
    _expect(isinstance(node, dict), "every node must be an object", "nodes")
    keys = set(node)
    if keys != NODE_FIELDS:
        missing, unexpected = NODE_FIELDS - keys, keys - NODE_FIELDS
        raise _schema(
            f"node {node.get('id')!r}: "
            + "; ".join(part for part in (
                f"missing {', '.join(sorted(missing))}" if missing else "",
                f"unexpected {', '.join(sorted(unexpected))}" if unexpected else "",
            ) if part),
            "nodes",
        )
    where = f"node {node['id']!r}"
    _expect(isinstance(node["id"], str) and NODE_ID.match(node["id"]), f"{where}: malformed id", "id")
    _expect(isinstance(node["op"], str) and "@" in node["op"], f"{where}: malformed op", "op")
    for field in ("args", "inputs", "input_shapes", "output_shapes", "initialization", "trainability",
                  "source", "provenance"):
        _expect(isinstance(node[field], dict), f"{where}: {field} must be an object", field)
    _check_depth(node["args"], 3)
    _expect(isinstance(node["outputs"], list) and all(isinstance(port, str) for port in node["outputs"]),
            f"{where}: outputs must be a list of port names", "outputs")
    _expect(all(isinstance(ref, str) for ref in node["inputs"].values()), f"{where}: malformed input references", "inputs")
    for field in ("input_shapes", "output_shapes"):
        for shape in node[field].values():
            _expect(isinstance(shape, list) and 2 <= len(shape) <= 4, f"{where}: malformed {field}", field)
    _expect(all(origin in ORIGINS for origin in node["provenance"].values()), f"{where}: unknown argument origin",
            "provenance")
    source = node["source"]
    _expect(set(source) == SOURCE_FIELDS, f"{where}: source must hold exactly {', '.join(sorted(SOURCE_FIELDS))}",
            "source")
    _expect(all(source[key] is None or (type(source[key]) is int and source[key] > 0) for key in ("line", "column")),
            f"{where}: source line and column must be positive integers or null", "source")
    _expect(source["policy"] is None or isinstance(source["policy"], str), f"{where}: source policy must be text or null",
            "source")
    derivations = source["derivations"]
    _expect(isinstance(derivations, dict) and all(
        isinstance(steps, list) and all(isinstance(step, str) for step in steps) for steps in derivations.values()
    ), f"{where}: source derivations must map arguments to lists of text", "source")


def _expect(condition: Any, message: str, field: Optional[str]) -> None:
    if not condition:
        raise _schema(message, field)


def _check_versions(record: dict) -> None:
    for field, supported in (("schema_version", SCHEMA_VERSION), ("resolution_version", RESOLUTION_VERSION)):
        if record[field] != supported:
            raise HNDLError(
                "E_STATE_VERSION",
                f"saved plan has {field} {record[field]}; this HNDL reads {field} {supported}",
                field=field,
                remedies=(
                    "Restore it with the HNDL release that wrote it, or re-resolve the original "
                    "specification with this release and transfer the weights explicitly.",
                ),
            )


def _check_digests(record: dict, text: str) -> None:
    """Both digests must match; text that is not canonical is searched for duplicate keys."""
    digests = record["digests"]
    body = _body(record)
    if _with_digests(body, digests["semantic"], digests["artifact"]).decode("utf-8") != text:
        _decode(text, pairs_hook=_unique_keys)  # canonical text cannot hide a duplicate key
    for name, expected, actual in (
        ("semantic", digests["semantic"], _digest(_semantic_record(record))),
        ("artifact", digests["artifact"], _sha256(_with_digests(body, digests["semantic"]))),
    ):
        if expected != actual:
            raise HNDLError(
                "E_INTEGRITY",
                f"the saved {name} digest {expected} does not match the plan's contents ({actual})",
                field=f"digests.{name}",
                remedies=("Restore the plan from an unmodified copy.",),
            )


def _rebuild(record: dict, registry) -> ResolvedPlan:
    """A ResolvedPlan from a record that passed the format checks; identities must be registered."""
    inputs, outputs = _ports(record)
    batch = inputs[0]["shape"][0]
    ids = [node["id"] for node in record["nodes"]]
    if len(set(ids)) != len(ids):
        twice = next(node_id for index, node_id in enumerate(ids) if node_id in ids[:index])
        raise HNDLError("E_INTEGRITY", f"node id {twice!r} is saved twice", node=twice, field="id",
                        remedies=("Restore the plan from an unmodified copy.",))
    nodes = []
    for node in record["nodes"]:
        spec = registry.by_identity(node["op"])
        in_ports = _declared_order(spec, node)
        # Every value below is built fresh from the decoded record and is already immutable
        # (tuples, mapping proxies over new dicts), so the node can skip freezing it again.
        nodes.append(PlanNode.restored(
            id=node["id"],
            op=node["op"],
            alias=spec.alias,
            args=MappingProxyType(_arguments(spec, node)),
            inputs=MappingProxyType({port: node["inputs"][port] for port in in_ports}),
            outputs=tuple(node["outputs"]),
            input_shapes=MappingProxyType({port: tuple(node["input_shapes"][port]) for port in in_ports}),
            output_shapes=MappingProxyType({port: tuple(node["output_shapes"][port]) for port in node["outputs"]}),
            initialization=_record(node["initialization"], DEFAULT_INITIALIZATION, check_initialization_record, node["id"]),
            trainability=_record(node["trainability"], DEFAULT_TRAINABILITY, check_trainability_record, node["id"]),
            source=freeze(_tuples(node["source"])),
            provenance=MappingProxyType(dict(node["provenance"])),
        ))
    return ResolvedPlan(
        frontend=record["frontend"],
        batch=batch,
        dtype=record["dtype"],
        inputs=tuple({"name": p["name"], "shape": tuple(p["shape"]), "dtype": p["dtype"]} for p in inputs),
        outputs=tuple({"name": p["name"], "ref": p["ref"], "shape": tuple(p["shape"])} for p in outputs),
        nodes=nodes,
        schema_version=record["schema_version"],
        resolution_version=record["resolution_version"],
    )


def _declared_order(spec, node: dict) -> tuple[str, ...]:
    """Input ports in the operator's declared binding order: JSON objects are saved with sorted
    keys, but modules receive their tensors positionally in declaration order."""
    saved = node["inputs"]
    try:
        ports = spec.input_ports(len(saved)) if spec.shape.variadic_input else spec.input_ports()
    except HNDLError:
        ports = ()
    if set(ports) != set(saved) or set(node["input_shapes"]) != set(saved) or set(node["output_shapes"]) != set(node["outputs"]):
        raise HNDLError(
            "E_BINDING",
            f"node {node['id']!r} saves input ports {sorted(saved)}, but {spec.qualified} declares {list(ports)}",
            node=node["id"],
            field="inputs",
        )
    return ports


def _record(saved: Any, default: Mapping, check, node_id: str) -> Any:
    """A construction record: the shared default as is, anything else checked canonically."""
    if saved == default:
        return default
    return freeze(check(saved, node=node_id))


def _check_ports(ports: Any, keys: tuple[str, ...], field: str) -> None:
    _expect(isinstance(ports, list) and ports, f"{field} must be a non-empty list", field)
    for port in ports:
        _expect(isinstance(port, dict) and set(port) == set(keys), f"{field} entries need exactly {', '.join(keys)}", field)
        _expect(isinstance(port["name"], str) and PORT_NAME.match(port["name"]), f"{field}: malformed port name", field)
        _expect(isinstance(port["shape"], list) and 2 <= len(port["shape"]) <= 4, f"{field}: malformed shape", field)
        if "dtype" in port:
            _expect(port["dtype"] in COMPUTE_DTYPES + INTEGER_DTYPES, f"{field}: malformed dtype", field)
        if "ref" in port:
            try:
                Ref.parse(port["ref"])
            except HNDLError:
                raise _schema(f"{field}: malformed reference {port['ref']!r}", field) from None
    _expect(len({port["name"] for port in ports}) == len(ports), f"{field}: duplicate port names", field)


def _check_extents(extents: list, field: str) -> None:
    for extent in extents:
        _expect(type(extent) is int and extent > 0, f"{field}: extents after the batch axis must be positive integers", field)


def _arguments(spec, node: dict) -> dict:
    """Saved arguments, validated against the declaration (inconsistent ones are E_INTEGRITY)."""
    args = node["args"]
    if set(args) != set(spec.args):
        raise HNDLError(
            "E_INTEGRITY",
            f"node {node['id']!r} saves arguments {sorted(args)}, but {spec.qualified} declares {sorted(spec.args)}",
            node=node["id"],
        )
    if set(node["provenance"]) != set(spec.args):
        raise _schema(f"node {node['id']!r}: provenance must name every argument", "provenance")
    result = {}
    for name, arg in spec.args.items():
        value = args[name]
        try:
            result[name] = arg.normalize(tuple(value) if isinstance(value, list) else value, name=name, node=node["id"])
        except HNDLError as error:
            raise HNDLError("E_INTEGRITY", f"saved argument is invalid: {error.message}", node=node["id"], field=name) from None
        if type(value) not in SCALARS or type(result[name]) is not type(value) or result[name] != value:
            if canonical(result[name]) != canonical(value):
                # resolution saves normalized values; anything else would re-encode to other bytes and digests
                raise HNDLError(
                    "E_INTEGRITY",
                    f"saved argument {name}={value!r} is not in its normalized form {thaw(result[name])!r}",
                    node=node["id"], field=name,
                    remedies=("Restore the plan from an unmodified copy.",),
                )
    return result


def _tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    return value
