"""Documentation that runs as written: every code block of README.md and docs/*.md, in page order.

docs/operators/ (the generated catalog) is left out: ``python -m hndl.docs --check`` and the catalog
tests hold it. Each fenced block of a page is one of these kinds, read from its info string:

``python``, or ``{code-block} python`` without a caption
    Runs, in page order, in one namespace per page (a later block continues the earlier ones, as the
    page says), with the working directory a temporary folder. A block written as a session
    (``>>> `` prompts followed by their output) runs as a doctest in that namespace.
``sh``
    Each command runs as a user at the repository root would type it: ``source .venv/bin/activate``
    (the virtual environment running these tests), ``hndl ...`` (the console script's entry point,
    ``hndl.cli.main``, called in this process to keep the test fast) and ``python -m MODULE ...``;
    ``> FILE`` redirects a command's output, and what a command writes to stderr is shown with its
    output, as a terminal shows both. Any other command fails the test: mark its block ``no-run``.
    The working folder holds ``.venv`` and ``examples/`` as the repository root does.
``text`` right after a ``python`` or ``sh`` block (only blank lines between)
    What that block prints. A line ``...`` stands for any number of lines (a traceback's frames).
    When the output starts with ``Traceback (most recent call last):`` the block must raise, and
    what Python prints for the uncaught exception is compared.
``text`` anywhere else
    An illustration (a directory tree), not code.
``<language> no-run``
    Deliberately not run (it installs software, or runs the whole test suite); :data:`NOT_RUN`
    lists every such block with the reason and what tests it instead, so a new mark is a visible change.
``{code-block} <language>`` with ``:caption: PATH``
    A file of the page's worked project, written to PATH in the page's folder: Python is compiled,
    TOML parsed, and a ``pyproject.toml`` that declares ``hndl.packs`` entry points is installed as
    the page says (module and entry points on ``sys.path``), so the page's later blocks can use the pack.
``{hndl-plan}``, ``{hndl-error} CODE``
    Executed by the site build (``hndl.sphinx`` fails the build when a plan does not resolve or an
    example raises another code); run here too.
``{eval-rst}``, ``{toctree}``, ``{py:data}``
    Sphinx markup, not code.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
import runpy
import shlex
import sys
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import hndl
import hndl.cli
from hndl import HNDLError, Registry

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", *sorted(f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")))

#: Every block marked ``no-run``: (page, the block's first line) -> why, and what runs it instead.
NOT_RUN = {
    ("README.md", "make demo   # create .venv, install HNDL and its packs, then run examples/demo.py"):
        "installs the environment; tests/test_examples.py runs examples/demo.py, and `make test` runs this test",
    ("README.md", ".venv/bin/cookiecutter cookiecutter-operator --no-input -o /tmp pack_name=acme "
                  "operator_alias=scaled_tanh"):
        "installs into .venv; tests/test_cookiecutter.py generates the template and runs its tests",
    ("docs/getting-started.md", "make install   # or: make test (install, then every test and this site), make demo"):
        "installs the environment",
    ("docs/getting-started.md", "pip install -e . -e plugins/hndl-ops-basic -e plugins/hndl-ops-vision \\"):
        "installs the environment",
    ("docs/publishing-a-pack.md", ".venv/bin/pip install --no-index --no-build-isolation ./hndl-lab-ops"):
        "installs into .venv; this test installs the page's pack from its captioned files instead",
}

MARKUP = ("{eval-rst}", "{toctree}", "{py:data}")
TRACEBACK = "Traceback (most recent call last):"
FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.S | re.M)


# -- reading a page -------------------------------------------------------------------------------------
@dataclass
class Block:
    page: str
    number: int
    info: str
    body: str
    line: int
    follows_code: bool = False  # only blank lines since the previous block, which is python or sh
    options: dict = field(default_factory=dict)

    @property
    def language(self) -> str:
        words = self.info.split()
        if words and words[0] == "{code-block}":
            return words[1] if len(words) > 1 else ""
        return words[0] if words else ""

    @property
    def kind(self) -> str:
        words = self.info.split()
        if "no-run" in words[1:]:
            return "no-run"
        if not words:
            return "unmarked"
        if words[0] == "{code-block}":
            return "file" if "caption" in self.options else ("python" if self.language == "python" else "unmarked")
        if words[0] in ("python", "sh"):
            return words[0]
        if words[0] == "text":
            return "output" if self.follows_code else "illustration"
        if words[0] in ("{hndl-plan}", "{hndl-error}"):
            return words[0][1:-1]
        if words[0] in MARKUP:
            return "markup"
        return "unmarked"

    @property
    def where(self) -> str:
        return f"{self.page} block {self.number} (line {self.line}, {self.info or 'no info string'})"


def blocks_of(page: str) -> list[Block]:
    """The top-level fenced blocks of a page, in order, directive options split from their bodies."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found: list[Block] = []
    previous_end = None
    for number, match in enumerate(FENCE.finditer(text)):
        block = Block(page, number, match["info"].strip(), match["body"], text.count("\n", 0, match.start()) + 1)
        if block.info.startswith("{"):
            lines = block.body.splitlines(keepends=True)
            while lines and (option := re.match(r"^:([\w-]+):\s*(.*)$", lines[0])):
                block.options[option[1]] = option[2].strip()
                lines.pop(0)
            block.body = "".join(lines).lstrip("\n")
        if found and previous_end is not None and not text[previous_end:match.start()].strip():
            block.follows_code = found[-1].kind in ("python", "sh")
        found.append(block)
        previous_end = match.end()
    return found


# -- comparing printed text -----------------------------------------------------------------------------
def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; an expected line ``...`` matches any run of actual lines (possibly none)."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[start:]) for start in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


# -- running a page -------------------------------------------------------------------------------------
class Page:
    """One page's run: its namespace, working folder and shell state."""

    def __init__(self, page: str, folder: Path, monkeypatch: pytest.MonkeyPatch):
        self.page, self.folder, self.monkeypatch = page, folder, monkeypatch
        self.namespace: dict = {"__name__": f"__docs_{re.sub(r'[^a-z0-9]', '_', page.lower())}__"}
        self.activated = False
        (folder / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
        monkeypatch.chdir(folder)

    # python blocks
    def python(self, block: Block) -> tuple[str, BaseException | None]:
        if block.body.lstrip().startswith(">>> "):
            self.session(block)
            return "", None
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(block.body, f"<{block.where}>", "exec"), self.namespace)
            except Exception as error:  # noqa: BLE001 - compared with the page's traceback, or re-raised
                return printed.getvalue(), error
        return printed.getvalue(), None

    def session(self, block: Block) -> None:
        """A ``>>>`` block: every prompt's output is compared as doctest compares it (``...`` elides)."""
        test = doctest.DocTestParser().get_doctest(block.body, self.namespace, block.where, None, block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report = io.StringIO()
        runner.run(test, out=report.write, clear_globs=False)
        assert runner.failures == 0, f"{block.where}:\n{report.getvalue()}"

    # sh blocks
    def shell(self, block: Block) -> str:
        printed = io.StringIO()
        for command in re.sub(r"\\\n", " ", block.body).splitlines():
            words = shlex.split(command, comments=True)
            if not words:
                continue
            target = None
            if len(words) > 2 and words[-2] == ">":
                words, target = words[:-2], words[-1]
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                status = self.command(block, words)
            if target is None:
                printed.write(output.getvalue())
            elif target != "/dev/null":
                Path(target).write_text(output.getvalue(), encoding="utf-8")
            allowed = (0, 1) if words[:2] == ["hndl", "diff"] else (0,)  # diff: 1 says the plans differ
            assert status in allowed, f"{block.where}: `{command.strip()}` exited {status}"
        return printed.getvalue()

    def command(self, block: Block, words: list[str]) -> int:
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                if words == ["source", ".venv/bin/activate"]:
                    assert Path(".venv/bin/activate").is_file() and Path(".venv/bin/hndl").is_file()
                    self.activated = True
                    return 0
                if words[0] in ("hndl", ".venv/bin/hndl"):
                    assert words[0] != "hndl" or self.activated, f"{block.where}: `hndl` is not on PATH yet"
                    return hndl.cli.main(words[1:])
                if words[:2] in (["python", "-m"], [".venv/bin/python", "-m"]):
                    with _argv([words[2], *words[3:]]):
                        try:
                            runpy.run_module(words[2], run_name="__main__", alter_sys=True)
                        except SystemExit as leaving:
                            return leaving.code if isinstance(leaving.code, int) else (0 if leaving.code is None else 1)
                    return 0
        except SystemExit as leaving:  # argparse
            return leaving.code if isinstance(leaving.code, int) else 1
        finally:
            if errors.getvalue():
                sys.stdout.write(errors.getvalue())
        raise AssertionError(f"{block.where}: `{' '.join(words)}` is not a command this test runs; "
                             "mark the block no-run and list it in NOT_RUN")

    # captioned files
    def file(self, block: Block) -> None:
        path = self.folder / block.options["caption"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body, encoding="utf-8")
        if block.language == "python":
            compile(block.body, str(path), "exec")
        elif block.language == "toml":
            project = tomllib.loads(block.body)
            points = project.get("project", {}).get("entry-points", {})
            if "hndl.packs" in points:
                self.install(project["project"], points)

    def install(self, project: dict, points: dict) -> None:
        """The page's pack, installed as pip would leave it: the module folder beside a dist-info."""
        info = self.folder / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
        info.mkdir()
        metadata = f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
        (info / "METADATA").write_text(metadata, encoding="utf-8")
        sections = "".join(f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()) + "\n"
                           for group, entries in points.items())
        (info / "entry_points.txt").write_text(sections, encoding="utf-8")
        self.monkeypatch.syspath_prepend(str(self.folder))  # a new sys.path entry: packs are rescanned
        for module in {value.split(":")[0].split(".")[0] for value in points["hndl.packs"].values()}:
            self.monkeypatch.delitem(sys.modules, module, raising=False)


@contextlib.contextmanager
def _argv(argv: list[str]):
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def check_output(block: Block, shown: Block | None, printed: str, error: BaseException | None) -> None:
    if error is not None:
        if shown is None or not shown.body.startswith(TRACEBACK):
            raise AssertionError(f"{block.where} raised, and the page shows no traceback after it") from error
        printed += "".join(traceback.format_exception(error))
    elif shown is not None and shown.body.startswith(TRACEBACK):
        raise AssertionError(f"{block.where} shows a traceback, but it ran without an error")
    if shown is not None:
        expected, actual = lines_of(shown.body), lines_of(printed)
        assert matches(expected, actual), (
            f"{shown.where} is not what {block.where} prints.\n--- shown\n{shown.body}\n--- printed\n{printed}")


def run_page(page: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Run every block of ``page``; returns the kinds, in order (to show that something ran)."""
    run = Page(page, folder, monkeypatch)
    blocks = blocks_of(page)
    for index, block in enumerate(blocks):
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        shown = following if following is not None and following.kind == "output" else None
        if block.kind == "python":
            printed, error = run.python(block)
            check_output(block, shown, printed, error)
        elif block.kind == "sh":
            check_output(block, shown, run.shell(block), None)
        elif block.kind == "file":
            run.file(block)
        elif block.kind == "hndl-plan":
            options = {name: ast.literal_eval(value) for name, value in block.options.items() if name != "packs"}
            packs = [name for name in block.options.get("packs", "").replace(",", " ").split() if name]
            hndl.resolve(block.body, input_shape=options["input-shape"], output_shape=options["output-shape"],
                         **({"input_dtype": options["input-dtype"]} if "input-dtype" in options else {}),
                         **({"registry": Registry.from_packs(*packs)} if packs else {}))
        elif block.kind == "hndl-error":
            code = block.info.split()[1]
            with pytest.raises(HNDLError) as caught:
                exec(compile(block.body, f"<{block.where}>", "exec"), {"__name__": "__hndl_example__"})
            assert caught.value.code == code, f"{block.where}: raised {caught.value.code}, not {code}"
    return [block.kind for block in blocks]


# -- the tests ------------------------------------------------------------------------------------------
def test_every_block_has_a_kind_and_every_no_run_mark_is_listed():
    marked = {}
    for page in PAGES:
        for block in blocks_of(page):
            assert block.kind != "unmarked", (
                f"{block.where}: give the block an info string this test knows (python, sh, text, "
                "'<language> no-run', a captioned {code-block}, an hndl directive)")
            if block.kind == "no-run":
                marked[(page, block.body.splitlines()[0])] = block.where
    assert set(marked) == set(NOT_RUN), "the no-run marks changed: list each in NOT_RUN with its reason"


def test_a_page_without_code_is_not_silently_skipped():
    kinds = {page: {block.kind for block in blocks_of(page)} for page in PAGES}
    runnable = {page for page, found in kinds.items() if found & {"python", "sh", "hndl-plan", "hndl-error"}}
    assert runnable == set(PAGES) - {"docs/api.md"}, kinds  # the API page is autodoc markup only


def test_shown_output_is_compared_with_ellipsis_lines():
    assert matches(["Traceback (most recent call last):", "  ...", "E: x"],
                   ["Traceback (most recent call last):", '  File "a", line 1', "    f()", "E: x"])
    assert not matches(["a", "...", "c"], ["a", "b", "d"])
    assert not matches(["a"], ["a", "b"])


def test_a_page_that_shows_other_output_than_its_code_prints_fails(tmp_path, monkeypatch):
    """The checks bite: a wrong output block, a missing traceback, a wrong session line, an unknown command."""
    cases = {
        "wrong.md": ("```python\nprint(1 + 1)\n```\n\n```text\n3\n```\n", "is not what"),
        "raises.md": ("```python\nimport hndl\nhndl.resolve('linear(3)', input_shape=('B', 2), "
                      "output_shape=('B', 4))\n```\n", "raised, and the page shows no traceback"),
        "session.md": ("```python\n>>> 1 + 1\n3\n```\n", "Expected"),
        "command.md": ("```sh\nrm -rf build\n```\n", "not a command this test runs"),
    }
    pages = tmp_path / "pages"
    pages.mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pages)
    for number, (name, (text, message)) in enumerate(cases.items()):
        (pages / name).write_text(text, encoding="utf-8")
        (pages / "examples").mkdir(exist_ok=True)
        folder = tmp_path / f"run{number}"
        folder.mkdir()
        with pytest.raises(AssertionError, match=message):
            run_page(name, folder, monkeypatch)
    (pages / "right.md").write_text("```python\n>>> 1 + 1\n2\n```\n\n```python\nprint(*range(12), sep='\\n')\n```\n\n"
                                    "```text\n0\n...\n11\n```\n", encoding="utf-8")
    (tmp_path / "right").mkdir()
    assert run_page("right.md", tmp_path / "right", monkeypatch) == ["python", "python", "output"]


@pytest.mark.parametrize("page", PAGES)
def test_every_code_block_of_the_page_runs_and_prints_what_the_page_shows(page, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    kinds = run_page(page, tmp_path, monkeypatch)
    assert kinds
