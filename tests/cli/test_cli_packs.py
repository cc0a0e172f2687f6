"""`hndl packs`: every installed pack, one section each, with its operators."""

from __future__ import annotations

import re

from hndl import Registry
from hndl.docs.catalog import all_packs


def _sections(text: str) -> dict[str, list[str]]:
    sections = {}
    for block in text.strip("\n").split("\n\n"):
        lines = block.splitlines()
        sections[lines[0].split()[0]] = lines
    return sections


def test_packs_lists_every_installed_pack_and_operator(cli):
    result = cli("packs")
    assert result.rc == 0, result.err
    assert result.err == ""
    sections = _sections(result.out)
    assert {"basic", "vision", "transformer"} <= set(sections)
    assert list(sections) == list(all_packs())
    for name, lines in sections.items():
        specs = list(Registry.from_packs(name))
        assert re.fullmatch(rf"{name}  \(.+ \d+\S*, module \w+, {len(specs)} operators?\)", lines[0]), lines[0]
        rows = [line.split(None, 2) for line in lines[1:]]
        assert rows == [[spec.alias, spec.qualified, spec.summary] for spec in specs]
    assert sections["basic"][0].startswith("basic  (hndl-ops-basic ")
    assert any(line.split()[:2] == ["linear", "linear@1"] for line in sections["basic"])
    assert any(line.split()[:2] == ["conv", "conv2d@2"] for line in sections["vision"])
    assert any(line.split()[:2] == ["attention", "attention@2"] for line in sections["transformer"])


def test_a_third_party_pack_gets_its_own_section(cli, lab_site, on_path):
    result = cli("packs", env=on_path(lab_site))
    assert result.rc == 0, result.err
    sections = _sections(result.out)
    assert list(sections)[-1] == "lab"
    assert sections["lab"] == [
        "lab  (lab-pack 0.1, module lab_pack, 1 operator)",
        "  lab_swish  lab.swish@1  Swish, x * sigmoid(x), applied elementwise.",
    ]


def test_a_pack_that_fails_to_import_is_reported_and_the_rest_listed(cli, broken_site, on_path):
    result = cli("packs", env=on_path(broken_site))
    assert result.rc == 2
    assert result.err.startswith("pack broken: E_REGISTRY (field packs): operator pack 'broken' "
                                 "(hndl_cli_test_no_such_module) failed to import: ModuleNotFoundError")
    assert "remedy:" in result.err and "Traceback" not in result.err
    assert {"basic", "vision", "transformer"} <= set(_sections(result.out))


def test_packs_takes_no_arguments(cli):
    result = cli("packs", "basic")
    assert result.rc == 2
    assert "unrecognized arguments: basic" in result.err
