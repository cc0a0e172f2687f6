"""Bad input to every subcommand is one short diagnostic on stderr with exit status 2, never a
traceback (issue 15, item 9 and the CLI audit): digit floods in shapes, closed, oversized and
non-UTF-8 standard input, FIFOs and directories as files, unknown packs, and outputs that
cannot be written, which leave neither a half-written file nor a printed table behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

FLOOD = "9" * 5000
MLP_CONTRACT = ("--input-shape", "B,128", "--output-shape", "B,10", "--packs", "basic")


def one_paragraph(result, prefix):
    """The promise: exit 2, nothing on stdout, one short paragraph on stderr, no traceback."""
    assert result.rc == 2, result.err
    assert result.out == ""
    assert result.err.startswith(prefix), result.err[:300]
    assert "Traceback" not in result.err and "\n\n" not in result.err.strip()
    assert len(result.err) < 1000, result.err[:300]


@pytest.mark.parametrize("option", ["--input-shape", "--output-shape"])
def test_a_digit_flood_in_a_shape_is_a_diagnostic_not_a_traceback(cli, examples, option):
    shapes = {"--input-shape": "B,128", "--output-shape": "B,10"}
    shapes[option] = f"B,{FLOOD}"
    args = [item for pair in shapes.items() for item in pair]
    result = cli("resolve", "-", *args, "--packs", "basic", input=examples.mlp)
    one_paragraph(result, f"hndl resolve: error: {option} 'B,99")
    assert "axis 1 is a 5000-digit integer" in result.err


def test_an_extent_of_19_digits_still_reaches_the_contract_parser(cli, examples):
    result = cli("resolve", "-", "--input-shape", "B," + "9" * 19, "--output-shape", "B,10", "--packs", "basic",
                 input=examples.mlp)
    one_paragraph(result, "E_RESOURCE (field input_shape['x'])")
    assert "above max_dimension=2147483647" in result.err


def test_a_closed_standard_input(tmp_path):
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m hndl.cli resolve - --input-shape B,128 --output-shape B,10 <&-', sys.executable],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("hndl resolve: error: SPEC is -, but standard input is closed; "
                           "pipe the configuration in or pass a file\n")


def test_standard_input_that_is_not_utf8_is_located():
    done = subprocess.run([sys.executable, "-m", "hndl.cli", "resolve", "-", *MLP_CONTRACT],
                          input=b"linear(64)\n\xff\n", capture_output=True, timeout=300)
    err = done.stderr.decode()
    assert done.returncode == 2 and done.stdout == b""
    assert err.startswith("E_SYNTAX (standard input, line 2, column 1): standard input is not valid UTF-8: "
                          "byte 0xff at offset 11")


def test_standard_input_is_read_only_up_to_the_byte_budget(cli):
    result = cli("resolve", "-", *MLP_CONTRACT, input="#" * (3 << 20))
    one_paragraph(result, "E_RESOURCE: standard input holds more than 1048576 bytes of configuration")


def test_a_fifo_or_a_directory_as_the_spec(cli, tmp_path):
    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)
    one_paragraph(cli("resolve", fifo, *MLP_CONTRACT), "E_SCHEMA: cannot read configuration file")
    result = cli("resolve", tmp_path, *MLP_CONTRACT)
    one_paragraph(result, "E_SCHEMA: cannot read configuration file")
    assert "it is a directory" in result.err


def test_an_unknown_pack_in_every_subcommand_that_takes_packs(cli, specs, tmp_path):
    for command in (("resolve", specs.mlp, "--input-shape", "B,128", "--output-shape", "B,10"),
                    ("catalog", "linear"), ("diff", tmp_path / "a.json", tmp_path / "b.json")):
        result = cli(*command, "--packs", "no_such_pack")
        one_paragraph(result, "E_REGISTRY (field packs): no operator pack named 'no_such_pack' is installed")


def test_diff_of_a_fifo_a_directory_and_a_missing_plan(cli, tmp_path):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    for first in (fifo, tmp_path, tmp_path / "absent.json"):
        result = cli("diff", first, tmp_path / "other.json", "--packs", "basic")
        one_paragraph(result, "E_SCHEMA")
        assert "cannot read" in result.err


@pytest.mark.parametrize("target", ["no/such/dir/plan.json", "."])
def test_a_failed_save_prints_no_table_and_leaves_no_partial_file(cli, specs, tmp_path, target):
    before = set(os.listdir(tmp_path))
    result = cli("resolve", specs.mlp, *MLP_CONTRACT, "--save", target)
    one_paragraph(result, "hndl resolve: error: cannot write ")
    assert set(os.listdir(tmp_path)) == before


def test_a_save_replaces_an_existing_plan_whole(cli, specs, tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("x" * 100_000)
    result = cli("resolve", specs.mlp, *MLP_CONTRACT, "--save", target)
    assert result.rc == 0, result.err
    assert target.read_text().startswith("{") and len(target.read_text()) < 100_000
    assert sorted(os.listdir(tmp_path)) == sorted(["mlp.hndl", "generator.hndl", "discriminator.hndl", "plan.json"])
    assert oct(target.stat().st_mode & 0o777) != oct(0o600)  # not the temporary file's private mode


@pytest.mark.parametrize("target", ["no/such/dir/out.mmd", "folder.dot"])
def test_a_graph_that_cannot_be_written(cli, specs, tmp_path, target):
    (tmp_path / "folder.dot").mkdir()
    result = cli("graph", specs.mlp, *MLP_CONTRACT, "-o", target)
    one_paragraph(result, f"hndl graph: error: cannot write '{target}': ")
