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


# -- issue 29, item 9: bounds that keep a resolved plan buildable ----------------------------------


@pytest.mark.parametrize("value", [3.5e38, -1e300, 1e308, 2**200])
def test_a_float_beyond_the_largest_float32_is_an_argument_error(value):
    """torch converts a float argument to the compute dtype's scalar type and refused these on
    the first call (``value cannot be converted to type float without overflow``)."""
    arg = hndl.arg.Arg(float, 0.5, help="Slope.")
    with pytest.raises(HNDLError) as error:
        arg.normalize(value, name="slope", node="n0")
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == "slope"
    assert "float32" in error.value.message
    assert arg.normalize(hndl.arg.FLOAT32_MAX, name="slope") == hndl.arg.FLOAT32_MAX
    assert arg.normalize(-hndl.arg.FLOAT32_MAX, name="slope") == -hndl.arg.FLOAT32_MAX


@pytest.mark.parametrize("arg, value", [
    (hndl.arg.Arg(int, 1, help="Count."), 10**5000),
    (hndl.arg.Arg(float, 1.0, help="Scale."), -(10**5000)),
    (hndl.arg.Arg("pair", 1, help="Kernel."), (1, 10**5000)),
    (hndl.arg.Arg(int, 1, help="Count."), [10**5000]),
], ids=["int", "float", "pair", "wrong type"])
def test_a_digit_flood_is_described_not_formatted(arg, value):
    """Python cannot format an int of 5,000 digits: the message used to raise ValueError."""
    with pytest.raises(HNDLError) as error:
        arg.normalize(value, name="n")
    message = error.value.message
    assert error.value.code == "E_ARGUMENT" and ("digits" in message or "too long" in message), message
    assert len(str(error.value)) < 1000


def test_tensor_value_is_declared_on_floats_only_and_kept_through_pickling():
    arg = hndl.arg.Arg(float, 1e-6, tensor_value=True, help="Starting value.")
    assert arg.tensor_value and "tensor_value=True" in repr(arg)
    assert arg != hndl.arg.Arg(float, 1e-6, help="Starting value.")
    assert pickle.loads(pickle.dumps(arg)) == arg
    for bad in (dict(type=int, tensor_value=True), dict(type=float, tensor_value=1)):
        with pytest.raises(HNDLError) as error:
            hndl.arg.Arg(bad.pop("type"), help="Value.", **bad)
        assert error.value.code == "E_REGISTRY" and error.value.location.field == "tensor_value"


def test_max_extent_is_the_default_max_dimension():
    from hndl.limits import DEFAULT_LIMITS

    assert hndl.arg.MAX_EXTENT == DEFAULT_LIMITS["max_dimension"] == 2**31 - 1
