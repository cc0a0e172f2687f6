"""python -m hndl.docs: one page per operator from its declaration, and a --check that catches drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hndl import Registry
from hndl.docs.__main__ import main
from hndl.docs.catalog import catalog_pages, catalog_toctrees, default_packs
from hndl.docs.diagram import mermaid
import hndl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pages():
    return catalog_pages(("basic", "vision"))


def test_one_page_per_operator_plus_an_index_and_a_page_per_pack(pages):
    registry = Registry.from_packs("basic", "vision")
    expected = {f"basic/{spec.alias}.md" for spec in Registry.from_packs("basic")}
    expected |= {f"vision/{spec.alias}.md" for spec in Registry.from_packs("vision")}
    assert set(pages) == expected | {"index.md", "basic.md", "vision.md"}
    assert len(pages) == len(registry) + 3


def test_a_page_publishes_the_whole_declaration(pages):
    page = pages["vision/conv.md"]
    assert page.startswith("# `conv`\n\n2-D convolution")
    assert "- Identity: `conv2d@2`" in page and "- Category: convolution" in page
    assert "Shape relation: `x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]`" in page
    assert "| `out_channels` | int | inferred (from `C_out`) | >= 1 | positional or keyword |" in page
    assert "| `padding` | \"pair\" | `(0, 0)` | >= 0; <= 2147483647 | keyword only |" in page
    assert "| `down2` | `spatial.down2_conv@1` |" in page
    assert "0      n0    conv       [B, 3, 16, 16]  [B, 8, 16, 16]" in page  # the resolved example
    # The example's diagram: Graphviz DOT, drawn to SVG when the site is built.
    assert "```{graphviz}\n:alt: The resolved plan of example 1: x [B, 3, 16, 16] through conv to output" in page
    assert '"node:n0" [label=<<b>n0</b>: conv<br/><font point-size="10">[B, 8, 16, 16]</font>>];' in page
    assert "mermaid" not in page and "flowchart" not in page


def test_the_index_groups_by_pack_and_category(pages):
    index = pages["index.md"]
    assert index.index("## Pack `basic`") < index.index("## Pack `vision`")
    assert "| [`linear`](basic/linear.md) | `linear@1` |" in index
    assert "### convolution" in index
    assert f"[All {len(Registry.from_packs('basic'))} operators of `basic`](basic.md)" in index


def test_each_pack_page_lists_its_operators_by_category(pages):
    page = pages["vision.md"]
    assert page.startswith("# Pack `vision`\n")
    assert "## convolution" in page and "| [`conv`](vision/conv.md) | `conv2d@2` |" in page
    assert "(basic/" not in page  # only its own operators


def test_the_navigation_nests_operators_under_their_pack(pages):
    trees = catalog_toctrees(pages)
    assert trees["index"] == ["basic", "vision"]
    assert set(trees["basic"]) == {f"basic/{spec.alias}" for spec in Registry.from_packs("basic")}
    assert "vision/conv" in trees["vision"] and "basic/linear" not in trees["vision"]


def test_the_navigation_lists_each_packs_operators_by_category_then_name(pages):
    """Issue 30 item 12: the sidebar listed operators in registration order (``linear`` first,
    ``add`` after the activations), not the order of the pack page's category tables."""
    trees = catalog_toctrees(pages)
    for pack in ("basic", "vision"):
        specs = {spec.alias: spec for spec in Registry.from_packs(pack)}
        listed = [document.split("/", 1)[1] for document in trees[pack]]
        assert sorted(listed) == sorted(specs)
        keys = [(specs[alias].category or "uncategorized", alias) for alias in listed]
        assert keys == sorted(keys)
        # the same order as the pack page's tables, read top to bottom
        linked = [line.split("](", 1)[1].split(")", 1)[0] for line in pages[f"{pack}.md"].splitlines()
                  if line.startswith("| [`")]
        assert linked == [f"{document}.md" for document in trees[pack]]
    basic = [document.split("/", 1)[1] for document in trees["basic"]]
    assert basic.index("gelu") < basic.index("relu") < basic.index("add") < basic.index("linear")


def test_the_diagram_labels_edges_with_resolved_shapes():
    plan = hndl.resolve("a, b = split(2)\nout = add(a, b)", input_shape=("B", 4), output_shape=("B", 2))
    text = mermaid(plan)
    assert 'in_x -- "[B, 4]" --> n0' in text
    assert 'n0 -- "x [B, 2]" --> n1' in text and 'n0 -- "y [B, 2]" --> n1' in text
    assert "n1 --> out_output" in text


def test_check_passes_on_fresh_pages_and_fails_on_each_kind_of_drift(tmp_path, capsys):
    output = tmp_path / "operators"
    assert main(["--output", str(output), "--packs", "basic"]) == 0
    assert main(["--check", "--output", str(output), "--packs", "basic"]) == 0
    page = output / "basic" / "relu.md"
    page.write_text(page.read_text() + "edited\n")
    (output / "basic" / "gone.md").write_text("# an operator that no longer exists\n")
    (output / "basic" / "tanh.md").unlink()
    assert main(["--check", "--output", str(output), "--packs", "basic"]) == 1
    errors = capsys.readouterr().err
    assert f"stale {page}" in errors
    assert "missing" in errors and "tanh.md" in errors
    assert "no longer generated" in errors and "gone.md" in errors
    assert main(["--output", str(output), "--packs", "basic"]) == 0  # regenerating repairs all three
    assert main(["--check", "--output", str(output), "--packs", "basic"]) == 0
    assert not (output / "basic" / "gone.md").exists()


def test_the_checked_in_catalog_is_current():
    result = subprocess.run([sys.executable, "-m", "hndl.docs", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert set(default_packs()) >= {"basic", "vision", "transformer"}


def test_an_example_that_needs_the_network_is_shown_but_not_resolved():
    from torch import nn

    from hndl import Example, operator
    from hndl.docs.catalog import operator_page

    @operator("remote_thing", summary="Something that needs a download.", shape="x[B, ...] -> out[B, ...]",
              category="test", examples=(Example("remote_thing()", ("B", 4), ("B", 4), network=True),))
    class RemoteThing(nn.Identity):
        """Passes its input through."""

    page = operator_page(RemoteThing.__hndl_operator__, "test", Registry.builtins())
    assert "remote_thing()" in page and "needs network access" in page
    assert "```text" not in page  # no resolution was attempted (it would fail: the alias is unregistered)


def test_pack_names_may_carry_spaces(tmp_path):
    output = tmp_path / "operators"
    assert main(["--output", str(output), "--packs", "basic, vision"]) == 0
    assert (output / "vision" / "conv.md").exists() and (output / "basic" / "linear.md").exists()
