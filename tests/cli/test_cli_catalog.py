"""`hndl catalog ALIAS`: the operator's catalog page, the same Markdown `python -m hndl.docs` writes."""

from __future__ import annotations

from hndl import Registry
from hndl.docs.catalog import catalog_pages, operator_page


def _page(alias: str, pack: str, packs: tuple) -> str:
    """The page hndl.docs' generator writes for ``alias`` (catalog_pages renders each with operator_page)."""
    return operator_page(Registry.from_packs(pack).get(alias), pack, Registry.from_packs(*packs))


def test_the_linear_page(cli):
    result = cli("catalog", "linear")
    assert result.rc == 0, result.err
    assert result.err == ""
    assert result.out == _page("linear", "basic", ("basic", "vision", "transformer", "pretrained"))
    assert result.out.startswith("# `linear`\n\nAffine map over the last axis")
    assert "- Identity: `linear@1`\n- Pack: `basic`" in result.out
    assert "```{graphviz}\n:alt: The resolved plan of example 1: " in result.out


def test_a_page_from_chosen_packs(cli):
    result = cli("catalog", "conv", "--packs", "basic,vision")
    assert result.rc == 0, result.err
    assert result.out == _page("conv", "vision", ("basic", "vision"))


def test_the_page_is_the_one_catalog_pages_writes(cli):
    result = cli("catalog", "tanh", "--packs", "basic")
    assert result.rc == 0, result.err
    assert result.out == catalog_pages(("basic",))["basic/tanh.md"]


def test_a_third_party_operator_is_found_without_naming_its_pack(cli, lab_site, on_path):
    result = cli("catalog", "lab_swish", env=on_path(lab_site))
    assert result.rc == 0, result.err
    assert result.out.startswith("# `lab_swish`\n\nSwish, x * sigmoid(x), applied elementwise.\n\n"
                                 "- Identity: `lab.swish@1`\n- Pack: `lab`\n")
    assert "n1    lab_swish  [B, 4]" in result.out


def test_an_unknown_alias(cli):
    result = cli("catalog", "lineer")
    assert result.rc == 2
    assert result.out == ""
    lines = result.err.splitlines()
    assert lines[0].startswith("E_OPERATOR: no operator 'lineer' in the packs basic, vision, transformer")
    assert "  remedy: Did you mean linear?" in lines
    assert "  remedy: Run `hndl packs` to list every operator, or opt its pack in with --packs." in lines
    assert "Traceback" not in result.err


def test_an_alias_outside_the_chosen_packs(cli):
    result = cli("catalog", "conv", "--packs", "basic")
    assert result.rc == 2
    assert result.err.startswith("E_OPERATOR: no operator 'conv' in the packs basic\n")


def test_an_unknown_pack(cli):
    result = cli("catalog", "linear", "--packs", "nosuch")
    assert result.rc == 2
    assert result.err.startswith("E_REGISTRY (field packs): no operator pack named 'nosuch'")


def test_a_page_from_one_pack_resolves_its_examples_like_the_generator(cli):
    """adaptive_norm's example uses basic's split: the page renders with --packs vision alone, as
    python -m hndl.docs --packs vision renders it."""
    result = cli("catalog", "adaptive_norm", "--packs", "vision")
    assert result.rc == 0, result.err
    assert result.out == catalog_pages(("vision",))["vision/adaptive_norm.md"]
