"""`hndl graph SPEC ... -o out.svg|out.png|out.mmd|out.dot|-`: the plan drawn with its resolved shapes."""

from __future__ import annotations

import shutil
import struct

import pytest

import hndl
from hndl import Registry
from hndl.docs.diagram import mermaid
from hndl.drawing.dot import plan_dot
from hndl.drawing.graphviz import render

GENERATOR_CONTRACTS = ("--input-shape", "B,128", "--output-shape", "B,3,32,32")


@pytest.fixture(scope="module")
def generator_plan(examples):
    return hndl.resolve(examples.generator, input_shape=("B", 128), output_shape=("B", 3, 32, 32))


@pytest.fixture(scope="module")
def discriminator_plan(examples):
    return hndl.resolve(
        examples.discriminator,
        input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
        output_shape={"logits": ("B", 1), "features": ("B", 12544)},
        registry=Registry.from_packs("basic", "vision"),
    )


def test_mermaid_file(cli, specs, tmp_path, generator_plan):
    target = tmp_path / "generator.mmd"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target)
    assert result.rc == 0, result.err
    assert (result.out, result.err) == ("", "")
    text = target.read_text(encoding="utf-8")
    assert text == mermaid(generator_plan) + "\n"
    assert text.startswith("flowchart TD\n")
    assert '    n2 -- "[B, 512, 4, 4]" --> n3' in text


def test_mermaid_on_stdout(cli, examples, discriminator_plan):
    result = cli("graph", "-", *examples.discriminator_contracts, "--packs", "basic,vision", "-o", "-",
                 input=examples.discriminator)
    assert result.rc == 0, result.err
    assert result.out == mermaid(discriminator_plan) + "\n"
    assert '    in_x -- "x0 [B, 1, 28, 28]" --> conditioned' in result.out


def test_dot_file(cli, specs, examples, tmp_path, discriminator_plan):
    target = tmp_path / "discriminator.dot"
    result = cli("graph", specs.discriminator, *examples.discriminator_contracts, "--packs", "basic,vision",
                 "-o", target)
    assert result.rc == 0, result.err
    text = target.read_text(encoding="utf-8")
    assert text == plan_dot(discriminator_plan)
    assert text.startswith("digraph plan {\n") and "rankdir=TB" in text and text.endswith("}\n")
    for node in discriminator_plan.nodes:  # one box per node: its id and operator
        assert f'    "node:{node.id}" [label=<<b>{node.id}</b>: {node.alias}<br/>' in text
    assert '"input:x" [shape=ellipse' in text and "label=<<b>x</b><br/>[B, 1, 28, 28] float32>" in text
    assert '"output:features" [shape=ellipse' in text and "label=<<b>features</b><br/>[B, 12544]>" in text
    assert '    "input:y" -> "node:label_projection" [label="[B, 10]"];' in text
    assert '    "node:label_plane" -> "node:conditioned" [label="x1 [B, 1, 28, 28]"];' in text
    assert '    "node:features" -> "output:features" [label="[B, 12544]"];' in text


def without_graphviz_on_path(tmp_path) -> dict:
    """An environment whose PATH holds only a folder with no `dot` and no `graphviz-pure`."""
    empty = tmp_path / "bin"
    empty.mkdir()
    assert shutil.which("dot", path=str(empty)) is None and shutil.which("graphviz-pure", path=str(empty)) is None
    return {"PATH": str(empty)}


def test_svg_out_of_the_box_without_dot_on_path(cli, specs, tmp_path):
    target = tmp_path / "generator.svg"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target, env=without_graphviz_on_path(tmp_path))
    assert result.rc == 0, result.err
    assert (result.out, result.err) == ("", "")
    text = target.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<?xml") and "<svg" in text and text.rstrip().endswith("</svg>")
    assert ">n2</text>" in text and ">: reshape</text>" in text and ">[B, 512, 4, 4]</text>" in text
    assert "graphviz-pure" in text  # drawn by the bundled program, not a system Graphviz
    assert [path.name for path in tmp_path.iterdir() if path.suffix == ".svg"] == ["generator.svg"]


def test_png_out_of_the_box_without_dot_on_path(cli, specs, tmp_path):
    target = tmp_path / "generator.png"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target, env=without_graphviz_on_path(tmp_path))
    assert result.rc == 0, result.err
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert height > width > 100  # a top-down chain of 11 nodes


def test_the_svg_is_the_drawing_of_the_dot_output(cli, specs, tmp_path, generator_plan):
    target = tmp_path / "generator.svg"
    assert cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target).rc == 0
    assert target.read_bytes() == render(plan_dot(generator_plan), "svg")


def test_an_unknown_format(cli, specs, tmp_path):
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", tmp_path / "generator.gif")
    assert result.rc == 2
    assert "cannot tell the graph format of" in result.err and ".svg, .png, .mmd or .dot" in result.err


def test_a_failing_spec_draws_nothing(cli, specs, tmp_path):
    target = tmp_path / "broken.mmd"
    result = cli("graph", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,30,30", "-o", target)
    assert result.rc == 2
    assert result.err.startswith(f"E_CONSTRAINT (node n9; {specs.generator}, line 10, column 1)")
    assert not target.exists()


def test_the_output_is_required(cli, specs):
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS)
    assert result.rc == 2
    assert "the following arguments are required: -o/--output" in result.err
