"""The Sphinx site: a real ``sphinx-build -W`` of docs/, with a third-party pack installed beside HNDL.

One build (module-scoped) serves every check of the built HTML: the catalog covers every
installed pack, first- and third-party, with the generator ``python -m hndl.docs`` uses; the
errors page shows every code; the API page documents exactly the public names. The examples on
the narrative pages and on the errors page are executed here too, so the site shows what ships.
"""

from __future__ import annotations

import contextlib
import html
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hndl
import hndl.testing
import hndl.torch
from hndl import HNDLError, Registry
from hndl.docs.catalog import all_packs, catalog_pages
from hndl.errors import CODES

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CATALOG = "_generated/operators"

#: The third-party pack of "Publishing a pack": its module is the page's own code block.
PACK_NAME = "lab"
PACK_MODULE = "hndl_lab_ops"
PACK_OPERATOR = ("crelu", "lab.crelu@1")

#: Pages whose ```python blocks run in order in one namespace; a ```text block right after a
#: python block is that block's printed output.
RUNNABLE_PAGES = ("getting-started", "frontends", "contracts", "plans", "backend", "writing-an-operator")


# -- helpers --------------------------------------------------------------------------------------------
def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, body)`` for every top-level backtick fence of a Markdown page, in order."""
    return [(match["info"].strip(), match["body"])
            for match in re.finditer(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", text, re.S | re.M)]


def captioned_block(page: str, caption: str) -> str:
    for info, body in fenced_blocks((DOCS / page).read_text(encoding="utf-8")):
        lines = body.splitlines(keepends=True)
        if info.startswith("{code-block}") and lines and lines[0].strip() == f":caption: {caption}":
            return "".join(lines[1:]).lstrip("\n")
    raise AssertionError(f"{page} has no code block captioned {caption!r}")


def error_examples() -> list[tuple[str, str]]:
    """``(code, source)`` for every ``hndl-error`` block of docs/errors.md."""
    return [(info.split()[1], body) for info, body in fenced_blocks((DOCS / "errors.md").read_text(encoding="utf-8"))
            if info.startswith("{hndl-error}")]


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def install_pack(target: Path) -> None:
    """Lay the documented pack out as an installed distribution: the module plus dist-info entry points."""
    package = target / PACK_MODULE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(captioned_block("publishing-a-pack.md", f"{PACK_MODULE}/__init__.py"),
                                         encoding="utf-8")
    info = target / "hndl_lab_ops-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hndl-lab-ops\nVersion: 0.1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[hndl.packs]\n{PACK_NAME} = {PACK_MODULE}\n", encoding="utf-8")


def sphinx_build(source: Path, output: Path, *, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(pythonpath), env.get("PYTHONPATH"))))
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(source), str(output)],
        env=env, capture_output=True, text=True, timeout=600,
    )


# -- the built site -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """docs/ built with -W into a temporary directory, with the third-party ``lab`` pack installed."""
    base = tmp_path_factory.mktemp("site")
    source = base / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build", "_generated", "operators"))
    install_pack(base / "site-packages")
    result = sphinx_build(source, base / "html", pythonpath=base / "site-packages")
    assert result.returncode == 0, f"sphinx-build -W failed:\n{result.stdout}\n{result.stderr}"
    return base


def test_every_operator_page_of_every_installed_pack_is_built(site):
    html_root = site / "html" / CATALOG
    index = (html_root / "index.html").read_text(encoding="utf-8")
    packs = all_packs()
    assert set(packs) >= {"basic", "vision", "transformer"}
    for pack in packs:
        for spec in Registry.from_packs(pack):
            page = html_root / pack / f"{spec.alias}.html"
            assert page.is_file(), f"no page for {pack}/{spec.alias}"
            assert spec.qualified in text_of(page)
            assert f'href="{pack}/{spec.alias}.html"' in index


def test_a_third_party_pack_appears_without_editing_the_site(site):
    alias, identity = PACK_OPERATOR
    page = site / "html" / CATALOG / PACK_NAME / f"{alias}.html"
    assert page.is_file()
    text = text_of(page)
    assert identity in text and "Concatenated ReLU" in text and f"Pack: {PACK_NAME}" in text
    assert "[B, 16]" in text and "[B, 32]" in text  # the example's resolved shape table
    assert f"Pack {PACK_NAME}" in text_of(site / "html" / CATALOG / "index.html")
    # The hidden toctree puts it in every page's navigation, e.g. the landing page's sidebar.
    assert f'href="{CATALOG}/{PACK_NAME}/{alias}.html"' in (site / "html" / "index.html").read_text(encoding="utf-8")


def test_the_site_renders_the_pages_the_catalog_generator_writes(site):
    generated = site / "docs" / CATALOG
    expected = catalog_pages(tuple(pack for pack in all_packs() if pack != PACK_NAME))
    for path, text in expected.items():
        if path != "index.md":  # the site's index also lists the lab pack
            assert (generated / path).read_text(encoding="utf-8") == text, path
    assert (generated / PACK_NAME / f"{PACK_OPERATOR[0]}.md").is_file()


def test_operator_pages_and_worked_examples_carry_a_diagram(site):
    operator = (site / "html" / CATALOG / "basic" / "linear.html").read_text(encoding="utf-8")
    assert '<pre  class="mermaid">' in operator and "flowchart TD" in operator
    worked = (site / "html" / "contracts.html").read_text(encoding="utf-8")
    assert '<pre  class="mermaid">' in worked
    # The generator example, resolved at build time: the seed and n0's width.
    assert "[B, 512, 4, 4]" in text_of(site / "html" / "contracts.html")
    assert "[B, 8192]" in text_of(site / "html" / "contracts.html")


def test_the_errors_page_lists_every_code_with_the_error_it_raised(site):
    text = text_of(site / "html" / "errors.html")
    for code in CODES:
        assert f"hndl.errors.HNDLError: {code}" in text, code


def test_the_api_page_documents_exactly_the_public_names(site):
    page = (site / "html" / "api.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page))
    public = ({f"hndl.{name}" for name in hndl.__all__}
              | {f"hndl.torch.{name}" for name in hndl.torch.__all__}
              | {f"hndl.testing.{name}" for name in hndl.testing.__all__})
    top = {name for name in documented if not any(name.startswith(other + ".") for other in documented)}
    assert top == public
    for member in documented - top:  # members of documented public classes (ResolvedPlan.to_json, ...)
        owner = member.rsplit(".", 1)[0]
        assert owner in public and isinstance(eval(owner, {"hndl": hndl}), type), member


# -- the examples, executed -----------------------------------------------------------------------------
def test_the_errors_page_has_one_example_per_code():
    codes = [code for code, _ in error_examples()]
    assert sorted(codes) == sorted(CODES) and len(codes) == len(set(codes))


@pytest.mark.parametrize("code, source", error_examples(), ids=[code for code, _ in error_examples()])
def test_each_error_example_raises_its_code(code, source):
    with pytest.raises(HNDLError) as caught:
        exec(compile(source, f"<errors.md {code}>", "exec"), {"__name__": "__hndl_example__"})
    assert caught.value.code == code, str(caught.value)


@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_the_examples_of_a_page_run_and_print_what_it_shows(page):
    blocks = fenced_blocks((DOCS / f"{page}.md").read_text(encoding="utf-8"))
    namespace = {"__name__": f"__hndl_docs_{page.replace('-', '_')}__"}
    ran = 0
    for number, (info, body) in enumerate(blocks):
        if info != "python":
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(body, f"<{page}.md block {number}>", "exec"), namespace)
        ran += 1
        following = blocks[number + 1] if number + 1 < len(blocks) else None
        if following is not None and following[0] == "text":
            assert printed.getvalue().rstrip("\n") == following[1].rstrip("\n"), f"{page}.md block {number}"
    assert ran, f"{page}.md has no python example"


def test_the_published_pack_module_is_a_working_pack(tmp_path, monkeypatch):
    install_pack(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # a new sys.path entry: packs are rescanned
    try:
        registry = Registry.from_packs("basic", PACK_NAME)
        plan = hndl.resolve("linear()\ncrelu()", input_shape=("B", 16), output_shape=("B", 64), registry=registry)
        assert plan.nodes[0].args["out_features"] == 32
        hndl.testing.check_operator(sys.modules[PACK_MODULE].CReLU, registry=registry)
    finally:
        sys.modules.pop(PACK_MODULE, None)


# -- the directives refuse what does not ship -----------------------------------------------------------
def test_the_build_fails_when_an_example_does_not_do_what_the_page_says(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        'extensions = ["myst_parser", "hndl.sphinx"]\nhndl_catalog_packs = ["basic"]\n', encoding="utf-8")
    (source / "index.md").write_text(
        "# Broken\n\n"
        "```{toctree}\n_generated/operators/index\n```\n\n"
        "```{hndl-error} E_SYNTAX\nimport hndl\nhndl.resolve('linear(h)', input_shape=('B', 4), output_shape=('B', 4))\n```\n\n"
        "```{hndl-plan}\n:input-shape: (\"B\", 4)\n:output-shape: (\"B\", 8)\n\nlinear(3)\n```\n",
        encoding="utf-8")
    result = sphinx_build(source, tmp_path / "html")
    assert result.returncode != 0
    assert "the E_SYNTAX example raised E_NAME" in result.stderr
    assert "hndl-plan does not resolve" in result.stderr and "E_CONSTRAINT" in result.stderr
    # Restricted to the basic pack, the catalog holds exactly its pages.
    assert {path.parent.name for path in (source / CATALOG).rglob("*.md") if path.name != "index.md"} == {"basic"}
