"""Bounded loading, dedent and the source map of declarative configuration (§7)."""

from __future__ import annotations

import os
import pathlib
import random
import textwrap

import pytest

from hndl.errors import HNDLError
from hndl.frontends.config.source import Source, load_file, load_text, resolve_budgets
from hndl.limits import SOURCE_BUDGETS


def _error(fn, *args, **kwargs) -> HNDLError:
    with pytest.raises(HNDLError) as info:
        fn(*args, **kwargs)
    assert info.value.remedies, "every error names a remedy"
    return info.value


# -- load_text ---------------------------------------------------------------------------


def test_plain_text_is_kept_and_not_dedented_when_flush():
    source = load_text("linear(64)\nrelu()\n")
    assert source.text == "linear(64)\nrelu()\n"
    assert source.original == "linear(64)\nrelu()\n"
    assert source.file is None
    assert source.position(1, 0) == (1, 1)


def test_indented_triple_quoted_source_is_dedented_with_a_column_map():
    original = """
        linear(64)

        relu()
    """
    source = load_text(original)
    assert source.text == textwrap.dedent(original)
    assert source.text.splitlines()[1] == "linear(64)"
    # dedented column 7 ("6" of 64) on line 2 is original column 8 + 7 = 16 (1-based)
    assert source.position(2, 7) == (2, 16)
    assert source.position(4, 0) == (4, 9)


def test_whitespace_only_lines_are_normalised_like_textwrap():
    original = "    a()\n      \n\t\n    b()\n"
    assert load_text(original).text == textwrap.dedent(original) == "a()\n\n\nb()\n"


def test_mixed_indentation_keeps_only_the_common_prefix():
    original = "  \ta()\n  b()\n"
    source = load_text(original)
    assert source.text == textwrap.dedent(original) == "\ta()\nb()\n"
    assert source.position(1, 1) == (1, 4)


@pytest.mark.parametrize("seed", range(40))
def test_dedent_matches_textwrap_on_random_texts(seed):
    rng = random.Random(seed)
    pieces = [" ", "\t", "a", "b(", ")", "\n", "  ", "# c"]
    text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
    source = load_text(text)
    assert source.text == textwrap.dedent(text)
    # every dedented line maps back onto the same characters of the original line
    for number, (before, after) in enumerate(
        zip(text.split("\n"), source.text.split("\n")), start=1
    ):
        if after:
            line, column = source.position(number, 0)
            assert line == number
            assert before[column - 1 :] == after


def test_crlf_and_lone_cr_are_line_endings():
    source = load_text("  a()\r\n  b()\r  c()")
    assert source.text == "a()\nb()\nc()"
    assert source.original == "  a()\r\n  b()\r  c()"
    assert source.position(3, 0) == (3, 3)


def test_non_str_is_schema_error():
    assert _error(load_text, b"linear()").code == "E_SCHEMA"
    assert _error(load_text, None).code == "E_SCHEMA"


def test_byte_budget_counts_utf8_bytes():
    budgets = {"max_source_bytes": 10}
    assert load_text("a" * 10, budgets=budgets).text == "a" * 10
    assert _error(load_text, "a" * 11, budgets=budgets).code == "E_RESOURCE"
    # five two-byte characters are ten bytes; six are twelve
    assert load_text("é" * 5, budgets=budgets)
    assert _error(load_text, "é" * 6, budgets=budgets).code == "E_RESOURCE"


def test_default_byte_budget():
    limit = SOURCE_BUDGETS["max_source_bytes"]
    assert _error(load_text, "#" * (limit + 1)).code == "E_RESOURCE"


def test_line_budget():
    budgets = {"max_source_lines": 3}
    assert load_text("a\nb\nc\n", budgets=budgets)
    error = _error(load_text, "a\nb\nc\nd", budgets=budgets)
    assert error.code == "E_RESOURCE" and "4 lines" in error.message
    assert _error(load_text, "a\rb\rc\rd", budgets=budgets).code == "E_RESOURCE"


def test_nul_and_surrogates_are_syntax_errors_with_position():
    error = _error(load_text, "a()\nb(\x00)")
    assert (error.code, error.location.line, error.location.column) == ("E_SYNTAX", 2, 3)
    error = _error(load_text, "x\ud800")
    assert (error.code, error.location.line, error.location.column) == ("E_SYNTAX", 1, 2)


def test_invalid_budgets_are_schema_errors():
    assert _error(load_text, "", budgets={"max_source_bytes": 0}).code == "E_SCHEMA"
    assert _error(load_text, "", budgets={"nope": 1}).code == "E_SCHEMA"
    assert _error(load_text, "", budgets={"max_source_bytes": True}).code == "E_SCHEMA"
    assert _error(load_text, "", budgets=[1]).code == "E_SCHEMA"
    assert resolve_budgets(None) is SOURCE_BUDGETS
    assert resolve_budgets({"max_ast_depth": 5})["max_ast_depth"] == 5


def test_hand_built_source_maps_without_removal():
    source = Source(text="a()", original="unrelated\ntext")
    assert source.position(1, 2) == (1, 3)
    assert source.position(0, -4) == (1, 1)


def test_char_column_handles_multibyte_characters():
    source = load_text("    f('é€𝄞', x)")
    # "f('é€𝄞', " is 9 characters and 2 + 3 + 4 + 4 bytes wider... x is at byte 15
    line = source.text
    byte = len(line[: line.index("x")].encode())
    assert source.char_column(1, byte) == line.index("x")
    assert source.node_position(1, byte) == (1, 4 + line.index("x") + 1)


def test_source_is_immutable():
    source = load_text("a()")
    with pytest.raises(Exception):
        source.text = "b()"  # type: ignore[misc]


# -- load_file ---------------------------------------------------------------------------


def test_load_file_reads_and_dedents(tmp_path: pathlib.Path):
    path = tmp_path / "model.hndl.py"
    path.write_text("    linear(64)\n    relu()\n", encoding="utf-8")
    source = load_file(path)
    assert source.text == "linear(64)\nrelu()\n"
    assert source.file == str(path)
    assert load_file(str(path)).file == str(path)


def test_load_file_strips_a_utf8_bom(tmp_path: pathlib.Path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbfrelu()\n")
    assert load_file(path).text == "relu()\n"


def test_load_file_oversized_is_resource_error(tmp_path: pathlib.Path):
    path = tmp_path / "big.py"
    path.write_bytes(b"#" * 101)
    error = _error(load_file, path, budgets={"max_source_bytes": 100})
    assert error.code == "E_RESOURCE" and error.location.file == str(path)
    path.write_bytes(b"#" * 100)
    assert load_file(path, budgets={"max_source_bytes": 100})


def test_load_file_reads_at_most_limit_plus_one_bytes(tmp_path, monkeypatch):
    path = tmp_path / "huge.py"
    path.write_bytes(b"#" * 10_000)
    requested = []
    real_read = os.read

    def spy(fd, n):
        requested.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", spy)
    assert _error(load_file, path, budgets={"max_source_bytes": 50}).code == "E_RESOURCE"
    assert sum(requested) <= 51


def test_load_file_invalid_utf8_reports_first_bad_byte(tmp_path: pathlib.Path):
    path = tmp_path / "bad.py"
    path.write_bytes("relu()\nlinear('é', \xff)\n".encode("latin-1").replace(b"\xe9", "é".encode()))
    error = _error(load_file, path)
    assert error.code == "E_SYNTAX"
    assert (error.location.line, error.location.column) == (2, 13)
    assert error.location.file == str(path)


def test_load_file_missing_directory_and_bad_type(tmp_path: pathlib.Path):
    missing = tmp_path / "missing.py"
    error = _error(load_file, missing)
    assert error.code == "E_SCHEMA" and str(missing) in error.message
    error = _error(load_file, tmp_path)
    assert error.code == "E_SCHEMA" and str(tmp_path) in error.message
    assert _error(load_file, 42).code == "E_SCHEMA"
    assert _error(load_file, b"/tmp/x.py").code == "E_SCHEMA"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_load_file_rejects_non_regular_files_without_blocking(tmp_path: pathlib.Path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert _error(load_file, fifo).code == "E_SCHEMA"


def test_load_file_applies_line_budget(tmp_path: pathlib.Path):
    path = tmp_path / "lines.py"
    path.write_text("a\n" * 5)
    assert _error(load_file, path, budgets={"max_source_lines": 4}).code == "E_RESOURCE"
