"""Property-based fuzzing of saved plans (issue 10, item 1; §10 "Restoration order", §12).

Saved plans are untrusted data. Starting from real plans (the golden vectors' specifications
and a few more, resolved here), the generators produce:

* **byte-level** mutants: flips, insertions, deletions, truncation, given as text and as bytes;
  these mostly die at the JSON, format or digest checks;
* **structural** mutants of the decoded record, re-encoded canonically **with both digests
  recomputed**, so that they pass the integrity check and reach the registry lookup, the
  rebuild and the revalidation of every concrete equation: field deletions and insertions,
  type swaps, huge and non-positive numbers, deep nesting, swapped and duplicated nodes,
  rewritten references, identities, shapes and construction records;
* **textual** hostility that cannot be expressed as a record: duplicate keys, NaN/Infinity,
  nesting thousands of levels deep, numbers with thousands of digits;
* **unicode and digits** (issue 15): lone surrogates in any string or key, as JSON escapes, raw
  text and raw bytes; digit floods in numeric positions; malformed batch entries (``0*B``,
  ``B*2``, 5,000 digits, ...) re-signed with valid digests.

Invariant (``conftest.untrusted_call``): ``ResolvedPlan.from_json`` returns a plan or raises
HNDLError with a catalog code; never another exception, never a hang, never
exec/compile/import/open in the host. A plan that does load must re-encode to exactly the
canonical bytes it was read from (to the canonical form of non-canonical text, which is accepted), and its allocation-free state probe
(``hndl.torch.parameter_counts``, meta device) must also answer with a plan or an HNDLError.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl import HNDLError, ResolvedPlan
from hndl import persist

NORMAL = settings.get_profile("hndl-normal")
LONG = settings.get_profile("hndl-fuzz")

REGISTRY = hndl.Registry.from_packs("basic", "vision", "transformer")

SPECS = [
    ("linear(64)\nrelu()\nlinear()\n", ("B", 128), ("B", 10), None),
    ('z1, z2 = split(64, name="partition")\nlinear(z1, 128, name="content")\nfeatures = relu(name="features")\n'
     'style = linear(z2, 128, name="style")\nadd(features, style, name="combined")\n', ("B", 128), ("B", 128), None),
    ('plane = linear(y, 784, name="label_projection")\nlabel = reshape(plane, 1, 28, 28, name="label_plane")\n'
     'concat(x, label, name="conditioned")\nconv(64, policy="down2", name="stage1")\nleaky_relu(0.2)\n'
     'features = flatten(name="features")\nlogits = linear(1, name="logits")\n',
     {"x": ("B", 1, 28, 28), "y": ("B", 10)}, {"logits": ("B", 1), "features": ("B", 12544)}, None),
    ("both = concat(x, x, axis=0)\nthree = concat(both, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, c)\n",
     ("B", 3, 8, 8), ("B", 3, 8, 8), None),
    ('linear(64, trainable=False)\nrelu()\n'
     'linear(init={"weight": xavier_uniform(gain=1.0), "bias": 0.1}, trainable={"bias": False})\n',
     ("B", 128), ("B", 10), None),
    ('linear()\nrelu()\nreshape(512)\ndeconv(256, policy="up2")\nrelu()\ndeconv(128, policy="up2")\n'
     'relu()\ndeconv(64, policy="up2")\nrelu()\nconv(3, kernel_size=3, stride=1, padding=1)\ntanh()\n',
     ("B", 128), ("B", 3, 32, 32), None),
    ("embedding(100, 16)\npositional_embedding()\ntransformer_block(heads=2)\nmoe(experts=2, top_k=1)\nlinear(16)\n",
     ("B", 16), ("B", 16, 16), "int64"),
    ("conv(8, kernel_size=3, padding=1)\nbatch_norm()\nrelu()\nmax_pool(kernel_size=2)\n"
     "upsample(scale_factor=2)\ngroup_norm(num_groups=2)\nconv(3, kernel_size=3, padding=1)\n",
     ("B", 3, 16, 16), ("B", 3, 16, 16), None),
]


def _resolve(spec):
    source, input_shape, output_shape, input_dtype = spec
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, input_dtype=input_dtype,
                        registry=REGISTRY)


PLANS = [_resolve(spec).to_json() for spec in SPECS]
RECORDS = [json.loads(text) for text in PLANS]


# ---------------------------------------------------------------------------------------------
# Re-encoding with fresh digests
# ---------------------------------------------------------------------------------------------

def with_digests(record) -> str:
    """Canonical text of ``record`` with both digests recomputed, as HNDL would write them.

    Falls back to the record's own (now stale) digests when the mutation broke the parts the
    semantic digest reads; the text then exercises the format checks instead.
    """
    try:
        semantic = persist.digest_of(persist.semantic_record(record))
        body = persist.fields_body(record)
        artifact = persist.sha256_of(persist.with_digests(body, semantic))
        return persist.with_digests(body, semantic, artifact).decode("utf-8")
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError, IndexError):
        return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Structural mutations
# ---------------------------------------------------------------------------------------------

HUGE = [0, -1, 1, 2, 1024, 1025, 2**31 - 1, 2**31, 2**40 + 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, -(2**63),
        10**300, 1.5, -0.0, 1e308, 5e-324, True, False]
WEIRD_STRINGS = ["", "B", "2*B", "1*B", "0*B", "B*2", "1025*B", "01*B", "C", "x", "out", "input:x", "input:nope",
                 "node:n0/out", "node:n0/nope", "node:zz/out", "node:n0", "linear@1", "linear@2", "linear@0",
                 "linear", "@1", "nope@1", "relu@1", "reshape@1", "conv2d@1", "chunk@1", "concat@1", "split@1",
                 "torch_default@1", "torch_default@2", "float32", "float64", "int64", "bool", "any", "explicit",
                 "inferred", "python_config@1", "sha256:" + "0" * 64, "ä", "\u0000", "\ud7ff", "a" * 300, "__init__"]


def scalar_values():
    return st.one_of(
        st.sampled_from(HUGE),
        st.sampled_from(WEIRD_STRINGS),
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    )


def json_values():
    return st.recursive(
        scalar_values(),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.one_of(st.sampled_from(WEIRD_STRINGS), st.text(max_size=6)), inner,
                                                max_size=4)),
        max_leaves=8,
    )


def _paths(value, prefix=()):
    """Every (path, value) in a decoded JSON document, containers included."""
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


def _get(record, path):
    for key in path:
        record = record[key]
    return record


def _set(record, path, value):
    if not path:
        return value
    _get(record, path[:-1])[path[-1]] = value
    return record


def _same_type_other_value(draw, value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.sampled_from([v for v in HUGE if type(v) is int] + [value + 1, value - 1, value * 2]))
    if isinstance(value, float):
        return draw(st.sampled_from([0.0, -1.0, 1e308, 5e-324, 3.4e38, 3.5e38, value * 2]))
    if isinstance(value, str):
        return draw(st.one_of(st.sampled_from(WEIRD_STRINGS), st.text(max_size=8)))
    if isinstance(value, list):
        return value[::-1] if value else [draw(json_values())]
    if isinstance(value, dict):
        return {key: value[key] for key in reversed(list(value))}
    return draw(scalar_values())  # None


_NOT_EXTENTS = {"schema_version", "resolution_version", "line", "column"}


def _replace_everywhere(record, draw):
    """Replace one integer everywhere it occurs (arguments and shapes alike), so the plan stays
    self-consistent and reaches revalidation and the state probe with huge or odd extents."""
    found = sorted({v for p, v in _paths(record) if type(v) is int and not (set(map(str, p)) & _NOT_EXTENTS)})
    if not found:
        return record
    old = draw(st.sampled_from(found))
    new = draw(st.sampled_from([2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1, 2**63, 10**30, 65536, 1 << 20, 3 * old,
                                old + 1, 1, 0, -old]))

    def walk(value, key=None):
        if type(value) is int and value == old and key not in _NOT_EXTENTS:
            return new
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        return value

    return walk(record)


@st.composite
def structural(draw):
    """A structurally mutated saved plan, canonical, digests recomputed (mostly)."""
    record = json.loads(PLANS[draw(st.integers(0, len(PLANS) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        paths = [path for path, _ in _paths(record) if path and path[:1] != ("digests",)]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        value = _get(record, path)
        kind = draw(st.integers(0, 11))
        if kind >= 10 and isinstance(record, dict):  # one extent changed consistently everywhere
            record = _replace_everywhere(record, draw)
        elif kind == 0 and path:  # delete the field or element
            parent = _get(record, path[:-1])
            del parent[path[-1]]
        elif kind == 1 and isinstance(value, dict):  # insert a field
            value[draw(st.one_of(st.sampled_from(WEIRD_STRINGS + ["id", "op", "args", "inputs", "extra"]),
                                 st.text(max_size=5)))] = draw(json_values())
        elif kind == 2 and isinstance(value, list):  # insert an element
            value.insert(draw(st.integers(0, len(value))), draw(st.one_of(json_values(),
                                                                          st.sampled_from(value or [0]))))
        elif kind == 3:  # swap the type
            record = _set(record, path, draw(json_values()))
        elif kind == 4:  # same type, other (often huge or degenerate) value
            record = _set(record, path, _same_type_other_value(draw, value))
        elif kind == 5:  # deep nesting
            depth = draw(st.sampled_from([2, 10, 63, 64, 65, 100, 300]))
            nested = value
            for _ in range(depth):
                nested = [nested] if draw(st.booleans()) else {"k": nested}
            record = _set(record, path, nested)
        elif kind == 6 and isinstance(record, dict) and record.get("nodes"):  # reorder or duplicate nodes
            nodes = record["nodes"]
            if isinstance(nodes, list) and nodes:
                if draw(st.booleans()):
                    record["nodes"] = draw(st.permutations(nodes))
                else:
                    nodes.insert(draw(st.integers(0, len(nodes))), json.loads(json.dumps(draw(st.sampled_from(nodes)))))
        elif kind == 7:  # rewrite a shape extent
            shapes = [p for p, v in _paths(record) if isinstance(v, list) and v and isinstance(v[0], str)
                      and len(v) <= 4 and all(isinstance(e, int) for e in v[1:]) and p[:1] != ("digests",)]
            if shapes:
                target = draw(st.sampled_from(shapes))
                shape = list(_get(record, target))
                index = draw(st.integers(0, len(shape) - 1))
                shape[index] = draw(st.sampled_from(HUGE + WEIRD_STRINGS[:8]))
                record = _set(record, target, shape)
        elif kind == 8:  # graft a piece of another plan
            other = RECORDS[draw(st.integers(0, len(RECORDS) - 1))]
            donors = [v for p, v in _paths(other) if p and p[0] == "nodes"]
            if donors:
                record = _set(record, path, json.loads(json.dumps(draw(st.sampled_from(donors)))))
        else:  # rename an identity or a reference
            strings = [p for p, v in _paths(record) if isinstance(v, str) and p[:1] != ("digests",)]
            if strings:
                record = _set(record, draw(st.sampled_from(strings)), draw(st.sampled_from(WEIRD_STRINGS)))
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # stale digests
    return with_digests(record)


@st.composite
def byte_level(draw):
    """A saved plan with a few bytes flipped, inserted or deleted, or truncated."""
    data = bytearray(PLANS[draw(st.integers(0, len(PLANS) - 1))].encode("utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.integers(0, 4))
        if kind == 0:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == 1:
            data[at:at] = draw(st.sampled_from([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"0", b"-", b"e9",
                                                b"\xff", b"\xc3", b"\x00", b"NaN", b"Infinity", b" "]))
        elif kind == 2:
            del data[at:at + draw(st.integers(1, 16))]
        elif kind == 3:
            del data[at:]
        else:
            data[at] = draw(st.integers(0, 255))
    payload = bytes(data)
    if draw(st.booleans()):
        return payload
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload


@st.composite
def textual(draw):
    """Hostility only text can carry: duplicate keys, non-finite numbers, huge digits, deep nests."""
    text = PLANS[draw(st.integers(0, len(PLANS) - 1))]
    kind = draw(st.integers(0, 6))
    if kind == 0:  # a duplicate key, valid JSON otherwise
        return text.replace('"dtype":', '"dtype":"float16","dtype":', 1)
    if kind == 1:
        return text.replace('"schema_version":1', '"schema_version":' + draw(st.sampled_from(
            ["NaN", "Infinity", "-Infinity", "1e999", "1" * 5000, "1.0", "-0", "01"])), 1)
    if kind == 2:
        depth = draw(st.sampled_from([100, 1000, 10_000, 100_000]))
        return text.replace('"frontend":{', '"frontend":{"deep":' + "[" * depth + "]" * depth + ",", 1)
    if kind == 3:
        return text.replace('"nodes":[', '"nodes":[' + "{" * 50 + "}" * 50 + ",", 1)
    if kind == 4:
        return "[" * draw(st.sampled_from([10, 10_000, 200_000])) + text
    if kind == 5:
        return text + draw(st.sampled_from([" ", "\n", "x", "{}", "\x00"]))
    return draw(st.sampled_from(['{}', '[]', '""', "null", "1", '{"digests":{}}', "\ufeff" + text, text.encode("utf-16")]))


# ---------------------------------------------------------------------------------------------
# Text that is not UTF-8, digit floods, malformed batch entries (issue 15)
# ---------------------------------------------------------------------------------------------

LONE_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff"]
MALFORMED_ENTRIES = ["0*B", "B*2", "2*C", "1*B", "02*B", "*B", "2*", "-2*B", "2**B", "2*B*B", "2 * B",
                     "1" * 5000 + "*B", "0" * 4000 + "2*B", "10000*B", "1025*B"]
_MARK = "\U000f0000"  # a private-use character no seed plan holds, replaced once encoded
_FLOOD = 987654321987654321


@st.composite
def unicode_and_digits(draw):
    """Lone surrogates in any string (escaped, raw text, raw bytes), digit floods in numbers and
    batch entries, and malformed batch entries re-signed with valid digests."""
    record = json.loads(PLANS[draw(st.integers(0, len(PLANS) - 1))])
    kind = draw(st.integers(0, 2))
    if kind == 0:  # a lone surrogate in a string value or a key, anywhere but the digests
        strings = [p for p, v in _paths(record) if isinstance(v, str) and p[:1] != ("digests",)]
        objects = [p for p, v in _paths(record) if isinstance(v, dict) and p[:1] != ("digests",)]
        if draw(st.booleans()):
            path = draw(st.sampled_from(strings))
            value = _get(record, path)
            at = draw(st.integers(0, len(value)))
            record = _set(record, path, value[:at] + _MARK + value[at:])
        else:
            _get(record, draw(st.sampled_from(objects)))[_MARK] = draw(json_values())
        text = with_digests(record)
        surrogate = draw(st.sampled_from(LONE_SURROGATES))
        form = draw(st.integers(0, 2))
        if form == 0:
            return text.replace(_MARK, "\\u%04x" % ord(surrogate))
        if form == 1:
            return text.replace(_MARK, surrogate)
        return text.replace(_MARK, surrogate).encode("utf-8", "surrogatepass")
    if kind == 1:  # a digit flood in a numeric position, re-signed where Python can still print it
        numbers = [p for p, v in _paths(record) if type(v) is int and p[:1] != ("digests",)]
        digits = draw(st.sampled_from([40, 400, 4299, 4300, 4301, 5000, 20_000]))
        flood = draw(st.sampled_from(["1", "9"])) * digits
        if digits < 4300 and draw(st.booleans()):
            return with_digests(_set(record, draw(st.sampled_from(numbers)), int(flood)))
        return with_digests(_set(record, draw(st.sampled_from(numbers)), _FLOOD)).replace(str(_FLOOD), flood)
    # a malformed batch entry on one or more port shapes, digests recomputed
    shapes = [p for p, v in _paths(record) if len(p) == 4 and p[0] == "nodes"
              and p[2] in ("input_shapes", "output_shapes")]
    entry = draw(st.sampled_from(MALFORMED_ENTRIES))
    for path in draw(st.lists(st.sampled_from(shapes), min_size=1, max_size=3)):
        _get(record, path)[0] = entry
    return with_digests(record)


# ---------------------------------------------------------------------------------------------
# The invariant
# ---------------------------------------------------------------------------------------------

def check_plan(support, saved) -> None:
    outcome = support.untrusted_call(lambda: ResolvedPlan.from_json(saved, registry=REGISTRY),
                                     what=f"from_json({saved[:300]!r})")
    if outcome.error is not None:
        return
    plan = outcome.value
    text = saved.decode("utf-8") if isinstance(saved, bytes) else saved
    # Non-canonical text (extra whitespace, other key order) is accepted by design; what must
    # hold is that the plan re-encodes to the canonical form of what was read, which for the
    # canonical text HNDL writes means the very same bytes.
    assert plan.to_json() == persist.canonical(json.loads(text)).decode("utf-8"), \
        "a restored plan must re-encode to the canonical bytes it was read from"
    from hndl.torch import parameter_counts

    support.untrusted_call(lambda: parameter_counts(plan, registry=REGISTRY), what=f"parameter_counts of {text[:200]!r}")


def test_the_seed_plans_restore_and_mutants_reach_past_the_digest_check(support):
    """Guard the generators: seeds restore; re-encoding an unmodified record is the identity."""
    for text, record in zip(PLANS, RECORDS):
        assert ResolvedPlan.from_json(text, registry=REGISTRY).to_json() == text
        assert with_digests(record) == text
    record = json.loads(PLANS[0])
    record["nodes"][0]["args"]["out_features"] = 65
    with pytest.raises(HNDLError) as caught:
        ResolvedPlan.from_json(with_digests(record), registry=REGISTRY)
    assert caught.value.code == "E_INTEGRITY" and "digest" not in caught.value.message


@NORMAL
@given(saved=structural())
def test_structurally_mutated_plans_load_or_fail_with_a_code(support, saved):
    check_plan(support, saved)


@NORMAL
@given(saved=byte_level())
def test_byte_mutated_plans_load_or_fail_with_a_code(support, saved):
    check_plan(support, saved)


@NORMAL
@given(saved=textual())
def test_textually_hostile_plans_load_or_fail_with_a_code(support, saved):
    check_plan(support, saved)


@NORMAL
@given(saved=unicode_and_digits())
def test_plans_with_lone_surrogates_digit_floods_or_malformed_batches_fail_with_a_code(support, saved):
    check_plan(support, saved)


@pytest.mark.fuzz
@LONG
@given(saved=unicode_and_digits())
def test_fuzz_lone_surrogates_digit_floods_and_malformed_batches(support, saved):
    check_plan(support, saved)


@pytest.mark.fuzz
@LONG
@given(saved=structural())
def test_fuzz_structurally_mutated_plans(support, saved):
    check_plan(support, saved)


@pytest.mark.fuzz
@LONG
@given(saved=byte_level())
def test_fuzz_byte_mutated_plans(support, saved):
    check_plan(support, saved)


@pytest.mark.fuzz
@LONG
@given(saved=textual())
def test_fuzz_textually_hostile_plans(support, saved):
    check_plan(support, saved)
