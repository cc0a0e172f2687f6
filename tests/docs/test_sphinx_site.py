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


def diagram_files(page: Path) -> list[Path]:
    """The SVG files a built page shows through sphinx.ext.graphviz's <object> tags."""
    sources = re.findall(r'<object data="([^"]+\.svg)" type="image/svg\+xml" class="graphviz">', page.read_text("utf-8"))
    return [(page.parent / source).resolve() for source in sources]


def test_operator_pages_and_worked_examples_carry_a_diagram_drawn_at_build_time(site):
    html_root = site / "html"
    for page in (html_root / CATALOG / "basic" / "linear.html", html_root / "contracts.html", html_root / "index.html"):
        files = diagram_files(page)
        assert files, f"no diagram on {page.name}"
        for svg in files:
            text = svg.read_text(encoding="utf-8")
            assert "<svg" in text and "graphviz-pure" in text  # drawn by the bundled program
        raw = page.read_text(encoding="utf-8")
        assert "mermaid" not in raw and "flowchart TD" not in raw and "digraph" not in raw
    linear = diagram_files(html_root / CATALOG / "basic" / "linear.html")[0].read_text(encoding="utf-8")
    assert ">n0</text>" in linear and ">: linear</text>" in linear
    # The generator example, resolved at build time: the seed and n0's width.
    assert "[B, 512, 4, 4]" in text_of(html_root / "contracts.html")
    assert "[B, 8192]" in text_of(html_root / "contracts.html")


def test_the_sidebar_groups_operators_by_pack(site):
    page = (site / "html" / CATALOG / "vision" / "conv.html").read_text(encoding="utf-8")
    sidebar = page[page.index('class="sidebar-tree"'):]
    for pack in ("basic", "vision", PACK_NAME):
        start = sidebar.index(f'href="../{pack}.html">Pack ')
        nested = sidebar[start:sidebar.index("</ul>", start)]
        members = set(re.findall(rf'href="(?:\.\./{pack}/)?([a-z0-9_]+)\.html"', nested)) - {pack}
        if pack == "vision":  # this page itself is listed as the current entry, href="#"
            assert 'class="toctree-l3 current current-page"><a class="current reference internal" href="#">' in nested
            members.add("conv")
        # The operator pages the build generated for the pack (lab is installed for the build only).
        assert members == {path.stem for path in (site / "docs" / CATALOG / pack).glob("*.md")}, pack
        assert members >= ({PACK_OPERATOR[0]} if pack == PACK_NAME else {"linear"} if pack == "basic" else {"conv"})


def test_the_sidebar_lists_each_packs_operators_by_category_then_name(site):
    """Issue 30 item 12: the sidebar showed operators in registration order."""
    page = (site / "html" / CATALOG / "index.html").read_text(encoding="utf-8")
    sidebar = page[page.index('class="sidebar-tree"'):]
    for pack in ("basic", "vision"):
        start = sidebar.index(f'href="{pack}.html">Pack ')
        nested = sidebar[start:sidebar.index("</ul>", start)]
        listed = re.findall(rf'href="{pack}/([a-z0-9_]+)\.html"', nested)
        specs = {spec.alias: spec for spec in Registry.from_packs(pack)}
        assert sorted(listed) == sorted(specs), pack
        keys = [(specs[alias].category or "uncategorized", alias) for alias in listed]
        assert keys == sorted(keys), pack


def test_the_errors_page_wraps_its_long_lines(site):
    page = (site / "html" / "errors.html").read_text(encoding="utf-8")
    assert page.count('<div class="hndl-error highlight-') == 2 * len(CODES)
    css = (site / "html" / "_static" / "hndl.css").read_text(encoding="utf-8")
    assert re.search(r"div\.hndl-error pre \{[^}]*white-space: pre-wrap;", css)
    assert 'href="_static/hndl.css' in page


# -- the built site in a browser ----------------------------------------------------------------------
#: The diagram fills hndl.drawing.dot uses: an input ellipse and a node box.
INPUT_FILL, NODE_FILL = (0xE3, 0xF2, 0xE3), (0xEE, 0xF2, 0xF8)


@pytest.mark.parametrize("page", ["index.html", f"{CATALOG}/basic/linear.html"])
def test_a_browser_shows_the_diagrams_and_no_diagram_source(site, browser, page):
    seen = browser(site / "html").probe(page)
    assert seen["diagrams"], f"no diagram on {page}"
    for diagram in seen["diagrams"]:
        assert diagram["svg"], diagram  # the SVG loaded (no network, no script on the page)
        assert diagram["width"] > 80 and diagram["height"] > 150, diagram
        assert "n0" in diagram["texts"], diagram
    for source in ("flowchart TD", "digraph", "rankdir", "graph [", "-->"):
        assert source not in seen["text"], f"{page} shows diagram source {source!r}"


def test_a_screenshot_of_the_front_page_shows_the_drawn_plan(site, browser):
    shot = browser(site / "html").screenshot("index.html", site / "front-page.png")
    assert (shot.width, shot.height) == (640, 700)
    width, step = shot.width, shot.step
    colours = {row[x * step:x * step + 3] for row in shot.rows[::10] for x in range(0, width, 10)}
    assert len(colours) > 8  # not blank
    # The plan's boxes and its input ellipse are painted: the diagram rendered, not its text.
    assert shot.count(NODE_FILL) > 500
    assert shot.count(INPUT_FILL) > 100


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
    assert {path.parent.name for path in (source / CATALOG).rglob("*/*.md")} == {"basic"}
    assert {path.name for path in (source / CATALOG).glob("*.md")} == {"index.md", "basic.md"}
