"""Remedies that name the fix (issue 18): integer ids fed floats, and the missing flatten.

The core names no operator: the flatten suggestion comes from the registry in use, found by
its declared ports, so a registry without a flattening operator gets no suggestion.
"""

import pytest
from torch import nn

import hndl
from hndl import Arg, HNDLError, Registry, operator
from hndl.resolve.sweep import flattening_alias

REGISTRY = Registry.from_packs("basic", "vision")


def _error(source, input_shape, output_shape, registry=REGISTRY, **contracts):
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry, **contracts)
    return caught.value


def test_integer_ids_fed_floats_name_the_input_dtype_to_declare():
    error = _error("embedding(100, 8)", ("B", 16), ("B", 16, 8))
    assert error.code == "E_DTYPE"
    assert error.remedies[0] == ('Declare the dtype of input \'x\': pass input_dtype="int64" '
                                 "(an input without one is float32, the compute dtype).")
    plan = hndl.resolve("embedding(100, 8)", input_shape=("B", 16), output_shape=("B", 16, 8),
                        input_dtype="int64", registry=REGISTRY)
    assert plan.input_dtype == "int64"


def test_a_declared_integer_port_fed_floats_names_the_input_dtype_too():
    registry = Registry.from_packs("basic")

    @registry.operator("count_table", summary="Look up one learned row per integer id.",
                       shape="ids[B, T]:int64 -> out[B, T, D]", args={"width": Arg(int, min=1, dim="D", help="Width of each row.")})
    class CountTable(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.width = width

    error = _error("count_table(4)", ("B", 3), ("B", 3, 4), registry=registry)
    assert error.code == "E_DTYPE"
    assert error.remedies[0].startswith('Declare the dtype of input \'x\': pass input_dtype="int64"')


def test_floats_after_a_float_producer_get_no_input_dtype_advice():
    error = _error("linear(8)\nembedding(100, 8)", ("B", 16), ("B", 8, 8))
    assert error.code == "E_DTYPE"
    assert not any("input_dtype" in remedy for remedy in error.remedies)


def test_conv_features_into_linear_say_insert_flatten_before_the_linear():
    error = _error("conv(8, kernel_size=3)\nlinear()", ("B", 3, 32, 32), ("B", 10))
    assert error.code == "E_CONSTRAINT"
    assert error.remedies == ("n0.out has rank 4 but n1.out must have rank 2: insert flatten() before n1 (linear).",)
    fixed = hndl.resolve("conv(8, kernel_size=3)\nflatten()\nlinear()", input_shape=("B", 3, 32, 32),
                         output_shape=("B", 10), registry=REGISTRY)
    assert fixed.nodes[-1].args["in_features"] == 8 * 30 * 30


def test_conv_features_into_a_rank_two_contract_say_insert_flatten_after_the_conv():
    error = _error("conv(8, kernel_size=3)", ("B", 3, 32, 32), ("B", 10))
    assert error.remedies == ("n0 (conv) makes n0.out rank 4 but it must have rank 2: insert flatten() after n0 (conv).",)


def test_a_registry_without_a_flattening_operator_gets_the_generic_remedy():
    registry = Registry()
    for alias in ("conv", "linear"):
        registry.add(REGISTRY.get(alias).cls)
    assert flattening_alias(registry) is None
    error = _error("conv(8, kernel_size=3)\nlinear()", ("B", 3, 32, 32), ("B", 10), registry=registry)
    assert error.remedies == ("Change a literal or a contract so the declared relations agree.",)


def test_the_suggestion_names_whichever_alias_the_registry_gives_the_flattening_operator():
    registry = Registry()
    for alias in ("conv", "linear"):
        registry.add(REGISTRY.get(alias).cls)

    @registry.operator("collapse", summary="Collapse every axis after the batch into one.", shape="x[B, ...] -> out[B, F]",
                       relation=REGISTRY.get("flatten").relation)
    class Collapse(nn.Module):
        def forward(self, x):
            return x.flatten(1)

    assert flattening_alias(registry) == "collapse"
    assert flattening_alias(REGISTRY) == "flatten"
    error = _error("conv(8, kernel_size=3)\nlinear()", ("B", 3, 32, 32), ("B", 10), registry=registry)
    assert error.remedies[0].endswith("insert collapse() before n1 (linear).")
