"""Every operator of the pack, held to its declaration by HNDL's public harness (hndl.testing).

The registry is the one a host gets with `Registry.from_packs("{{ cookiecutter.pack_name }}")`, so
this also proves the entry point and the `hndl_register` hook.
"""

import pytest

from hndl import Registry
from hndl.declaration import spec_of
from hndl.packs import declared_aliases
from hndl.testing import check_operator, example_cases
from {{ cookiecutter.__module_name }} import OPERATORS

REGISTRY = Registry.from_packs("{{ cookiecutter.pack_name }}")


def test_the_pack_registers_its_operators():
    assert OPERATORS
    assert set(REGISTRY.aliases()) == {spec_of(cls).alias for cls in OPERATORS}


def test_the_distribution_declares_every_alias_it_registers():
    """pyproject.toml's [project.entry-points."hndl.operators"], as installed: add a line per operator."""
    assert declared_aliases()["{{ cookiecutter.pack_name }}"] == set(REGISTRY.aliases())


@pytest.mark.parametrize("case", example_cases(OPERATORS, registry=REGISTRY), ids=str)
def test_example(case):
    case.check()


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda cls: cls.__name__)
def test_operator_on_cpu(cls):
    check_operator(cls, registry=REGISTRY, on=["cpu"])
