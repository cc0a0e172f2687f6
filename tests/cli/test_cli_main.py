"""The `hndl` console script itself: installed, helpful, and strict about usage."""

from __future__ import annotations

import hndl
from hndl import __version__
from hndl.plan import shape_table

SUBCOMMANDS = ("resolve", "explain", "graph", "diff", "packs", "catalog")


def test_the_installed_script_resolves_the_worked_generator(installed_cli, specs):
    result = installed_cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,32,32")
    assert result.rc == 0, result.err
    assert result.err == ""
    plan = hndl.resolve(specs.generator.read_text(), input_shape=("B", 128), output_shape=("B", 3, 32, 32))
    assert result.out == shape_table(plan) + "\n"


def test_the_installed_script_reports_errors_with_exit_2(installed_cli, specs):
    result = installed_cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,30,30")
    assert result.rc == 2
    assert result.err.startswith(f"E_CONSTRAINT (node n9; {specs.generator}, line 10, column 1)")
    assert "Traceback" not in result.err


def test_help_lists_every_subcommand(installed_cli):
    result = installed_cli("--help")
    assert result.rc == 0
    assert result.out.startswith("usage: hndl [-h] [--version] COMMAND ...")
    for command in SUBCOMMANDS:
        assert f"\n    {command} " in result.out


def test_every_subcommand_has_its_own_help(cli):
    for command in SUBCOMMANDS:
        result = cli(command, "--help")
        assert result.rc == 0, result.err
        assert result.out.startswith(f"usage: hndl {command} ")
    assert "--input-shape [NAME=]SHAPE" in cli("resolve", "--help").out
    assert "-o OUT, --output OUT" in cli("graph", "--help").out


def test_version(cli):
    result = cli("--version")
    assert (result.rc, result.out.strip()) == (0, f"hndl {__version__}")


def test_no_command_is_a_usage_error(cli):
    result = cli()
    assert result.rc == 2
    assert result.out == ""
    assert "the following arguments are required: COMMAND" in result.err


def test_unknown_command_and_option_are_usage_errors(cli):
    result = cli("build")
    assert result.rc == 2 and "invalid choice: 'build'" in result.err
    result = cli("packs", "--frobnicate")
    assert result.rc == 2 and "unrecognized arguments: --frobnicate" in result.err
