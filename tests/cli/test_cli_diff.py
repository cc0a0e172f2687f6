"""`hndl diff A.json B.json`: like diff(1), 0 when identical, 1 when different, 2 on error."""

from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace

import pytest

import hndl
from hndl import ResolvedPlan


@pytest.fixture(scope="module")
def saved(run_cli, tmp_path_factory, examples) -> SimpleNamespace:
    """Generator plans saved by `hndl resolve --save`: 32x32 (twice, separately) and 64x64 outputs."""
    folder = tmp_path_factory.mktemp("saved")
    spec = folder / "generator.hndl"
    spec.write_text(examples.generator, encoding="utf-8")
    paths = SimpleNamespace(small=folder / "small.json", large=folder / "large.json", again=folder / "again.json")
    for path, output in ((paths.small, "B,3,32,32"), (paths.large, "B,3,64,64"), (paths.again, "B,3,32,32")):
        result = run_cli("resolve", spec, "--input-shape", "B,128", "--output-shape", output, "--save", path,
                         cwd=folder)
        assert result.rc == 0, result.err
    return paths


def test_identical_plans_exit_0(cli, saved):
    result = cli("diff", saved.small, saved.again)
    assert result.rc == 0, result.err
    plan = ResolvedPlan.from_json(saved.small.read_text(encoding="utf-8"))
    assert result.out == (f"identical\n{saved.small}: {plan.semantic_digest}\n"
                          f"{saved.again}: {plan.semantic_digest}\n")
    assert result.err == ""


def test_different_plans_exit_1_with_both_origins(cli, saved):
    result = cli("diff", saved.small, saved.large)
    assert result.rc == 1, result.err
    assert result.err == ""
    small = ResolvedPlan.from_json(saved.small.read_text(encoding="utf-8"))
    large = ResolvedPlan.from_json(saved.large.read_text(encoding="utf-8"))
    changes = small.diff(large)
    lines = result.out.splitlines()
    assert lines[0] == f"--- {saved.small}  {small.semantic_digest}"
    assert lines[1] == f"+++ {saved.large}  {large.semantic_digest}"
    assert lines[2:-1] == [str(change) for change in changes]
    assert lines[-1] == f"{len(changes)} differences"
    assert "n0.args.out_features: 8192 (inferred) -> 32768 (inferred)" in lines


def test_an_explicit_literal_against_an_inferred_one(cli, tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    for path, source in ((first, "linear(64)\nrelu()\nlinear()\n"), (second, "linear(32)\nrelu()\nlinear(10)\n")):
        result = cli("resolve", "-", "--input-shape", "B,128", "--output-shape", "B,10", "--packs", "basic",
                     "--save", path, input=source)
        assert result.rc == 0, result.err
    result = cli("diff", first, second, "--packs", "basic")
    assert result.rc == 1, result.err
    assert "n0.args.out_features: 64 (explicit) -> 32 (explicit)" in result.out
    assert "n2.args.out_features: 10 (inferred) -> 10 (explicit)" in result.out


def test_a_missing_plan_file(cli, saved, tmp_path):
    result = cli("diff", saved.small, tmp_path / "nowhere.json")
    assert result.rc == 2
    assert result.out == ""
    assert result.err.startswith("E_SCHEMA: cannot read the saved plan ")
    assert "no such file" in result.err and "remedy:" in result.err


def test_a_tampered_plan_is_refused(cli, saved, tmp_path):
    record = json.loads(saved.small.read_text(encoding="utf-8"))
    record["nodes"][0]["args"]["out_features"] = 4096
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(record), encoding="utf-8")
    result = cli("diff", saved.small, tampered)
    assert result.rc == 2
    with pytest.raises(hndl.HNDLError) as caught:
        ResolvedPlan.from_json(tampered.read_text(encoding="utf-8"))
    assert result.err == str(caught.value) + "\n"
    assert "Traceback" not in result.err


def test_not_json(cli, saved, tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("linear(64)\n")
    result = cli("diff", junk, saved.small)
    assert result.rc == 2
    assert result.err.startswith("E_")
    assert "remedy:" in result.err


def test_packs_the_plan_needs_are_missing(cli, saved):
    result = cli("diff", saved.small, saved.large, "--packs", "basic")
    assert result.rc == 2
    assert result.err.startswith("E_")
    assert "conv" in result.err and "Traceback" not in result.err


def test_an_unknown_pack(cli, saved):
    result = cli("diff", saved.small, saved.large, "--packs", "nosuch")
    assert result.rc == 2
    assert result.err.startswith("E_REGISTRY (field packs): no operator pack named 'nosuch'")


def test_diff_needs_two_plans(cli, saved):
    result = cli("diff", saved.small)
    assert result.rc == 2
    assert "the following arguments are required: B.json" in result.err


def test_a_fifo_is_refused_without_waiting_for_a_writer(cli, saved, tmp_path):
    """A FIFO never blocks the command: it is not a regular file, so E_SCHEMA before any read."""
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)

    def release() -> None:  # if the command blocked in open(), a writer lets it go so the test can fail
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting: nothing to release

    watchdog = threading.Timer(120, release)  # the refusal takes milliseconds; the command's startup seconds
    watchdog.start()
    try:
        result = cli("diff", saved.small, fifo)
    finally:
        watchdog.cancel()
    assert result.rc == 2
    assert result.out == ""
    assert result.err.startswith(f"E_SCHEMA: cannot read the saved plan {str(fifo)!r}: it is not a regular file")
    assert "remedy:" in result.err and "Traceback" not in result.err
