"""hndl.drawing.dot: a plan as DOT text, every node with its operator and shapes, laid out top-down."""

from __future__ import annotations

import re

import hndl
from hndl.drawing.dot import node_edges, plan_dot, quote, source_key


#: A branch and a join: two linear branches read x, add joins them; then a named pair of outputs.
BRANCHED = """\
left = linear(x, 8, name="left")
right = linear(x, 8, name="right")
joined = add(left, right, name="joined")
score = linear(joined, 1, name="score")
"""


def branched_plan():
    return hndl.resolve(BRANCHED, input_shape={"x": ("B", 4)},
                        output_shape={"score": ("B", 1), "joined": ("B", 8)})


def test_every_node_is_a_box_with_its_operator_and_output_shape():
    plan = branched_plan()
    text = plan_dot(plan)
    assert text.startswith("digraph plan {\n") and text.endswith("}\n")
    assert "rankdir=TB" in text  # branches and joins read top-down
    for node in plan.nodes:
        (port,) = node.outputs
        shape = hndl.plan.format_shape(node.output_shapes[port])
        assert (f'    "node:{node.id}" [label=<<b>{node.id}</b>: {node.alias}<br/>'
                f'<font point-size="10">{shape}</font>>];') in text
    assert '"node:left" [label=<<b>left</b>: linear<br/><font point-size="10">[B, 8]</font>>];' in text


def test_named_inputs_and_outputs_sit_on_the_first_and_last_rank():
    text = plan_dot(branched_plan())
    assert '"input:x" [shape=ellipse, fillcolor="#e3f2e3", color="#4f7f4f", label=<<b>x</b><br/>[B, 4] float32>];' in text
    assert '"output:score" [shape=ellipse, fillcolor="#f9eedb", color="#8a6a30", label=<<b>score</b><br/>[B, 1]>];' in text
    assert '    { rank=min; "input:x"; }' in text
    assert '    { rank=max; "output:score"; "output:joined"; }' in text


def test_the_branch_and_the_join_are_edges_labelled_with_shapes():
    plan = branched_plan()
    text = plan_dot(plan)
    assert '    "input:x" -> "node:left" [label="[B, 4]"];' in text
    assert '    "input:x" -> "node:right" [label="[B, 4]"];' in text
    assert '    "node:left" -> "node:joined" [label="x [B, 8]"];' in text  # a join names its ports
    assert '    "node:right" -> "node:joined" [label="y [B, 8]"];' in text
    # The node named like an output stays a different graph key.
    assert '    "node:joined" -> "output:joined" [label="[B, 8]"];' in text
    assert '    "node:score" -> "output:score" [label="[B, 1]"];' in text
    edges = re.findall(r'^    "[^"]+" -> "[^"]+" \[label="[^"]*"\];$', text, flags=re.M)
    assert len(edges) == sum(len(node.inputs) for node in plan.nodes) + len(plan.outputs)


def test_a_producer_with_several_outputs_names_the_port_on_each_edge():
    plan = hndl.resolve("a, b = split(2)\nout = add(a, b)", input_shape=("B", 4), output_shape=("B", 2))
    text = plan_dot(plan)
    assert '<font point-size="10">first [B, 2]</font><br/><font point-size="10">rest [B, 2]</font>' in text
    assert '    "node:n0" -> "node:n1" [label="first \u2192 x [B, 2]"];' in text
    assert '    "node:n0" -> "node:n1" [label="rest \u2192 y [B, 2]"];' in text


def test_a_plan_without_nodes_joins_input_and_output():
    plan = hndl.resolve("", input_shape=("B", 3), output_shape=("B", 3))
    text = plan_dot(plan)
    assert '    "input:x" -> "output:output" [label="[B, 3]"];' in text
    assert "node:" not in text


def test_labels_are_escaped():
    assert quote('say "hi"\\now\nnext') == '"say \\"hi\\"\\\\now\\nnext"'
    assert source_key("node:n0/out") == "node:n0" and source_key("input:x") == "input:x"


def test_node_edges_list_one_edge_per_node_input():
    plan = branched_plan()
    assert node_edges(plan)[:2] == [("input:x", "left", "[B, 4]"), ("input:x", "right", "[B, 4]")]
