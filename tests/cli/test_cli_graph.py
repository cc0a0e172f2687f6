"""`hndl graph SPEC ... -o out.svg|out.mmd|out.dot|-`: the plan drawn with its resolved shapes."""

from __future__ import annotations

import re
import shutil
import sys
import textwrap

import pytest

import hndl
from hndl import Registry
from hndl.docs.diagram import mermaid
from hndl.docs.dot import dot

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
    assert text == dot(discriminator_plan)
    assert text.startswith("digraph plan {\n    rankdir=LR;\n") and text.endswith("}\n")
    # One box per node with its alias, one ellipse per input and output.
    for node in discriminator_plan.nodes:
        assert f'    "node:{node.id}" [shape=box, label="{node.id}: {node.alias}"];' in text
    assert '    "input:x" [shape=ellipse, label="x\\n[B, 1, 28, 28] float32"];' in text
    assert '    "output:features" [shape=ellipse, label="features\\n[B, 12544]"];' in text
    # Edges carry resolved shapes; a multi-input node names the port; the node named like an
    # output stays a different graph key.
    assert '    "input:y" -> "node:label_projection" [label="[B, 10]"];' in text
    assert '    "node:label_plane" -> "node:conditioned" [label="x1 [B, 1, 28, 28]"];' in text
    assert '    "node:features" -> "output:features" [label="[B, 12544]"];' in text
    edges = re.findall(r'^    "[^"]+" -> "[^"]+" \[label="[^"]*"\];$', text, flags=re.M)
    inputs = sum(len(node.inputs) for node in discriminator_plan.nodes)
    assert len(edges) == inputs + len(discriminator_plan.outputs)


def test_dot_strings_are_quoted_and_escaped():
    from hndl.docs.dot import _quote

    assert _quote('say "hi"\\now\nnext') == '"say \\"hi\\"\\\\now\\nnext"'


def test_svg_with_the_graphviz_on_this_machine(cli, specs, tmp_path):
    target = tmp_path / "generator.svg"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target)
    if shutil.which("dot"):
        assert result.rc == 0, result.err
        text = target.read_text(encoding="utf-8")
        assert "<svg" in text and "n2: reshape" in text and "[B, 512, 4, 4]" in text
    else:
        # No Graphviz here: the command says so clearly, exits 2, and writes nothing.
        assert result.rc == 2
        assert result.out == ""
        assert result.err == (
            "hndl graph: error: rendering .svg needs the Graphviz `dot` executable, which is not on PATH; "
            "install Graphviz (e.g. `apt-get install graphviz`), or write -o out.dot or -o out.mmd instead\n")
        assert not target.exists()


def _fake_dot(folder, body: str):
    """A `dot` executable (a Python script) that stands in for Graphviz."""
    folder.mkdir()
    script = folder / "dot"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body), encoding="utf-8")
    script.chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin"}


def test_svg_is_rendered_by_dot_from_the_dot_text(cli, specs, tmp_path, generator_plan):
    env = _fake_dot(tmp_path / "graphviz", """\
        import sys
        args = sys.argv[1:]
        assert args[0] == "-Tsvg" and args[1] == "-o", args
        text = sys.stdin.read()
        with open(args[2], "w") as out:
            out.write("<svg><!--" + text + "--></svg>\\n")
    """)
    target = tmp_path / "generator.svg"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target, env=env)
    assert result.rc == 0, result.err
    assert target.read_text(encoding="utf-8") == "<svg><!--" + dot(generator_plan) + "--></svg>\n"
    assert [path.name for path in tmp_path.iterdir() if path.suffix == ".svg"] == ["generator.svg"]


def test_a_failing_dot_is_reported_and_leaves_no_file(cli, specs, tmp_path):
    env = _fake_dot(tmp_path / "graphviz", """\
        import sys
        sys.stderr.write("Error: <stdin>: syntax error in line 1\\n")
        sys.exit(1)
    """)
    target = tmp_path / "generator.svg"
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", target, env=env)
    assert result.rc == 2
    assert result.err.startswith("hndl graph: error: Graphviz `dot` (")
    assert "failed to render" in result.err and "syntax error in line 1" in result.err
    assert not any(path.suffix == ".svg" for path in tmp_path.iterdir())


def test_an_unknown_format(cli, specs, tmp_path):
    result = cli("graph", specs.generator, *GENERATOR_CONTRACTS, "-o", tmp_path / "generator.png")
    assert result.rc == 2
    assert "cannot tell the graph format of" in result.err and ".svg, .mmd or .dot" in result.err


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
