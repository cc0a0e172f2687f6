"""`hndl explain SPEC ...`: plan.describe(), where every value came from."""

from __future__ import annotations

import hndl
from hndl import Registry


def test_explain_prints_describe(cli, specs):
    result = cli("explain", specs.mlp, "--input-shape", "B,128", "--output-shape", "B,10")
    assert result.rc == 0, result.err
    assert result.err == ""
    plan = hndl.resolve_file(specs.mlp, input_shape=("B", 128), output_shape=("B", 10))
    assert result.out == plan.describe() + "\n"
    assert f"semantic digest: {plan.semantic_digest}" in result.out
    assert "  out_features = 10  inferred  <- output contract 'output' axis 1 is 10" in result.out
    assert "  out_features = 64  explicit" in result.out


def test_explain_named_ports_with_policies(cli, specs, examples):
    result = cli("explain", specs.discriminator, *examples.discriminator_contracts, "--packs", "vision,basic")
    assert result.rc == 0, result.err
    plan = hndl.resolve_file(
        specs.discriminator,
        input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
        output_shape={"logits": ("B", 1), "features": ("B", 12544)},
        registry=Registry.from_packs("vision", "basic"),
    )
    assert result.out == plan.describe() + "\n"
    assert f"  policy: {plan.node('stage1').source['policy']}" in result.out


def test_explain_reports_the_error_with_exit_2(cli, specs):
    result = cli("explain", specs.generator, "--input-shape", "B,128", "--output-shape", "B,3,30,30")
    assert result.rc == 2
    assert result.out == ""
    assert result.err.startswith(f"E_CONSTRAINT (node n9; {specs.generator}, line 10, column 1): ")
    assert "\n  remedy: " in result.err and "Traceback" not in result.err


def test_explain_missing_file(cli, tmp_path):
    result = cli("explain", tmp_path / "gone.hndl", "--input-shape", "B,128", "--output-shape", "B,10")
    assert result.rc == 2
    assert result.err.startswith("E_SCHEMA") and "no such file" in result.err
