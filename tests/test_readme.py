"""The README shows what the code does: the 30x30 error excerpt is the real error, whole, and the
commands it tells a newcomer to type work from a checkout without traps."""

from __future__ import annotations

import re
from pathlib import Path

import hndl

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _blocks() -> list[tuple[str, str]]:
    """Every fenced block as (info string, body), in order."""
    return re.findall(r"^```(\w*)[^\n]*\n(.*?)^```$", README, flags=re.MULTILINE | re.DOTALL)


def _generator() -> str:
    body = next(body for info, body in _blocks() if info == "python" and "GENERATOR = " in body)
    return re.search(r'GENERATOR = """(.*?)"""', body, flags=re.DOTALL).group(1)


def test_the_30x30_excerpt_is_what_a_script_prints():
    """Uncaught, the error is a traceback: the page shows its first line, elides the frames, and shows
    the exception line and every line of the message after it, whole (tests/docs/test_code_blocks.py
    runs the block itself and compares the same text)."""
    blocks = _blocks()
    call = next(index for index, (info, body) in enumerate(blocks)
                if info == "python" and 'output_shape=("B", 3, 30, 30)' in body)
    info, shown = blocks[call + 1]
    assert info == "text"
    try:
        hndl.resolve(_generator(), input_shape=("B", 128), output_shape=("B", 3, 30, 30))
    except hndl.HNDLError as error:
        actual = f"hndl.errors.HNDLError: {error}\n"
    else:
        raise AssertionError("the README's 30x30 request resolved")
    assert shown == "Traceback (most recent call last):\n  ...\n" + actual
    assert "(relu)" in shown  # the elementwise links of the chain are shown, not elided


def test_the_files_the_cli_section_names_ship_in_examples():
    section = README.split("## The `hndl` command", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"examples/[\w.]+\.hndl", section))
    assert named == {"examples/mlp.hndl", "examples/mlp_wide.hndl"}
    root = Path(__file__).resolve().parents[1]
    assert all((root / name).is_file() for name in named)


def test_the_hndl_command_is_found_in_the_virtual_environment():
    section = README.split("## The `hndl` command", 1)[1].split("\n## ", 1)[0]
    assert "`.venv/bin/hndl`" in section and "source .venv/bin/activate" in section
    commands = [line.split("#")[0].split() for line in section.splitlines() if line.startswith("hndl ")]
    diff = next(index for index, words in enumerate(commands) if words[:2] == ["hndl", "diff"])
    saved_before = [words[words.index("--save") + 1] for words in commands[:diff] if "--save" in words]
    assert commands[diff][2:4] == saved_before  # both plans it compares were saved by the lines above


def test_the_template_command_writes_outside_the_repository():
    command = next(line for line in README.splitlines() if "cookiecutter cookiecutter-operator" in line)
    words = command.split()
    assert "-o" in words and words[words.index("-o") + 1] == "/tmp"
    assert "--no-index --no-build-isolation /tmp/hndl-acme" in README
    ignored = (Path(__file__).resolve().parents[1] / ".gitignore").read_text(encoding="utf-8").split()
    assert "hndl-acme/" in ignored


def test_the_pack_table_names_every_operator_of_each_first_party_pack():
    """The table under "Packs: the operators" lists exactly the aliases each installed first-party pack
    registers (old-version aliases included), so a new operator is not missing from the README."""
    from hndl.packs import installed_first_party

    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", README, flags=re.MULTILINE))
    for pack in installed_first_party():
        aliases = {spec.alias for spec in hndl.Registry.from_packs(pack)}
        named = set(re.findall(r"\b[a-z][a-z0-9_]*\b", re.sub(r"\([^()]*`[^()]*\)|\([A-Z][^()]*\)", "", rows[pack])))
        prose = {"and", "which", "keep", "version", "plans", "restoring", "older", "policies", "transformers", "timm",
                 "local", "pth", "checkpoints", "as", "single", "nodes", "1"}
        assert named - prose == aliases, (pack, sorted((named - prose) ^ aliases))
