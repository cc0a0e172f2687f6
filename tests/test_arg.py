"""Tests for hndl.arg: Arg lives in its own module and every old import path still names it.

Arg's normalization and declaration rules are exercised in tests/test_declaration.py through
``hndl.declaration``; these tests pin the module split itself.
"""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest
from torch import nn

import hndl
import hndl.arg
import hndl.declaration
from hndl.errors import HNDLError

HNDL = Path(hndl.__file__).parent


def test_arg_is_one_class_under_every_public_path():
    from hndl import Arg as from_package
    from hndl.declaration import Arg as from_declaration

    assert hndl.arg.Arg is from_declaration is from_package
    assert hndl.Arg.__module__ == "hndl.arg"


@pytest.mark.parametrize("name", ["MISSING", "ARG_TYPES", "MAX_INT", "MAX_SEQUENCE_ITEMS", "MAX_STRING_BYTES"])
def test_names_that_moved_stay_importable_from_declaration(name):
    assert getattr(hndl.declaration, name) is getattr(hndl.arg, name)


def test_an_arg_and_missing_pickle_from_the_new_module():
    arg = hndl.arg.Arg(int, 3, min=1, help="Width.")
    assert pickle.loads(pickle.dumps(arg)) == arg
    assert pickle.loads(pickle.dumps(hndl.arg.MISSING)) is hndl.arg.MISSING


def test_a_bad_arg_is_still_a_registry_error():
    with pytest.raises(HNDLError) as error:
        hndl.arg.Arg(int, help="")
    assert error.value.code == "E_REGISTRY"


def test_a_variadic_count_keeps_its_tensor_wording():
    class Join(nn.Module):
        def __init__(self, **kwargs):
            super().__init__()

    declared = hndl.declaration.operator(
        "join", summary="A test operator.", shape="x* -> out", relation=lambda s: None,
        args={"input_count": hndl.arg.Arg(int, inferable=True, min=2, max=3, help="Inputs.")},
    )(Join)
    count = hndl.declaration.spec_of(declared).args["input_count"]
    assert isinstance(count, hndl.arg.TensorCount)
    assert count == hndl.arg.Arg(int, inferable=True, min=2, max=3, help="Inputs.")
    with pytest.raises(HNDLError) as error:
        count.normalize(4, name="input_count")
    assert error.value.code == "E_ARGUMENT" and "input tensors in one call" in error.value.message


def test_arg_does_not_import_the_operator_declaration():
    """Imports run one way: hndl.declaration builds on hndl.arg, never the reverse."""
    tree = ast.parse((HNDL / "arg.py").read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add((node.level, node.module))
        elif isinstance(node, ast.Import):
            imported.update((0, alias.name) for alias in node.names)
    assert (1, "declaration") not in imported and (0, "hndl.declaration") not in imported
