"""The cookiecutter-operator round trip: generate a pack into a temporary directory with the real
`cookiecutter` command, install it with pip, load it by name, run the generated pack's own tests,
and build the catalog with it. Invalid template variables stop in the pre-generation hook.

Nothing here uses the network: pip installs from the local directory with --no-index and
--no-build-isolation (setuptools comes from this environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cookiecutter-operator"
PACK, ALIAS = "acme_lab", "scaled_tanh"
DISTRIBUTION, MODULE, IDENTITY, CLASS = "hndl-acme-lab", "hndl_acme_lab", "acme_lab.scaled_tanh", "ScaledTanh"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _run(command: list[str], *, cwd: Path, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout)


def _cookiecutter(output: Path, work: Path, **variables: str) -> subprocess.CompletedProcess:
    """The documented command, `cookiecutter cookiecutter-operator --no-input name=value ...`, with its
    user configuration (replay files, template cache) kept inside the temporary directory."""
    config = work / "cookiecutter.yaml"
    if not config.exists():
        config.write_text(f"cookiecutters_dir: {work / 'templates'}\nreplay_dir: {work / 'replay'}\n", encoding="utf-8")
    return _run([sys.executable, "-m", "cookiecutter", str(TEMPLATE), "--no-input", "--output-dir", str(output),
                 "--config-file", str(config), *(f"{name}={value}" for name, value in variables.items())], cwd=work)


def _check(result: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{what} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("cookiecutter")
    _check(_cookiecutter(work / "generated", work, pack_name=PACK, operator_alias=ALIAS), "cookiecutter")
    project = work / "generated" / DISTRIBUTION
    source = work / "source"  # pip builds in place: keep the generated tree as it was generated
    shutil.copytree(project, source)
    target = work / "site"
    _check(_run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
                 "--target", str(target), str(source)], cwd=work), "pip install")
    return {"work": work, "project": project, "target": target}


def test_the_template_generates_a_complete_pack(pack):
    project = pack["project"]
    files = sorted(path.relative_to(project).as_posix() for path in project.rglob("*") if path.is_file())
    # docs/ holds whatever `python -m hndl.docs` writes (at least the index and the operator's page).
    assert [name for name in files if not name.startswith("docs/")] == sorted([
        ".gitignore", "README.md", "pyproject.toml", f"{MODULE}/__init__.py", f"{MODULE}/{ALIAS}.py",
        "tests/test_harness.py", f"tests/test_{ALIAS}.py", "tests/test_catalog.py",
    ])
    assert {"docs/operators/index.md", f"docs/operators/{PACK}/{ALIAS}.md"} <= set(files)
    pyproject = (project / "pyproject.toml").read_text(encoding="utf-8")
    assert f'name = "{DISTRIBUTION}"' in pyproject
    assert f'[project.entry-points."hndl.packs"]\n{PACK} = "{MODULE}"' in pyproject
    operator = (project / MODULE / f"{ALIAS}.py").read_text(encoding="utf-8")
    assert f'"{ALIAS}",\n    identity="{IDENTITY}",' in operator and f"class {CLASS}(nn.Module):" in operator
    assert "{{" not in operator and "cookiecutter" not in operator  # fully rendered
    tests = (project / "tests" / "test_harness.py").read_text(encoding="utf-8")
    assert "from hndl.testing import check_operator, example_cases" in tests


def test_the_installed_pack_loads_by_name(pack):
    script = textwrap.dedent(f"""
        import {MODULE}
        from pathlib import Path
        from hndl import Registry
        from hndl.packs import installed_packs
        from hndl.torch import network

        assert Path({MODULE}.__file__).is_relative_to({str(pack["target"])!r}), {MODULE}.__file__
        assert installed_packs()[{PACK!r}].value == {MODULE!r}
        registry = Registry.from_packs({PACK!r})
        assert registry.aliases() == ({ALIAS!r},), registry.aliases()
        assert registry.by_identity({IDENTITY + "@1"!r}) is registry.get({ALIAS!r})
        both = Registry.from_packs("basic", {PACK!r})
        model = network("linear(64)\\n{ALIAS}()\\nlinear()", input_shape=("B", 32), output_shape=("B", 10),
                        registry=both, device="cpu")
        print(model)
    """)
    result = _check(_run([sys.executable, "-c", script], cwd=pack["work"], PYTHONPATH=str(pack["target"])), "loading")
    assert f"1      n1    {ALIAS}  [B, 64]      [B, 64]" in result.stdout


def test_the_generated_pack_passes_its_own_tests(pack):
    # cwd is outside the project, so the tests import the installed copy, not the source tree.
    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pack["project"] / "tests")],
                  cwd=pack["work"], PYTHONPATH=str(pack["target"]), timeout=600)
    _check(result, "the generated pack's tests")
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    assert int(summary.split()[0]) >= 20, summary


def test_the_catalog_builds_with_the_installed_pack(pack):
    output = pack["work"] / "docs"
    _check(_run([sys.executable, "-m", "hndl.docs", "--packs", PACK, "--output", str(output)],
                cwd=pack["work"], PYTHONPATH=str(pack["target"])), "python -m hndl.docs")
    page = output / PACK / f"{ALIAS}.md"
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# `{ALIAS}`") and f"- Identity: `{IDENTITY}@1`" in text
    assert f"[`{ALIAS}`]({PACK}/{ALIAS}.md)" in (output / "index.md").read_text(encoding="utf-8")
    # One generator: the page the template shipped is the page the installed pack documents.
    assert text == (pack["project"] / "docs" / "operators" / PACK / f"{ALIAS}.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("variables, message", [
    ({"operator_alias": "Bad-Name"}, "operator_alias 'Bad-Name' must be a lowercase identifier"),
    ({"pack_name": "basic"}, "pack_name 'basic' is a first-party pack name"),
    ({"operator_alias": "relu"}, "operator_alias 'relu' is already an operator of the first-party pack 'basic'"),
], ids=["bad-alias", "first-party-pack", "first-party-alias"])
def test_invalid_variables_stop_in_the_pre_generation_hook(tmp_path, variables, message):
    result = _cookiecutter(tmp_path / "out", tmp_path, **variables)
    assert result.returncode != 0
    assert f"ERROR: {message}" in result.stderr
    assert "pre_gen_project hook" in result.stdout + result.stderr
    assert not any((tmp_path / "out").glob("*/pyproject.toml"))  # nothing left behind
