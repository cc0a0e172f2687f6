"""The cookiecutter-operator round trip: generate a pack into a temporary directory with the real
`cookiecutter` command, install it with pip, load it by name, run the generated pack's own tests,
and build the catalog with it; install it into a fresh venv that sees the local core only through a
.pth file. Invalid template variables stop in the pre-generation hook.

Nothing here uses the network: pip installs from the local directory with --no-index and
--no-build-isolation (setuptools comes from this environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

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
    assert f'[project.entry-points."hndl.operators"]\n{ALIAS} = "{MODULE}"' in pyproject
    operator = (project / MODULE / f"{ALIAS}.py").read_text(encoding="utf-8")
    assert f'"{ALIAS}",\n    identity="{IDENTITY}",' in operator and f"class {CLASS}(nn.Module):" in operator
    assert "{{" not in operator and "cookiecutter" not in operator  # fully rendered
    tests = (project / "tests" / "test_harness.py").read_text(encoding="utf-8")
    assert "from hndl.testing import check_operator, example_cases" in tests


def test_the_installed_pack_loads_by_name(pack):
    script = textwrap.dedent(f"""
        import {MODULE}
        from pathlib import Path
        from hndl import HNDLError, Registry
        from hndl.packs import declared_aliases, installed_packs
        from hndl.torch import network

        assert Path({MODULE}.__file__).is_relative_to({str(pack["target"])!r}), {MODULE}.__file__
        assert installed_packs()[{PACK!r}].value == {MODULE!r}
        assert declared_aliases()[{PACK!r}] == {{{ALIAS!r}}}
        try:  # an alias of this pack, asked of a registry without it: the pack is named from its metadata
            Registry.from_packs("basic").get({ALIAS!r})
        except HNDLError as error:
            remedy = error.remedies[0]
        else:
            raise AssertionError("the basic registry holds {ALIAS}")
        assert remedy.startswith("The installed pack {PACK!r} provides {ALIAS!r}"), remedy
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


def _hndl_requirement(pyproject: Path):
    """The ``hndl`` entry of a pyproject's dependencies, parsed."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    requirements = [Requirement(text) for text in data["project"]["dependencies"]]
    return next(requirement for requirement in requirements if requirement.name == "hndl")


def test_the_template_and_the_first_party_packs_require_only_this_core_series(pack):
    """`hndl` on the package index is another project (0.10.0): only 0.1.x, this core, may satisfy a pack."""
    core = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    pyprojects = [pack["project"] / "pyproject.toml", *sorted((ROOT / "plugins").glob("*/pyproject.toml"))]
    assert len(pyprojects) == 5
    for pyproject in pyprojects:
        specifier = _hndl_requirement(pyproject).specifier
        assert str(specifier) in ("<0.2,>=0.1", ">=0.1,<0.2"), pyproject
        assert specifier.contains(core) and specifier.contains("0.1.9"), pyproject
        assert not any(specifier.contains(other) for other in ("0.10.0", "0.2.0", "0.0.9")), pyproject


def test_a_baked_pack_installs_into_a_fresh_venv_next_to_the_local_core(pack, tmp_path):
    """A fresh venv sees this environment (core, torch, setuptools) only through a .pth file; pip
    installs the baked pack there with no index, and the pack resolves in that venv."""
    venv = tmp_path / "fresh"
    _check(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path), "python -m venv")
    python = venv / "bin" / "python"
    purelib = Path(_check(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               cwd=tmp_path), "sysconfig").stdout.strip())
    core_site = sysconfig.get_paths()["purelib"]  # this environment's site-packages, editable finders included
    (purelib / "hndl_local_core.pth").write_text(f"import site; site.addsitedir({core_site!r})\n", encoding="utf-8")
    baked = tmp_path / "baked"
    shutil.copytree(pack["project"], baked)
    _check(_run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
                 "--no-build-isolation", str(baked)], cwd=tmp_path), "pip install into the fresh venv")
    assert list(purelib.glob("hndl_acme_lab-*.dist-info")), "the pack is installed into the fresh venv"
    assert not list(purelib.glob("hndl-*.dist-info")), "pip found the local core and installed no other hndl"
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import hndl, {MODULE}
        from hndl import Registry

        assert sys.prefix == {str(venv)!r}, sys.prefix
        assert Path({MODULE}.__file__).is_relative_to({str(purelib)!r}), {MODULE}.__file__
        assert Registry.from_packs({PACK!r}).aliases() == ({ALIAS!r},)
        plan = hndl.resolve("linear(64)\\n{ALIAS}()\\nlinear()", input_shape=("B", 32), output_shape=("B", 10),
                            registry=Registry.from_packs("basic", {PACK!r}))
        print(plan.node("n1").op)
    """)
    result = _check(_run([str(python), "-c", script], cwd=tmp_path), "resolving in the fresh venv")
    assert result.stdout.strip() == f"{IDENTITY}@1"


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
