"""Compatibility fixtures pin python_config@1 independently of the host Python.

Every file under fixtures/accepted must parse; every file under fixtures/rejected must fail
with the code its first line names, even where a newer Python parser would accept it. The
fixtures run through the isolated worker exactly as resolve() does.
"""

from pathlib import Path

import pytest

from hndl import HNDLError, Registry
from hndl.frontends.config.source import load_file
from hndl.frontends.config.worker import parse_isolated

FIXTURES = Path(__file__).parent / "fixtures"
ALIASES = Registry.builtins().aliases()


def _header(path: Path, key: str) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0].strip()
    assert first.startswith(f"# {key}: "), f"{path.name} must start with '# {key}: ...'"
    return first.split(": ", 1)[1].strip()


@pytest.mark.parametrize("path", sorted((FIXTURES / "accepted").glob("*.hndl")), ids=lambda p: p.stem)
def test_accepted_fixture_parses(path):
    inputs = [name.strip() for name in _header(path, "inputs").split(",")]
    program = parse_isolated(load_file(path), aliases=ALIASES, inputs=inputs)
    assert program.statements


@pytest.mark.parametrize("path", sorted((FIXTURES / "rejected").glob("*.hndl")), ids=lambda p: p.stem)
def test_rejected_fixture_fails_with_its_code(path):
    expected = _header(path, "expect")
    with pytest.raises(HNDLError) as error:
        parse_isolated(load_file(path), aliases=ALIASES, inputs=["x"])
    assert error.value.code == expected, str(error.value)
    assert error.value.location.line is not None and error.value.location.line >= 2


def test_the_fixture_corpus_is_not_empty():
    assert len(list((FIXTURES / "accepted").glob("*.hndl"))) >= 5
    assert len(list((FIXTURES / "rejected").glob("*.hndl"))) >= 30
