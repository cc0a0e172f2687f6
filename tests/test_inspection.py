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


def _argument_lines(block: list, name: str) -> list:
    """An argument's line and the continuation lines of its wrapped derivation (indented deeper
    than the two columns of an argument line)."""
    start = block.index(_argument_line(block, name))
    lines = [block[start]]
    for line in block[start + 1:]:
        if not line.startswith("   "):
            break
        lines.append(line)
    return lines


def _unwrapped(lines: list) -> str:
    """A wrapped argument read back as one line: the lines joined at the spaces wrapping removed."""
    return " ".join(line.strip() for line in lines)


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
    head = _unwrapped(_argument_lines(_node_block(generator32.describe(), "n0"), "out_features"))
    assert re.search(r"out_features = 8192\s+inferred\s+<- ", head)
    derivation = head.split("<- ", 1)[1]
    assert derivation == "; ".join(generator32.node("n0").source["derivations"]["out_features"])
    # the width comes from the output contract through the reshape and the three doublings
    assert "output contract 'output'" in derivation
    assert "reshape" in derivation and "512" in derivation
    assert "2 * x[2]" in derivation
    assert list(generator32.node("n0").source["derivations"]["out_features"])[0] in derivation
    # explicit values carry no derivation
    assert "<-" not in _argument_line(_node_block(generator32.describe(), "n3"), "out_channels")


# -- wrapping (issue 30 item 12): provenance chains of ~1,000 characters printed on one line --------------
CONV_STACK = 'conv(8, kernel_size=3, padding=1)\nrelu()\nconv(16, policy="down2")\nrelu()\nflatten()\nlinear()'


@pytest.fixture(scope="module")
def conv_stack(registry):
    return hndl.resolve(CONV_STACK, input_shape=("B", 3, 8, 8), output_shape=("B", 4), registry=registry)


def test_describe_wraps_a_long_derivation_within_100_columns_with_a_hanging_indent(conv_stack):
    """Before issue 30 the in_features line of this plan was one line of 1,158 characters."""
    from hndl.inspection import WIDTH

    description = conv_stack.describe()
    assert WIDTH == 100 and max(map(len, description.splitlines())) <= WIDTH
    facts = conv_stack.node("n5").source["derivations"]["in_features"]
    assert len("; ".join(facts)) > 1000
    lines = _argument_lines(_node_block(description, "n5"), "in_features")
    assert len(lines) > 10 and re.match(r"  in_features = 256  inferred  <- \S", lines[0])
    # every continuation line starts in the column of the first fact
    column = lines[0].index("<- ") + 3
    assert all(len(line) - len(line.lstrip(" ")) == column for line in lines[1:])
    # nothing is lost or reordered: read back, the lines are the chain of facts
    assert _unwrapped(lines).split("<- ", 1)[1] == "; ".join(facts)
    # whole facts start lines, and a shape pattern is never split across two lines
    assert "node n0 (conv) out_channels=8 (explicit);" in [line.strip() for line in lines]
    assert sum(line.count("out[B, C_out, H_out, W_out]") for line in lines) == 2


def test_describe_wraps_every_derived_argument_and_leaves_short_ones_alone(conv_stack, generator32):
    for plan in (conv_stack, generator32):
        description = plan.describe()
        for node in plan.nodes:
            block = _node_block(description, node.id)
            for name, facts in node.source.get("derivations", {}).items():
                lines = _argument_lines(block, name)
                assert _unwrapped(lines).split("<- ", 1)[1] == "; ".join(facts)
                assert all(len(line) <= 100 for line in lines)
                if len(_unwrapped(lines)) <= 100:
                    assert len(lines) == 1  # what fits on one line stays one line
    n0 = _argument_lines(_node_block(conv_stack.describe(), "n0"), "in_channels")
    assert n0 == ["  in_channels = 3       inferred  <- input contract 'x' axis 1 is 3;",
                  "                                     node n0 (conv) x: axis 1 is C_in in x[B, C_in, H, W]"]


def test_describe_keeps_the_machine_readable_lines_whole(init_plan):
    """The construction records stay one JSON document per line however long (this one is
    over 100 columns), and the shape table and the digest line are not wrapped either."""
    description = init_plan.describe()
    assert description.startswith(str(init_plan))
    assert f"semantic digest: {init_plan.semantic_digest}" in description.splitlines()
    init = next(line for line in _node_block(description, "n2") if line.startswith("  initialization: "))
    assert len(init) > 100
    assert json.loads(init.split(": ", 1)[1]) == json.loads(json.dumps(_plain(init_plan.node("n2").initialization)))


def test_a_fact_without_spaces_or_a_very_long_value_still_fits_the_width():
    """Hostile or generated text: a word wider than a line is broken inside it, a bracket wider
    than a line at its spaces, and a value wider than a line wraps too."""
    from hndl.inspection import WIDTH, _argument_lines as argument_lines

    word, shape = "x" * 450, "[B, " + "C, " * 60 + "D]"
    lines = argument_lines("  in_features = 256  inferred", ["short fact", word, shape, "end"])
    assert all(len(line) <= WIDTH for line in lines)
    assert lines[0] == "  in_features = 256  inferred  <- short fact;"
    assert "".join(line.strip() for line in lines).replace(" ", "") == \
        "in_features=256inferred<-shortfact;" + word + ";" + shape.replace(" ", "") + ";end"
    head = "  sizes = " + repr(tuple(range(60))) + "  explicit"
    assert len(head) > WIDTH
    wrapped = argument_lines(head, ["a fact"])
    assert all(len(line) <= WIDTH for line in wrapped) and wrapped[-1].endswith("<- a fact")
    assert argument_lines("  bias = True  default", []) == ["  bias = True  default"]


def _registry_with_a_long_argument():
    registry = Registry.builtins()

    @registry.operator("tagged", summary="Identity with a free-text tag, for the describe() test.", category="test",
                       shape="x[B, ...] -> out[B, ...]",
                       args={"tag": hndl.Arg(str, "", help="Any text; describe() shows it."),
                             "level": hndl.Arg(int, 1, help="A number describe() shows beside it.")})
    class Tagged(torch.nn.Identity):
        """Passes its input through."""

        def __init__(self, *, tag: str, level: int) -> None:
            super().__init__()

    return registry


def test_a_long_value_wraps_and_does_not_widen_the_alignment_of_the_others():
    registry = _registry_with_a_long_argument()
    tag = "a tag of many words " * 12
    plan = hndl.resolve(f'tagged(tag="{tag}")\nlinear()', input_shape=("B", 128), output_shape=("B", 10),
                        registry=registry)
    description = plan.describe()
    assert all(len(line) <= 100 for line in description.splitlines())
    block = _node_block(description, "n0")
    assert _unwrapped(_argument_lines(block, "tag")) == f"tag = {tag!r}  explicit"
    assert "  level = 1  default" in block  # not padded to the width of the tag (250 columns before issue 30)


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
