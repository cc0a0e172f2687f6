"""Every `hndl` command loads every installed pack by default, as `hndl packs` lists them; with
--packs, an alias of a pack left out names the exact --packs to write. The same hint reaches a
Python caller whose registry lacks an installed third-party pack."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SWISH = "linear(16)\nlab_swish()\nlinear()\n"
CONTRACT = ("--input-shape", "B,8", "--output-shape", "B,2")


def test_resolve_sees_a_third_party_pack_without_packs(installed_cli, tmp_path, lab_site, on_path):
    spec = tmp_path / "swish.hndl"
    spec.write_text(SWISH, encoding="utf-8")
    result = installed_cli("resolve", spec, *CONTRACT, env=on_path(lab_site))
    assert result.rc == 0, result.err
    assert "n1    lab_swish  [B, 16]" in result.out


def test_diff_sees_it_too(cli, tmp_path, lab_site, on_path):
    """The saved plans name lab.swish@1: verifying them needs the third-party pack."""
    env = on_path(lab_site)
    for name, width in (("small", 16), ("large", 32)):
        (tmp_path / f"{name}.hndl").write_text(SWISH.replace("16", str(width)), encoding="utf-8")
        saved = cli("resolve", tmp_path / f"{name}.hndl", *CONTRACT, "--save", tmp_path / f"{name}.json", env=env)
        assert saved.rc == 0, saved.err
    compared = cli("diff", tmp_path / "small.json", tmp_path / "large.json", env=env)
    assert compared.rc == 1, compared.err
    assert compared.out.splitlines()[-1].endswith(" differences")


def test_the_help_says_what_the_default_is(cli):
    result = cli("resolve", "--help")
    assert result.rc == 0
    assert "every installed pack, as `hndl packs` lists" in " ".join(result.out.split())


def test_an_alias_of_a_pack_left_out_names_the_packs_to_write(cli, tmp_path, lab_site, on_path):
    spec = tmp_path / "swish.hndl"
    spec.write_text(SWISH, encoding="utf-8")
    result = cli("resolve", spec, *CONTRACT, "--packs", "basic", env=on_path(lab_site))
    assert result.rc == 2
    assert result.err.splitlines() == [
        f"E_OPERATOR ({spec}, line 2, column 1): unknown operator 'lab_swish'",
        "  remedy: The installed pack 'lab' provides 'lab_swish': resolve with Registry.from_packs('basic', 'lab') "
        "(on the command line: --packs basic,lab).",
    ]


def test_a_misspelt_operator_on_the_command_line_suggests_the_alias(cli):
    result = cli("resolve", "-", "--input-shape", "B,8", "--output-shape", "B,2", input="linear(16)\nrelu()\nlinaer()\n")
    assert result.rc == 2
    assert "  remedy: Did you mean linear?" in result.err.splitlines()


#: The first-party packs, in the order every default list puts them (before any third-party pack).
FIRST_PARTY = ("basic", "vision", "transformer", "pretrained")


def _installed_packs(env: dict) -> list[str]:
    """The names under the `hndl.packs` entry-point group, as the interpreter sees them with ``env``:
    read from the installed metadata, not from HNDL, so the expectation does not restate the code under test."""
    script = ("from importlib.metadata import entry_points\n"
              "print(' '.join(sorted({point.name for point in entry_points(group='hndl.packs')})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env, "PYTHONNOUSERSITE": "1"})
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_pack_that_fails_to_import_names_the_packs_that_load(cli, tmp_path, broken_site, lab_site, on_path):
    """The remedy lists every installed pack that loads (whatever else is installed: a third-party pack
    such as the cookiecutter template's is simulated by ``lab``), first-party ones first, never the broken one."""
    spec = tmp_path / "mlp.hndl"
    spec.write_text("linear(16)\nrelu()\nlinear()\n", encoding="utf-8")
    env = on_path(broken_site)
    env["PYTHONPATH"] = os.pathsep.join((str(lab_site), env["PYTHONPATH"]))
    installed = _installed_packs(env)
    assert {"broken", "lab", "basic"} <= set(installed)
    loading = [name for name in installed if name != "broken"]
    expected = [name for name in FIRST_PARTY if name in loading] + sorted(set(loading) - set(FIRST_PARTY))

    result = cli("resolve", spec, *CONTRACT, env=env)
    assert result.rc == 2
    lines = result.err.splitlines()
    assert lines[0].startswith("E_REGISTRY (field packs): operator pack 'broken' (hndl_cli_test_no_such_module) "
                               "failed to import: ModuleNotFoundError")
    assert lines[-1] == f"  remedy: Choose the packs with --packs {','.join(expected)}."
    narrowed = cli("resolve", spec, *CONTRACT, "--packs", ",".join(expected), env=env)
    assert narrowed.rc == 0, narrowed.err


def test_python_names_the_installed_third_party_pack_the_default_registry_lacks(tmp_path, lab_site, on_path):
    script = textwrap.dedent("""
        import hndl
        try:
            hndl.resolve("linear(16)\\nlab_swish()\\nlinear()", input_shape=("B", 8), output_shape=("B", 2))
        except hndl.HNDLError as error:
            print(error.remedies[0])
    """)
    env = dict(on_path(lab_site), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "The installed pack 'lab' provides 'lab_swish': resolve with Registry.from_packs('basic', 'vision', "
        "'transformer', 'pretrained', 'lab') (on the command line: --packs basic,vision,transformer,pretrained,lab)."
    )
