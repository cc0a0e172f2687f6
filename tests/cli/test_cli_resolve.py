"""`hndl resolve SPEC --input-shape ... --output-shape ...`: the shape table, or the error with exit 2."""

from __future__ import annotations

import json

import pytest

import hndl
from hndl import Registry, ResolvedPlan
from hndl.plan import shape_table

def test_the_worked_generator_resolves(cli, specs):
    # SPEC.md §7: [B, 3, 64, 64] needs an 8x8 seed, so n0 is 512 * 8 * 8 wide (the installed-script
    # test in test_cli_main.py covers [B, 3, 32, 32]).
    result = cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,64,64")
    assert result.rc == 0, result.err
    assert result.err == ""
    plan = hndl.resolve_file(specs.generator, input_shape=("B", 128), output_shape=("B", 3, 64, 64))
    assert result.out == shape_table(plan) + "\n"
    rows = result.out.splitlines()
    assert rows[0] == "Network: [B, 128] -> [B, 3, 64, 64]  dtype=float32"
    assert rows[2].split() == ["0", "n0", "linear", "[B,", "128]", "[B,", "32768]"]
    assert rows[4].split()[-4:] == ["[B,", "512,", "8,", "8]"]


def test_a_contradiction_is_E_CONSTRAINT_on_stderr_with_exit_2(cli, specs):
    result = cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,30,30")
    assert result.rc == 2
    assert result.out == ""
    with pytest.raises(hndl.HNDLError) as caught:
        hndl.resolve_file(specs.generator, input_shape=("B", 128), output_shape=("B", 3, 30, 30))
    assert result.err == str(caught.value) + "\n"
    first = result.err.splitlines()[0]
    assert first.startswith(f"E_CONSTRAINT (node n9; {specs.generator}, line 10, column 1): ")
    assert "would be 3.75" in first
    assert "\n  because: " in result.err
    assert "\n  remedy: Change a literal or a contract so the declared relations agree." in result.err
    assert "Traceback" not in result.err


def test_a_contradicting_literal_stands(cli, specs, tmp_path):
    spec = tmp_path / "literal.hndl"
    spec.write_text(specs.generator.read_text().replace("linear()", "linear(128)", 1))
    result = cli("resolve", spec, "--input-shape", "B,128", "--output-shape", "B,3,32,32")
    assert result.rc == 2
    with pytest.raises(hndl.HNDLError) as caught:
        hndl.resolve_file(spec, input_shape=("B", 128), output_shape=("B", 3, 32, 32))
    assert result.err == str(caught.value) + "\n"
    assert result.err.startswith(f"{caught.value.code} (")
    assert "remedy:" in result.err


def test_a_missing_file(cli, tmp_path):
    result = cli("resolve", tmp_path / "absent.hndl", "--input-shape", "B,128", "--output-shape", "B,10")
    assert result.rc == 2
    assert result.out == ""
    assert result.err.startswith("E_SCHEMA")
    assert "no such file" in result.err and "absent.hndl" in result.err
    assert "remedy:" in result.err and "Traceback" not in result.err


def test_an_unknown_pack(cli, specs):
    result = cli("resolve", specs.mlp, "--input-shape", "B,128", "--output-shape", "B,10", "--packs", "basic,nosuch")
    assert result.rc == 2
    assert result.err.startswith("E_REGISTRY (field packs): no operator pack named 'nosuch' is installed")
    assert "remedy: Install the pack, or choose one of:" in result.err


def test_an_operator_outside_the_chosen_packs(cli, specs):
    result = cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,32,32",
                  "--packs", "basic")
    assert result.rc == 2
    assert result.err.startswith("E_")
    assert "deconv" in result.err and "Traceback" not in result.err


def test_a_syntax_error_carries_its_line(cli, tmp_path):
    spec = tmp_path / "bad.hndl"
    spec.write_text("linear(64)\nimport os\n")
    result = cli("resolve", spec, "--input-shape", "B,128", "--output-shape", "B,10")
    assert result.rc == 2
    assert result.err.startswith("E_SYNTAX")
    assert "line 2" in result.err.splitlines()[0]


def test_spec_from_stdin(cli, examples):
    result = cli("resolve", "-", "--input-shape", "B,128", "--output-shape", "B,10", input=examples.mlp)
    assert result.rc == 0, result.err
    plan = hndl.resolve(examples.mlp, input_shape=("B", 128), output_shape=("B", 10))
    assert result.out == shape_table(plan) + "\n"


def test_named_ports_and_chosen_packs(cli, specs, examples):
    result = cli("resolve", specs.discriminator, *examples.discriminator_contracts, "--packs", "basic,vision")
    assert result.rc == 0, result.err
    plan = hndl.resolve_file(
        specs.discriminator,
        input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
        output_shape={"logits": ("B", 1), "features": ("B", 12544)},
        registry=Registry.from_packs("basic", "vision"),
    )
    assert result.out == shape_table(plan) + "\n"
    assert result.out.startswith("Network: x=[B, 1, 28, 28], y=[B, 10] -> logits=[B, 1], features=[B, 12544]")


def test_a_third_party_pack(cli, tmp_path, lab_site, on_path):
    spec = tmp_path / "swish.hndl"
    spec.write_text("linear(16)\nlab_swish()\nlinear()\n")
    result = cli("resolve", spec, "--input-shape", "B,8", "--output-shape", "B,2", "--packs", "basic", "--packs", "lab",
                  env=on_path(lab_site))
    assert result.rc == 0, result.err
    assert "n1    lab_swish  [B, 16]" in result.out


def test_integer_input_dtype_per_named_input(cli):
    source = "embedding(100, 16)\nlinear(4)\n"
    result = cli("resolve", "-", "--input-shape", "x=B,12", "--output-shape", "B,12,4", "--input-dtype", "x=int64",
                 input=source)
    assert result.rc == 0, result.err
    assert result.out.startswith("Network: [B, 12] -> [B, 12, 4]  dtype=float32  input_dtype=int64\n")


def test_compute_dtype_brackets_and_another_batch_symbol(cli, examples):
    result = cli("resolve", "-", "--input-shape", "[N, 128]", "--output-shape", "(N,10)", "--dtype", "bfloat16",
                 "--input-dtype", "int64", input=examples.mlp)
    assert result.rc == 2  # an integer input cannot feed linear: the option reached the resolver
    assert result.err.startswith("E_DTYPE")
    result = cli("resolve", "-", "--input-shape", "[N, 128]", "--output-shape", "(N,10)", "--dtype", "bfloat16",
                 input=examples.mlp)
    assert result.rc == 0, result.err
    assert result.out.startswith("Network: [N, 128] -> [N, 10]  dtype=bfloat16\n")


def test_save_writes_a_plan_that_restores(cli, specs, tmp_path):
    target = tmp_path / "plan.json"
    result = cli("resolve", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,32,32",
                  "--save", target)
    assert result.rc == 0, result.err
    expected = hndl.resolve_file(specs.generator, input_shape=("B", 128), output_shape=("B", 3, 32, 32))
    restored = ResolvedPlan.from_json(target.read_text(encoding="utf-8"))
    assert restored == expected
    assert target.read_text(encoding="utf-8") == expected.to_json()
    assert json.loads(target.read_text(encoding="utf-8"))["nodes"]
    assert result.out == shape_table(expected) + f"\nsaved plan to {target} ({expected.semantic_digest})\n"


def test_save_to_an_unwritable_place(cli, specs, tmp_path):
    result = cli("resolve", specs.mlp, "--input-shape", "B,128", "--output-shape", "B,10",
                  "--save", tmp_path / "no" / "such" / "dir" / "plan.json")
    assert result.rc == 2
    assert result.err.startswith("hndl resolve: error: cannot write ")


@pytest.mark.parametrize("args, message", [
    (["--input-shape", "B,,3", "--output-shape", "B,10"], "--input-shape 'B,,3': write comma-separated entries"),
    (["--input-shape", "B,128", "--input-shape", "B,3", "--output-shape", "B,10"],
     "--input-shape is given 2 times without names"),
    (["--input-shape", "x=B,128", "--input-shape", "B,3", "--output-shape", "B,10"],
     "give either one unnamed shape or NAME=SHAPE for every port"),
    (["--input-shape", "x=B,128", "--input-shape", "x=B,3", "--output-shape", "B,10"], "names the port 'x' twice"),
    (["--input-shape", "B,128", "--output-shape", "B,10", "--input-dtype", "int64", "--input-dtype", "bool"],
     "--input-dtype is given more than once without names"),
    (["--input-shape", "B,128", "--output-shape", "B,10", "--packs", ","], "--packs names no pack"),
])
def test_malformed_option_text(cli, examples, args, message):
    result = cli("resolve", "-", *args, input=examples.mlp)
    assert result.rc == 2
    assert result.err.startswith("hndl resolve: error: ")
    assert message in result.err


@pytest.mark.parametrize("args, code, message", [
    (["--input-shape", "B,2*B", "--output-shape", "B,10"], "E_SCHEMA", "axis 1 must be a positive integer, got '2*B'"),
    (["--input-shape", "2*B,128", "--output-shape", "B,10"], "E_SCHEMA", "never a multiple"),
    (["--input-shape", "B,128", "--output-shape", "N,10"], "E_CONSTRAINT", "one batch symbol"),
    (["--input-shape", "Bad=B,128", "--output-shape", "B,10"], "E_NAME", "must match [a-z][a-z0-9_]*"),
])
def test_contracts_the_parser_rejects(cli, examples, args, code, message):
    result = cli("resolve", "-", *args, input=examples.mlp)
    assert result.rc == 2
    assert result.err.startswith(code)
    assert message in result.err
    assert "remedy:" in result.err


def test_missing_contracts_and_a_bad_dtype_are_usage_errors(cli, specs):
    result = cli("resolve", specs.mlp)
    assert result.rc == 2
    assert "the following arguments are required: --input-shape, --output-shape" in result.err
    result = cli("resolve", specs.mlp, "--input-shape", "B,128", "--output-shape", "B,10", "--dtype", "float64")
    assert result.rc == 2
    assert "invalid choice: 'float64'" in result.err
