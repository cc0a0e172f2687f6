"""Every operator of the vision pack, held to its declaration by the public harness (hndl.testing)."""

import pytest

from hndl import Registry
from hndl.testing import example_cases
from hndl_ops_vision import OPERATORS

REGISTRY = Registry.from_packs("basic", "vision", "transformer")


def test_the_pack_declares_operators():
    assert OPERATORS


@pytest.mark.parametrize("case", example_cases(OPERATORS, registry=REGISTRY), ids=str)
def test_example(case):
    case.check()
