"""ResolvedPlan: immutability and the §7 shape table, character for character."""

import pytest

import hndl
from hndl import HNDLError

MLP = """
linear(64)
relu()
linear()
"""

SPEC_MLP_TABLE = """\
Network: [B, 128] -> [B, 10]  dtype=float32
index  name  operation  input shape  output shape
0      n0    linear     [B, 128]     [B, 64]
1      n1    relu       [B, 64]      [B, 64]
2      n2    linear     [B, 64]      [B, 10]"""


def _lines(text):
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.fixture(scope="module")
def plan():
    return hndl.resolve(MLP, input_shape=("B", 128), output_shape=("B", 10))


def test_print_plan_matches_the_spec_table_character_for_character(plan, capsys):
    print(plan)
    assert _lines(capsys.readouterr().out) == _lines(SPEC_MLP_TABLE)
    assert repr(plan) == str(plan)


def test_plan_restates_first_input_and_output(plan):
    assert plan.input_shape == ("B", 128)
    assert plan.output_shape == ("B", 10)
    assert plan.output_ref == "node:n2/out"
    assert plan.dtype == "float32" and plan.input_dtype == "float32"
    assert plan.schema_version == 1 and plan.resolution_version == 1
    assert plan.frontend["kind"] == "python_config@1"
    assert plan.frontend["source"] == MLP


def test_nodes_are_concrete_in_execution_order(plan):
    assert [node.id for node in plan.nodes] == ["n0", "n1", "n2"]
    assert [node.op for node in plan.nodes] == ["linear@1", "relu@1", "linear@1"]
    head = plan.node("n2")
    assert dict(head.args) == {"out_features": 10, "bias": True, "in_features": 64}
    assert dict(head.provenance) == {"out_features": "inferred", "bias": "default", "in_features": "inferred"}
    assert dict(head.inputs) == {"x": "node:n1/out"}
    assert head.input_shapes["x"] == ("B", 64) and head.output_shapes["out"] == ("B", 10)
    assert head.initialization["kind"] == "torch_default@1"
    assert head.trainability["default"] is None
    assert head.source["line"] == 4  # original source coordinates
    with pytest.raises(KeyError):
        plan.node("missing")


def test_plan_is_immutable_all_the_way_down(plan):
    with pytest.raises(AttributeError):
        plan.dtype = "float16"
    with pytest.raises(AttributeError):
        del plan.nodes
    with pytest.raises(TypeError):
        plan.nodes[0].args["out_features"] = 3
    with pytest.raises(AttributeError):
        plan.nodes[0].op = "linear@2"
    with pytest.raises(TypeError):
        plan.inputs[0]["shape"] = ("B", 1)
    with pytest.raises(TypeError):
        plan.nodes[0].initialization["overrides"]["weight"] = 0.0
    assert isinstance(plan.nodes, tuple)


def test_repeated_resolution_is_identical(plan):
    again = hndl.resolve(MLP, input_shape=("B", 128), output_shape=("B", 10))
    assert again == plan
    assert str(again) == str(plan)


def test_branched_graph_prints_every_port_with_its_producer():
    registry = hndl.Registry.builtins()
    source = """
h = linear(x, 32, name="hidden")
a = relu(h, name="left")
b = tanh(h, name="right")
out = b
"""
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 8), output_shape=("B", 32), registry=registry)
    assert error.value.code == "E_BINDING"  # 'left' reaches no output
    plan_bound = hndl.resolve(
        """
hidden = linear(x, 32, name="hidden")
left = relu(hidden, name="left")
right = tanh(hidden, name="right")
""",
        input_shape=("B", 8),
        output_shape={"left": ("B", 32), "right": ("B", 32)},
        registry=registry,
    )
    lines = _lines(str(plan_bound))
    assert lines[0] == "Network: x=[B, 8] -> left=[B, 32], right=[B, 32] dtype=float32"
    assert lines[1].split() == ["name", "operation", "inputs", "outputs"]
    assert lines[2].split() == ["hidden", "linear", "x=[B,", "8]", "<-", "input:x", "out=[B,", "32]"]
    assert "x=[B, 32] <- node:hidden/out" in lines[3] and "x=[B, 32] <- node:hidden/out" in lines[4]
    assert len(lines) == 5  # the shared producer appears once


def test_header_names_differing_input_dtype():
    registry = hndl.Registry.builtins()

    @registry.operator(
        "count_embed",
        identity="test.count_embed",
        summary="Embed integer ids as floats for the test.",
        shape="ids[B, T]:int64 -> out[B, T]",
    )
    class CountEmbed(__import__("torch").nn.Module):
        def forward(self, ids):
            return ids.float()

    plan = hndl.resolve(
        "count_embed()\nlinear()", input_shape=("B", 4), output_shape=("B", 2),
        input_dtype="int64", registry=registry,
    )
    assert _lines(str(plan))[0] == "Network: [B, 4] -> [B, 2]  dtype=float32  input_dtype=int64"


def test_plans_copy_as_themselves_and_pickle_as_plain_data(plan):
    import copy
    import pickle

    assert copy.copy(plan) is plan and copy.deepcopy(plan) is plan
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan and again.to_json() == plan.to_json()
    with pytest.raises(TypeError):
        again.nodes[0].args["bias"] = False


def test_the_build_receipt_is_read_only_and_pickles():
    import pickle

    from hndl.torch import build

    receipt = build(hndl.resolve(MLP, input_shape=("B", 128), output_shape=("B", 10)), device="cpu").build_receipt
    assert set(receipt) == {"torch_version", "device", "dtype", "initialization_seed", "seed_mode",
                            "state_bytes", "estimated_state_bytes"}
    with pytest.raises(TypeError):
        receipt["device"] = "cuda"
    assert dict(pickle.loads(pickle.dumps(receipt))) == dict(receipt)


def test_a_restored_node_holds_each_field_in_its_own_slot(plan):
    """``PlanNode.restored`` writes its fields positionally, in slot order: each keyword must
    land in the slot of its own name."""
    from hndl.plan import PlanNode

    node = plan.nodes[0]
    fields = {name: getattr(node, name) for name in PlanNode.__slots__}
    marked = {name: (name, value) for name, value in fields.items()}  # every value names its field
    restored = PlanNode.restored(**marked)
    assert all(getattr(restored, name) == (name, fields[name]) for name in PlanNode.__slots__)
    assert PlanNode.restored(**fields) == node


# -- hostile text in a re-signed plan (issue 29, item 12) -------------------------------------------
#: An OSC 52 clipboard write, a bidirectional override and a line break: a terminal acts on the
#: first two, and the third would forge a line of the description.
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
HOSTILE = f"{OSC52} spatial\u202e.down2\nnode n9 (forged@1)\x9b"
CONV = 'conv(8, policy="down2", name="stage")\nflatten()\nlinear()'


def _resigned(record) -> str:
    """Canonical plan text of ``record`` with both digests recomputed, as HNDL writes them."""
    from hndl import persist

    body = persist.fields_body(record)
    semantic = persist.digest_of(persist.semantic_record(record))
    artifact = persist.sha256_of(persist.with_digests(body, semantic))
    return persist.with_digests(body, semantic, artifact).decode("utf-8")


@pytest.fixture(scope="module")
def hostile_plan():
    """A conv plan whose policy text and a derivation were rewritten, then re-signed with valid digests."""
    import json

    registry = hndl.Registry.from_packs("basic", "vision")
    plan = hndl.resolve(CONV, input_shape=("B", 3, 8, 8), output_shape=("B", 4), registry=registry)
    record = json.loads(plan.to_json())
    source = record["nodes"][0]["source"]
    source["policy"] = HOSTILE
    source["derivations"]["in_channels"] = [HOSTILE]
    return hndl.ResolvedPlan.from_json(_resigned(record), registry=registry), plan


def _no_terminal_controls(text: str) -> None:
    raw = [char for char in text if char not in "\n" and (ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F
                                                           or char in "\u202a\u202b\u202c\u202d\u202e")]
    assert raw == [], raw


def test_describe_of_a_re_signed_plan_shows_policy_text_escaped(hostile_plan):
    hostile, clean = hostile_plan
    text = hostile.describe()
    _no_terminal_controls(text)
    assert "  policy: \\x1b]52;c;ZWNobyBwd25lZA==\\x07 spatial\\u202e.down2\\x0anode n9 (forged@1)\\x9b" in text
    assert "<- \\x1b]52;c;" in text
    # Escaping forged no line: the description has exactly as many lines as the clean plan's.
    assert len(text.splitlines()) == len(clean.describe().splitlines())
    assert not any(line.startswith("node n9") for line in text.splitlines())


def test_the_diff_of_a_re_signed_plan_shows_policy_text_escaped(hostile_plan):
    hostile, clean = hostile_plan
    changes = clean.diff(hostile)
    text = str(changes)
    _no_terminal_controls(text)
    # The values are JSON (which writes \u001b itself); what JSON leaves raw is escaped too.
    assert '"\\u001b]52;c;ZWNobyBwd25lZA==\\u0007 spatial\\u202e.down2\\nnode n9 (forged@1)\\x9b"' in text
    assert len(text.splitlines()) == len(changes)


def test_the_shape_table_escapes_every_cell_and_the_header():
    """Restoration refuses such names today; the table escapes whatever plan-like object it is given."""
    from types import SimpleNamespace

    from hndl.plan_tables import shape_table

    def node(node_id, alias, ref):
        return SimpleNamespace(id=node_id, alias=alias, inputs={"x": ref}, outputs=("out",),
                               input_shapes={"x": ("B", 4)}, output_shapes={"out": ("B", 4)})

    chain = SimpleNamespace(inputs=({"name": "x", "dtype": "float32", "shape": ("B", 4)},),
                            outputs=({"name": "output", "dtype": "float32", "shape": ("B", 4)},),
                            dtype=f"float32{OSC52}", input_shape=("B", 4), output_shape=("B", 4),
                            nodes=[node(f"n0{OSC52}", f"relu\u202e", "input:x")],
                            output_ref=f"node:n0{OSC52}/out")
    text = shape_table(chain)
    _no_terminal_controls(text)
    assert "dtype=float32\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in text.splitlines()[0]
    assert "n0\\x1b]52;c;ZWNobyBwd25lZA==\\x07  relu\\u202e" in text
    graph = SimpleNamespace(**{**vars(chain), "inputs": chain.inputs + ({"name": "y\x1b", "dtype": "int64",
                                                                        "shape": ("B", 4)},)})
    text = shape_table(graph)
    _no_terminal_controls(text)
    assert "y\\x1b=[B, 4]" in text and "x=[B, 4] <- input:x" in text
