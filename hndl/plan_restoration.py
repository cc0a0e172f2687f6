"""Validated restoration of saved plan JSON (§10, §12).

Restoration never re-runs source, a callable or a policy choice: it checks the format, the
versions and the digests, then revalidates every node's concrete equations against the
supplied registry's declarations. The plan types to build are passed in (``ResolvedPlan``
restores through here), so this module sits below them.
"""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any, Mapping, Optional

from .bounded_read import read_bounded
from .collector import collector_paused
from .construction import check_initialization_record, check_trainability_record
from .contracts import COMPUTE_DTYPES, INTEGER_DTYPES, PORT_NAME, batch_multiple
from .errors import HNDLError, echo, listed, shown
from .graph import NODE_ID, Ref
from .limits import validate_limits
from .plan_encoding import (
    DIGEST,
    MAX_PLAN_BYTES,
    MAX_PLAN_DEPTH,
    NODE_FIELDS,
    OPTIONAL_PLAN_FIELDS,
    ORIGINS,
    PLAN_FIELDS,
    PLAN_FILE_REMEDY,
    SOURCE_FIELDS,
    SURROGATE,
    SURROGATE_ESCAPE,
    fields_body,
    canonical,
    digest_of,
    semantic_record,
    sha256_of,
    with_digests,
)
from .plan_values import DEFAULT_INITIALIZATION, DEFAULT_TRAINABILITY, RESOLUTION_VERSION, SCALARS, SCHEMA_VERSION, exact_key, freeze, thaw
from .registry import Registry
from .resolve.revalidate import revalidate


def restore(text: Any, *, plan_type: type, node_type: type, registry=None,
            limits: Optional[Mapping[str, int]] = None) -> Any:
    """Restore a saved plan as ``plan_type`` with ``node_type`` nodes, checking format,
    versions, digests and every concrete equation."""
    with collector_paused():
        return _restore(text, plan_type, node_type, registry, limits)


def _restore(text: Any, plan_type: type, node_type: type, registry, limits: Optional[Mapping[str, int]]) -> Any:
    limits = validate_limits(limits)
    text, record = _load(text)
    try:
        _check_node_count(record, limits["max_nodes"])
        _check_format(record)
        _check_versions(record)
        _check_digests(record, text)
        registry = Registry.builtins() if registry is None else registry
        plan = _rebuild(record, registry, plan_type, node_type)
        revalidate(plan, registry, limits=limits)
    except RecursionError:  # a backstop: the format checks bound every nesting they allow
        raise HNDLError("E_RESOURCE", "plan JSON nests too deeply") from None
    return plan


def _check_node_count(record: dict, max_nodes: int) -> None:
    """E_RESOURCE for a node list longer than ``max_nodes``, counted on the decoded record
    before the format, digest and rebuild passes spend seconds on a plan revalidation would
    refuse anyway (a well-formed node list is a JSON array of one object per node)."""
    nodes = record.get("nodes")
    if type(nodes) is list and len(nodes) > max_nodes:
        raise HNDLError(
            "E_RESOURCE",
            f"the saved plan has {len(nodes)} nodes, above max_nodes={max_nodes}",
            field="nodes",
            remedies=("Restore it with a larger limits['max_nodes'] if the plan is trusted, or shrink the graph.",),
        )


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
                    raise _schema(f"{echo(field)} holds the lone surrogate {ascii(found.group())}, which is not "
                                  "UTF-8 text", field)
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
        raise _Refused(f"duplicate field {shown(duplicate)}")
    return result


def _no_constant(name: str):
    raise _Refused(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"non-finite number {echo(text)}")
    return value


def _check_format(record: dict) -> None:
    keys = set(record)
    missing = PLAN_FIELDS - keys
    unexpected = keys - PLAN_FIELDS - OPTIONAL_PLAN_FIELDS
    if missing or unexpected:
        raise _schema(_fields_difference(missing, unexpected))
    if ("inputs" in record) != ("outputs" in record):
        raise _schema("inputs and outputs are saved together or not at all", "inputs")
    for field in ("schema_version", "resolution_version"):
        if type(record[field]) is not int:
            raise _schema(f"{field} must be an integer", field)
    _expect(isinstance(record["frontend"], dict), "frontend must be an object", "frontend")
    _check_depth(record["frontend"], 1)
    _expect(record["dtype"] in COMPUTE_DTYPES, f"dtype {shown(record['dtype'])} is not a compute dtype", "dtype")
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
    """Every node field has its fixed JSON shape. Runs once per saved node, so each message is
    only formatted when its check fails."""
    if not isinstance(node, dict):
        raise _schema("every node must be an object", "nodes")
    keys = set(node)
    if keys != NODE_FIELDS:
        raise _schema(f"node {shown(node.get('id'))}: {_fields_difference(NODE_FIELDS - keys, keys - NODE_FIELDS)}",
                      "nodes")
    node_id = node["id"]
    if not (isinstance(node_id, str) and NODE_ID.match(node_id)):
        raise _schema(f"node {shown(node_id)}: malformed id", "id")
    _check_node_fields(node, node_id)


def _check_node_fields(node: dict, node_id: str) -> None:
    """The fixed JSON shape of every field of a node whose keys and id are well formed."""
    if not (isinstance(node["op"], str) and "@" in node["op"]):
        raise _node_schema(node_id, "malformed op", "op")
    for field in OBJECT_FIELDS:
        if not isinstance(node[field], dict):
            raise _node_schema(node_id, f"{field} must be an object", field)
    _check_depth(node["args"], 3)
    outputs = node["outputs"]
    if not (isinstance(outputs, list) and all(type(port) is str for port in outputs)):
        raise _node_schema(node_id, "outputs must be a list of port names", "outputs")
    if not all(type(ref) is str for ref in node["inputs"].values()):
        raise _node_schema(node_id, "malformed input references", "inputs")
    for field in ("input_shapes", "output_shapes"):
        for shape in node[field].values():
            if not (isinstance(shape, list) and 2 <= len(shape) <= 4):
                raise _node_schema(node_id, f"malformed {field}", field)
    if not all(origin in ORIGINS for origin in node["provenance"].values()):
        raise _node_schema(node_id, "unknown argument origin", "provenance")
    source = node["source"]
    if set(source) != SOURCE_FIELDS:
        raise _node_schema(node_id, f"source must hold exactly {', '.join(sorted(SOURCE_FIELDS))}", "source")
    for key in ("line", "column"):
        if not (source[key] is None or (type(source[key]) is int and source[key] > 0)):
            raise _node_schema(node_id, "source line and column must be positive integers or null", "source")
    if not (source["policy"] is None or isinstance(source["policy"], str)):
        raise _node_schema(node_id, "source policy must be text or null", "source")
    derivations = source["derivations"]
    if not (isinstance(derivations, dict) and all(
        type(steps) is list and all(type(step) is str for step in steps) for steps in derivations.values()
    )):
        raise _node_schema(node_id, "source derivations must map arguments to lists of text", "source")


def _fields_difference(missing: set, unexpected: set) -> str:
    """The names missing and unexpected, as "missing a, b; unexpected c, ... and N more":
    each name bounded and each list capped, however many a hostile record holds."""
    return "; ".join(part for part in (
        f"missing {listed(sorted(missing))}" if missing else "",
        f"unexpected {listed(sorted(unexpected))}" if unexpected else "",
    ) if part)


def _node_schema(node_id: str, message: str, field: str) -> HNDLError:
    """E_SCHEMA about the node ``node_id``, its id shown bounded."""
    return _schema(f"node {shown(node_id)}: {message}", field)


#: The node fields that are JSON objects.
OBJECT_FIELDS = ("args", "inputs", "input_shapes", "output_shapes", "initialization", "trainability",
                 "source", "provenance")


def _expect(condition: Any, message: str, field: Optional[str]) -> None:
    if not condition:
        raise _schema(message, field)


def _check_versions(record: dict) -> None:
    for field, supported in (("schema_version", SCHEMA_VERSION), ("resolution_version", RESOLUTION_VERSION)):
        if record[field] != supported:
            raise HNDLError(
                "E_STATE_VERSION",
                f"saved plan has {field} {shown(record[field])}; this HNDL reads {field} {supported}",
                field=field,
                remedies=(
                    "Restore it with the HNDL release that wrote it, or re-resolve the original "
                    "specification with this release and transfer the weights explicitly.",
                ),
            )


def _check_digests(record: dict, text: str) -> None:
    """Both digests must match; text that is not canonical is searched for duplicate keys."""
    digests = record["digests"]
    body = fields_body(record)
    if with_digests(body, digests["semantic"], digests["artifact"]).decode("utf-8") != text:
        _decode(text, pairs_hook=_unique_keys)  # canonical text cannot hide a duplicate key
    for name, expected, actual in (
        ("semantic", digests["semantic"], digest_of(semantic_record(record))),
        ("artifact", digests["artifact"], sha256_of(with_digests(body, digests["semantic"]))),
    ):
        if expected != actual:
            raise HNDLError(
                "E_INTEGRITY",
                f"the saved {name} digest {expected} does not match the plan's contents ({actual})",
                field=f"digests.{name}",
                remedies=("Restore the plan from an unmodified copy.",),
            )


def _rebuild(record: dict, registry, plan_type: type, node_type: type) -> Any:
    """A plan from a record that passed the format checks; identities must be registered."""
    inputs, outputs = _ports(record)
    batch = inputs[0]["shape"][0]
    _check_unique_ids(record["nodes"])
    nodes = []
    checked: dict = {}  # saved arguments already validated, by (operator, provenance, exact values)
    for node in record["nodes"]:
        spec = registry.by_identity(node["op"])
        in_ports = _declared_order(spec, node)
        values = exact_key(node["args"])
        key = None if values is None else (spec, tuple(node["provenance"]), values)
        args = checked.get(key) if key is not None else None
        if args is None:
            args = MappingProxyType(_arguments(spec, node))
            if key is not None:
                checked[key] = args
        # Every value below is built fresh from the decoded record and is already immutable
        # (tuples, mapping proxies over new dicts), so the node can skip freezing it again.
        nodes.append(node_type.restored(
            id=node["id"],
            op=node["op"],
            alias=spec.alias,
            args=args,
            inputs=MappingProxyType({port: node["inputs"][port] for port in in_ports}),
            outputs=tuple(node["outputs"]),
            input_shapes=MappingProxyType({port: tuple(node["input_shapes"][port]) for port in in_ports}),
            output_shapes=MappingProxyType({port: tuple(node["output_shapes"][port]) for port in node["outputs"]}),
            initialization=_record(node["initialization"], DEFAULT_INITIALIZATION, check_initialization_record, node["id"]),
            trainability=_record(node["trainability"], DEFAULT_TRAINABILITY, check_trainability_record, node["id"]),
            source=freeze(node["source"]),
            provenance=MappingProxyType(dict(node["provenance"])),
        ))
    return plan_type(
        frontend=record["frontend"],
        batch=batch,
        dtype=record["dtype"],
        inputs=tuple({"name": p["name"], "shape": tuple(p["shape"]), "dtype": p["dtype"]} for p in inputs),
        outputs=tuple({"name": p["name"], "ref": p["ref"], "shape": tuple(p["shape"])} for p in outputs),
        nodes=nodes,
        schema_version=record["schema_version"],
        resolution_version=record["resolution_version"],
    )


def _check_unique_ids(nodes: list) -> None:
    """E_INTEGRITY naming the first id saved a second time (one pass, however many nodes)."""
    ids = [node["id"] for node in nodes]
    if len(set(ids)) == len(ids):
        return
    seen: set = set()
    twice = next(node_id for node_id in ids if node_id in seen or seen.add(node_id))
    raise HNDLError("E_INTEGRITY", f"node id {shown(twice)} is saved twice", node=twice, field="id",
                    remedies=("Restore the plan from an unmodified copy.",))


def _declared_order(spec, node: dict) -> tuple[str, ...]:
    """Input ports in the operator's declared binding order: JSON objects are saved with sorted
    keys, but modules receive their tensors positionally in declaration order."""
    saved = node["inputs"]
    try:
        ports = spec.input_ports(len(saved)) if spec.shape.variadic_input else spec.input_ports()
    except HNDLError:
        ports = ()
    optional = spec.optional_inputs
    if optional and set(saved) <= set(ports):
        # An unbound optional port is simply absent from the saved node; a required one never is.
        present = tuple(port for port in ports if port in saved or port not in optional)
        if set(present) == set(saved):
            ports = present
    if set(ports) != set(saved) or set(node["input_shapes"]) != set(saved) or set(node["output_shapes"]) != set(node["outputs"]):
        raise HNDLError(
            "E_BINDING",
            f"node {shown(node['id'])} saves input ports [{listed(sorted(saved))}], but {spec.qualified} declares "
            f"[{listed(port + '?' if port in optional else port for port in ports)}]",
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
                raise _schema(f"{field}: malformed reference {shown(port['ref'])}", field) from None
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
            f"node {shown(node['id'])} saves arguments [{listed(sorted(args))}], but {spec.qualified} declares "
            f"[{listed(sorted(spec.args))}]",
            node=node["id"],
        )
    if set(node["provenance"]) != set(spec.args):
        raise _schema(f"node {shown(node['id'])}: provenance must name every argument", "provenance")
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
                    f"saved argument {name}={shown(value)} is not in its normalized form {shown(thaw(result[name]))}",
                    node=node["id"], field=name,
                    remedies=("Restore the plan from an unmodified copy.",),
                )
    return result
