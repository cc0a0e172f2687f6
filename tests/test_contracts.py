"""External tensor contracts (§3): tuple or mapping, ranks, one batch symbol, dtypes, names."""

from __future__ import annotations

import pytest

from hndl import HNDLError, resolve
from hndl.contracts import parse_contracts


def fails(code, *args, **kwargs):
    with pytest.raises(HNDLError) as caught:
        parse_contracts(*args, **kwargs)
    assert caught.value.code == code, str(caught.value)
    return caught.value


# -- tuple and mapping forms ------------------------------------------------------------------
def test_a_tuple_declares_the_single_input_x_and_the_single_output_output():
    contracts = parse_contracts(("B", 128), ("B", 10))
    assert contracts.input_names == ("x",)
    assert contracts.output_names == ("output",)
    assert contracts.inputs[0].shape == ("B", 128)
    assert contracts.outputs[0].shape == ("B", 10)
    assert contracts.batch == "B"
    assert not contracts.named_outputs


def test_a_mapping_declares_named_ports_in_order():
    contracts = parse_contracts({"z": ("B", 128), "y": ("B", 10)}, {"logits": ("B", 1), "features": ("B", 256)})
    assert contracts.input_names == ("z", "y")
    assert contracts.output_names == ("logits", "features")
    assert contracts.named_outputs


def test_a_mapping_naming_exactly_x_and_output_equals_the_tuple_form():
    assert parse_contracts({"x": ("B", 128)}, {"output": ("B", 10)}) == parse_contracts(("B", 128), ("B", 10))


def test_a_mapping_naming_exactly_x_and_output_gives_the_same_plan_as_tuples():
    source = "linear(64)\nrelu()\nlinear()"
    by_tuple = resolve(source, input_shape=("B", 128), output_shape=("B", 10))
    by_mapping = resolve(source, input_shape={"x": ("B", 128)}, output_shape={"output": ("B", 10)})
    assert by_tuple == by_mapping


def test_a_contract_that_is_neither_tuple_nor_mapping_is_a_schema_error():
    fails("E_SCHEMA", "B, 128", ("B", 10))
    fails("E_SCHEMA", ("B", 128), 10)
    fails("E_SCHEMA", {}, ("B", 10))


# -- ranks and extents ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [("B", 4), ("B", 4, 5), ("B", 4, 5, 6)])
def test_ranks_two_three_and_four_are_supported(shape):
    assert parse_contracts(shape, shape).inputs[0].shape == shape


@pytest.mark.parametrize("shape", [("B",), ("B", 2, 3, 4, 5), ()])
def test_other_ranks_fail_rather_than_guess(shape):
    fails("E_SCHEMA", shape, ("B", 4))
    fails("E_SCHEMA", ("B", 4), shape)


@pytest.mark.parametrize("extent", [0, -3, True, False, 2.0, "4", None])
def test_non_batch_extents_must_be_positive_integers(extent):
    fails("E_SCHEMA", ("B", extent), ("B", 4))
    fails("E_SCHEMA", ("B", 4), ("B", 4, extent))


def test_an_extent_above_max_dimension_is_a_resource_failure():
    fails("E_RESOURCE", ("B", 65), ("B", 4), max_dimension=64)


# -- the batch symbol -------------------------------------------------------------------------
def test_axis_zero_is_the_batch_symbol_every_contract_shares():
    contracts = parse_contracts({"a": ("N", 3), "b": ("N", 4)}, {"c": ("N", 5), "d": ("N", 6, 7)})
    assert contracts.batch == "N"


def test_a_batch_symbol_disagreement_is_a_constraint_failure():
    fails("E_CONSTRAINT", ("B", 4), ("N", 4))
    fails("E_CONSTRAINT", {"a": ("B", 3), "b": ("C", 3)}, ("B", 4))
    fails("E_CONSTRAINT", ("B", 4), {"c": ("B", 5), "d": ("M", 6)})


@pytest.mark.parametrize("batch", ["2*B", "3*B", "1*B", "B*2", 4, None])
def test_an_external_batch_multiple_or_non_symbol_is_a_schema_error(batch):
    fails("E_SCHEMA", (batch, 4), ("B", 4))
    fails("E_SCHEMA", ("B", 4), (batch, 4))


# -- port names ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["Image", "1st", "_z", "z-1", "", "ü"])
def test_port_names_must_match_the_lowercase_identifier_pattern(name):
    fails("E_NAME", {name: ("B", 4)}, ("B", 4))
    fails("E_NAME", ("B", 4), {name: ("B", 4)})


def test_port_names_may_not_collide_with_an_operator_alias():
    error = fails("E_NAME", {"linear": ("B", 4)}, ("B", 4), aliases=("linear", "relu"))
    assert "linear" in error.message
    fails("E_NAME", ("B", 4), {"relu": ("B", 4)}, aliases=("linear", "relu"))


def test_an_alias_collision_fails_through_the_public_entry_point():
    with pytest.raises(HNDLError) as caught:
        resolve("", input_shape={"relu": ("B", 4)}, output_shape={"relu_out": ("B", 4)})
    assert caught.value.code == "E_NAME"


def test_at_most_32_ports_per_side():
    parse_contracts({f"p{i}": ("B", 1) for i in range(32)}, ("B", 1))
    fails("E_SCHEMA", {f"p{i}": ("B", 1) for i in range(33)}, ("B", 1))


# -- dtypes -----------------------------------------------------------------------------------------
def test_input_dtype_defaults_to_the_compute_dtype():
    contracts = parse_contracts({"a": ("B", 4), "b": ("B", 4)}, ("B", 4), dtype="bfloat16")
    assert contracts.dtype == "bfloat16"
    assert [port.dtype for port in contracts.inputs] == ["bfloat16", "bfloat16"]


@pytest.mark.parametrize("dtype", ["float64", "int64", "float", None])
def test_the_compute_dtype_is_float32_float16_or_bfloat16(dtype):
    fails("E_SCHEMA", ("B", 4), ("B", 4), dtype=dtype)


@pytest.mark.parametrize("integer", ["int64", "int32", "bool"])
def test_integer_inputs_are_allowed_for_ids_and_masks(integer):
    contracts = parse_contracts(("B", 4), ("B", 4), dtype="float16", input_dtype=integer)
    assert contracts.inputs[0].dtype == integer


def test_a_floating_input_dtype_must_equal_the_compute_dtype():
    assert parse_contracts(("B", 4), ("B", 4), dtype="float16", input_dtype="float16").inputs[0].dtype == "float16"
    fails("E_SCHEMA", ("B", 4), ("B", 4), dtype="float32", input_dtype="float16")
    fails("E_SCHEMA", ("B", 4), ("B", 4), dtype="float32", input_dtype="bfloat16")
    fails("E_SCHEMA", ("B", 4), ("B", 4), input_dtype="float64")


def test_one_input_dtype_applies_to_every_input():
    contracts = parse_contracts({"a": ("B", 4), "b": ("B", 4)}, ("B", 4), input_dtype="int32")
    assert [port.dtype for port in contracts.inputs] == ["int32", "int32"]


def test_an_input_dtype_mapping_names_some_inputs_and_the_rest_default():
    contracts = parse_contracts(
        {"tokens": ("B", 16), "mask": ("B", 16), "image": ("B", 3, 8, 8)},
        ("B", 4),
        dtype="float16",
        input_dtype={"tokens": "int64", "mask": "bool"},
    )
    assert {port.name: port.dtype for port in contracts.inputs} == {
        "tokens": "int64", "mask": "bool", "image": "float16",
    }


def test_an_input_dtype_mapping_follows_the_floating_rule_per_input():
    fails("E_SCHEMA", {"a": ("B", 4), "b": ("B", 4)}, ("B", 4), input_dtype={"b": "float16"})


def test_an_input_dtype_mapping_naming_an_undeclared_input_fails():
    fails("E_SCHEMA", {"a": ("B", 4)}, ("B", 4), input_dtype={"b": "int64"})


def test_input_dtype_of_another_type_fails():
    fails("E_SCHEMA", ("B", 4), ("B", 4), input_dtype=7)


@pytest.mark.parametrize("entry, multiple", [("B", 1), ("2*B", 2), ("3*B", 3), ("1024*B", 1024)])
def test_an_internal_batch_entry_is_b_or_a_whole_multiple(entry, multiple):
    from hndl.contracts import batch_multiple

    assert batch_multiple(entry, "B") == multiple


@pytest.mark.parametrize("entry", ["1*B", "0*B", "B*2", "02*B", "2*C", "2 * B", "", 2, None, "-2*B"])
def test_a_malformed_batch_entry_is_a_schema_error(entry):
    from hndl.contracts import batch_multiple

    with pytest.raises(HNDLError) as error:
        batch_multiple(entry, "B")
    assert error.value.code == "E_SCHEMA"


def test_a_batch_multiple_beyond_1024_is_a_resource_error():
    from hndl.contracts import batch_multiple

    with pytest.raises(HNDLError) as error:
        batch_multiple("1025*B", "B")
    assert error.value.code == "E_RESOURCE"
