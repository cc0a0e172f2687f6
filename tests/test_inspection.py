"""plan.describe() and plan.diff() (§13): enough provenance to explain why a field changed
between two separately resolved specifications, without a backend or any tensor."""

import json
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
from hndl import Registry, ResolvedPlan
from hndl.inspection import PlanChange, PlanDiff

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""

INIT = """
linear(64, trainable=False)
relu()
linear(init={"weight": xavier_uniform(gain=1.0), "bias": -0.0}, trainable={"bias": False})
"""

DISCRIMINATOR = """
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""


@pytest.fixture(scope="module")
def registry():
    return Registry.builtins()


@pytest.fixture(scope="module")
def generator32(registry):
    return hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32), registry=registry)


@pytest.fixture(scope="module")
def generator64(registry):
    return hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 64, 64), registry=registry)


@pytest.fixture(scope="module")
def init_plan(registry):
    return hndl.resolve(INIT, input_shape=("B", 128), output_shape=("B", 10), registry=registry)


def _node_block(description: str, node_id: str) -> list:
    """The describe() lines of one node: its header and the indented lines below it."""
    lines = description.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(f"node {node_id} ("))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def _argument_line(block: list, name: str) -> str:
    return next(line for line in block if re.match(rf"\s+{name} = ", line))


# == describe ===========================================================================================
def test_describe_starts_with_the_shape_table_and_names_the_semantic_digest(generator32):
    description = generator32.describe()
    assert description.startswith(str(generator32))
    assert "index  name  operation  input shape       output shape" in description
    assert "0      n0    linear     [B, 128]          [B, 8192]" in description
    digests = re.findall(r"^semantic digest: (sha256:[0-9a-f]{64})$", description, re.M)
    assert digests == [generator32.semantic_digest]
    assert generator32.semantic_digest == json.loads(generator32.to_json())["digests"]["semantic"]


def test_describe_lists_every_argument_with_value_and_origin(generator32):
    description = generator32.describe()
    for node in generator32.nodes:
        block = _node_block(description, node.id)
        assert block[0] == f"node {node.id} ({node.op})"
        for name, value in node.args.items():
            line = _argument_line(block, name)
            assert f"{name} = {value!r}" in line
            assert node.provenance[name] in line.split()
    conv = _node_block(description, "n9")
    assert re.search(r"out_channels = 3\s+explicit", _argument_line(conv, "out_channels"))
    assert re.search(r"dilation = \(1, 1\)\s+default", _argument_line(conv, "dilation"))
    deconv = _node_block(description, "n3")
    assert re.search(r"stride = \(2, 2\)\s+policy", _argument_line(deconv, "stride"))
    assert re.search(r"in_channels = 512\s+inferred", _argument_line(deconv, "in_channels"))


def test_describe_explains_an_inferred_argument(generator32):
    head = _argument_line(_node_block(generator32.describe(), "n0"), "out_features")
    assert re.search(r"out_features = 8192\s+inferred\s+<- ", head)
    derivation = head.split("<- ", 1)[1]
    # the width comes from the output contract through the reshape and the three doublings
    assert "output contract 'output'" in derivation
    assert "reshape" in derivation and "512" in derivation
    assert "2 * x[2]" in derivation
    assert list(generator32.node("n0").source["derivations"]["out_features"])[0] in derivation
    # explicit values carry no derivation
    assert "<-" not in _argument_line(_node_block(generator32.describe(), "n3"), "out_channels")


def test_describe_names_the_selected_policy_identity(generator32):
    description = generator32.describe()
    for node_id in ("n3", "n5", "n7"):
        assert "  policy: spatial.up2_transpose@1" in _node_block(description, node_id)
    assert not any(line.startswith("  policy:") for line in _node_block(description, "n9"))


def test_describe_shows_both_construction_records_as_json(init_plan):
    description = init_plan.describe()
    for node in init_plan.nodes:
        block = _node_block(description, node.id)
        init_line = next(line for line in block if line.startswith("  initialization: "))
        train_line = next(line for line in block if line.startswith("  trainability: "))
        assert json.loads(init_line.split(": ", 1)[1]) == json.loads(json.dumps(_plain(node.initialization)))
        assert json.loads(train_line.split(": ", 1)[1]) == json.loads(json.dumps(_plain(node.trainability)))
    head = _node_block(description, "n2")
    init = json.loads(next(line for line in head if line.startswith("  initialization: ")).split(": ", 1)[1])
    assert init == {"kind": "torch_default@2",
                    "overrides": {"bias": -0.0, "weight": {"gain": 1.0, "kind": "xavier_uniform"}}}
    assert str(init["overrides"]["bias"]) == "-0.0"
    train = json.loads(next(line for line in head if line.startswith("  trainability: ")).split(": ", 1)[1])
    assert train == {"default": None, "overrides": {"bias": False}}
    first = _node_block(description, "n0")
    assert json.loads(next(line for line in first if line.startswith("  trainability: ")).split(": ", 1)[1]) == {
        "default": False, "overrides": {}}
    assert json.loads(next(line for line in first if line.startswith("  initialization: ")).split(": ", 1)[1]) == {
        "kind": "torch_default@1", "overrides": {}}


def test_describe_prints_the_named_port_table(registry):
    plan = hndl.resolve(
        DISCRIMINATOR,
        input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
        output_shape={"logits": ("B", 1), "features": ("B", 12544)},
        registry=registry,
    )
    description = plan.describe()
    assert description.startswith(str(plan))
    assert re.match(r"Network: x=\[B, 1, 28, 28\], y=\[B, 10\] -> logits=\[B, 1\], features=\[B, 12544\]\s+dtype=float32\n",
                    description)
    stage = _node_block(description, "stage1")
    assert f"  policy: {plan.node('stage1').source['policy']}" in stage
    assert plan.node("stage1").source["policy"].endswith("@1")
    assert re.search(r"\s+out_channels = 64\s+explicit", "\n".join(stage))
    assert f"semantic digest: {plan.semantic_digest}" in description


def test_describe_of_a_restored_plan_is_identical(generator32, registry):
    restored = ResolvedPlan.from_json(generator32.to_json(), registry=registry)
    assert restored.describe() == generator32.describe()


class _RefuseTensorOps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"inspection ran the tensor operation {func}")


def test_inspection_allocates_nothing_and_draws_no_randomness(generator32, generator64):
    state = torch.get_rng_state()
    with _RefuseTensorOps():
        generator32.describe()
        str(generator32.diff(generator64))
    assert torch.equal(torch.get_rng_state(), state)


# == diff =============================================================================================
def test_diff_between_generator_resolutions_explains_the_projection_width(generator32, generator64):
    changes = generator32.diff(generator64)
    assert isinstance(changes, PlanDiff) and all(isinstance(change, PlanChange) for change in changes)
    width = [change for change in changes if change.node == "n0" and change.field == "args.out_features"]
    assert len(width) == 1
    change = width[0]
    assert (change.before, change.after) == (8192, 32768)
    assert (change.origin_before, change.origin_after) == ("inferred", "inferred")
    text = str(changes)
    assert "n0.args.out_features: 8192 (inferred) -> 32768 (inferred)" in text.splitlines()
    # shape changes are listed per node and port
    assert 'n0.output_shapes: {"out": ["B", 8192]} -> {"out": ["B", 32768]}' in text
    assert 'n2.output_shapes: {"out": ["B", 512, 4, 4]} -> {"out": ["B", 512, 8, 8]}' in text
    assert 'n10.output_shapes: {"out": ["B", 3, 32, 32]} -> {"out": ["B", 3, 64, 64]}' in text
    # nothing that did not change is listed
    fields = {(change.node, change.field) for change in changes}
    assert ("n3", "args.out_channels") not in fields and ("n3", "args.stride") not in fields
    assert ("n3", "policy") not in fields and ("n0", "op") not in fields
    assert all(change.field != "args.in_channels" for change in changes)


def test_diff_is_directional(generator32, generator64):
    forward, backward = generator32.diff(generator64), generator64.diff(generator32)
    assert len(forward) == len(backward)
    assert "n0.args.out_features: 32768 (inferred) -> 8192 (inferred)" in str(backward).splitlines()


def test_diff_of_identical_plans_is_empty(generator32, registry):
    again = hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32), registry=registry)
    changes = generator32.diff(again)
    assert len(changes) == 0 and not changes
    assert str(changes) == "no differences"
    restored = ResolvedPlan.from_json(generator32.to_json(), registry=registry)
    assert str(restored.diff(generator32)) == "no differences"


def test_diff_shows_an_origin_change_with_the_same_value(registry):
    explicit = hndl.resolve("linear(10)\n", input_shape=("B", 128), output_shape=("B", 10), registry=registry)
    inferred = hndl.resolve("linear()\n", input_shape=("B", 128), output_shape=("B", 10), registry=registry)
    assert explicit.semantic_digest == inferred.semantic_digest  # same concrete plan ...
    changes = explicit.diff(inferred)
    assert len(changes) == 1  # ... but not the same reason
    change = changes[0]
    assert (change.node, change.field) == ("n0", "args.out_features")
    assert change.before == change.after == 10
    assert (change.origin_before, change.origin_after) == ("explicit", "inferred")
    assert str(changes) == "n0.args.out_features: 10 (explicit) -> 10 (inferred)"


def test_diff_lists_added_and_removed_nodes(registry):
    short = hndl.resolve("linear(64)\nrelu()\nlinear()\n", input_shape=("B", 128), output_shape=("B", 10),
                         registry=registry)
    long = hndl.resolve("linear(64)\nrelu()\nlinear(32)\nrelu()\nlinear()\n", input_shape=("B", 128),
                        output_shape=("B", 10), registry=registry)
    grown = {(change.node, change.field): change for change in short.diff(long)}
    assert grown[("n3", "node")].after == "relu@1"
    assert grown[("n4", "node")].after == "linear@1"
    assert "n3.node: (absent) -> \"relu@1\"" in str(short.diff(long)).splitlines()
    assert grown[("n2", "args.out_features")].before == 10 and grown[("n2", "args.out_features")].after == 32
    assert (grown[("n2", "args.out_features")].origin_before,
            grown[("n2", "args.out_features")].origin_after) == ("inferred", "explicit")
    shrunk = {(change.node, change.field): change for change in long.diff(short)}
    assert shrunk[("n4", "node")].before == "linear@1"
    assert "n4.node: \"linear@1\" -> (absent)" in str(long.diff(short)).splitlines()


def test_diff_lists_construction_record_and_policy_changes(registry):
    plain = hndl.resolve("linear(64)\nrelu()\nlinear()\n", input_shape=("B", 128), output_shape=("B", 10),
                         registry=registry)
    frozen = hndl.resolve('linear(64, trainable=False, init={"bias": 0})\nrelu()\nlinear()\n',
                          input_shape=("B", 128), output_shape=("B", 10), registry=registry)
    fields = {(change.node, change.field) for change in plain.diff(frozen)}
    assert fields == {("n0", "initialization"), ("n0", "trainability")}
    spelled = hndl.resolve(
        "linear()\nrelu()\nreshape(512)\n"
        "deconv(256, kernel_size=4, stride=2, padding=1)\nrelu()\n"
        'deconv(128, policy="up2")\nrelu()\ndeconv(64, policy="up2")\nrelu()\n'
        "conv(3, kernel_size=3, stride=1, padding=1)\ntanh()\n",
        input_shape=("B", 128), output_shape=("B", 3, 32, 32), registry=registry,
    )
    upsampled = hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32), registry=registry)
    assert spelled.semantic_digest == upsampled.semantic_digest  # policy effects are expanded
    changes = {(change.node, change.field): change for change in spelled.diff(upsampled)}
    assert changes[("n3", "policy")].before is None
    assert changes[("n3", "policy")].after == "spatial.up2_transpose@1"
    assert changes[("n3", "args.stride")].origin_before == "explicit"
    assert changes[("n3", "args.stride")].origin_after == "policy"
    assert all(node == "n3" for node, _ in changes)


def test_diff_lists_dtype_and_contract_changes(registry):
    single = hndl.resolve("linear(64)\nrelu()\nlinear()\n", input_shape=("B", 128), output_shape=("B", 10),
                          registry=registry)
    half = hndl.resolve("linear(64)\nrelu()\nlinear()\n", input_shape=("B", 128), output_shape=("B", 10),
                        dtype="bfloat16", registry=registry)
    fields = {(change.node, change.field) for change in single.diff(half)}
    assert (None, "dtype") in fields and (None, "inputs") in fields


def _plain(value):
    if hasattr(value, "items"):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value
