"""Tests for hndl.errors: the closed code catalog (§13) and the shape of every HNDL failure."""

from __future__ import annotations

import copy
import pickle

import pytest

import hndl
from hndl.errors import CODES, HNDLError, Location

#: §13 "Diagnostics", in the order the specification lists the codes.
SPEC_CODES = [
    "E_CONSTRAINT",
    "E_RESHAPE",
    "E_AMBIGUOUS",
    "E_UNRESOLVED",
    "E_DTYPE",
    "E_POLICY_CONFLICT",
    "E_ARGUMENT",
    "E_PRETRAINED",
    "E_INITIALIZATION",
    "E_TRAINABILITY",
    "E_BINDING",
    "E_NAME",
    "E_OUTPUT_ARITY",
    "E_OUTPUT",
    "E_CURRENT",
    "E_SYNTAX",
    "E_CAPTURE",
    "E_REGISTRY",
    "E_OPERATOR",
    "E_SCHEMA",
    "E_INTEGRITY",
    "E_RESOURCE",
    "E_STATE_VERSION",
    "E_RUNTIME",
]


# -- the closed catalog ------------------------------------------------------------------------
def test_catalog_is_exactly_the_24_codes_of_section_13_in_order():
    assert len(SPEC_CODES) == 24
    assert list(CODES) == SPEC_CODES


@pytest.mark.parametrize("code", SPEC_CODES)
def test_every_catalog_code_has_a_default_remedy(code):
    assert isinstance(CODES[code], str) and CODES[code].strip()


@pytest.mark.parametrize("code", SPEC_CODES)
def test_every_catalog_code_can_be_raised(code):
    with pytest.raises(HNDLError) as caught:
        raise HNDLError(code, "something failed")
    assert caught.value.code == code


@pytest.mark.parametrize("code", ["E_NOPE", "e_schema", "SCHEMA", "", "E_SCHEMA ", None])
def test_a_code_outside_the_catalog_is_an_hndl_bug(code):
    with pytest.raises(AssertionError, match="catalog"):
        HNDLError(code, "message")


def test_hndl_error_is_the_public_exception_type():
    assert hndl.HNDLError is HNDLError
    assert issubclass(HNDLError, Exception)


# -- fields --------------------------------------------------------------------------------------
def test_code_message_location_chain_and_remedies():
    error = HNDLError(
        "E_CONSTRAINT",
        "Target 30 conflicts with three exact doubling stages: seed would be 3.75",
        line=3,
        column=5,
        node="n9",
        field="out_features",
        chain=("n3 doubles H", "n5 doubles H", "n7 doubles H"),
        remedies=("Ask for an output height divisible by 8.",),
    )
    assert error.code == "E_CONSTRAINT"
    assert error.message == "Target 30 conflicts with three exact doubling stages: seed would be 3.75"
    assert isinstance(error.location, Location)
    assert (error.location.line, error.location.column) == (3, 5)
    assert (error.location.node, error.location.field) == ("n9", "out_features")
    assert error.chain == ("n3 doubles H", "n5 doubles H", "n7 doubles H")
    assert error.remedies == ("Ask for an output height divisible by 8.",)


def test_location_fields_default_to_unknown():
    error = HNDLError("E_SCHEMA", "bad contract")
    assert error.location == Location()
    assert (error.location.line, error.location.column, error.location.node, error.location.field) == (
        None, None, None, None,
    )
    assert error.chain == ()


def test_chain_and_remedies_are_stored_as_tuples():
    error = HNDLError("E_ARGUMENT", "m", chain=["a", "b"], remedies=["fix it"])
    assert error.chain == ("a", "b")
    assert error.remedies == ("fix it",)


@pytest.mark.parametrize("code", SPEC_CODES)
def test_remedies_are_never_empty_the_catalog_default_fills_in(code):
    assert HNDLError(code, "m").remedies == (CODES[code],)
    assert HNDLError(code, "m", remedies=()).remedies == (CODES[code],)


def test_explicit_remedies_replace_the_default():
    error = HNDLError("E_RESOURCE", "too big", remedies=("Raise max_nodes.", "Split the graph."))
    assert error.remedies == ("Raise max_nodes.", "Split the graph.")
    assert CODES["E_RESOURCE"] not in error.remedies


def test_the_location_is_immutable():
    error = HNDLError("E_NAME", "undefined local", line=2)
    with pytest.raises(AttributeError):
        error.location.line = 3


# -- rendering -----------------------------------------------------------------------------------
def test_str_names_code_message_location_chain_and_remedies():
    error = HNDLError(
        "E_RESHAPE",
        "Literal projection width 128 cannot supply required 512 * 4 * 4 = 8192 elements",
        line=4,
        column=1,
        node="n2",
        field="shape",
        chain=("n0.out_features = 128 (explicit)", "reshape(512, 4, 4) needs 8192"),
        remedies=("Omit the projection width so it is inferred.",),
    )
    text = str(error)
    assert text.startswith("E_RESHAPE")
    assert "Literal projection width 128 cannot supply required 512 * 4 * 4 = 8192 elements" in text
    assert "node n2" in text
    assert "field shape" in text
    assert "line 4" in text and "column 1" in text
    assert "n0.out_features = 128 (explicit)" in text
    assert "reshape(512, 4, 4) needs 8192" in text
    assert "Omit the projection width so it is inferred." in text


def test_str_shows_the_default_remedy():
    assert CODES["E_DTYPE"] in str(HNDLError("E_DTYPE", "int64 tokens reach a float32 port"))


def test_str_of_an_unlocated_error_is_code_and_message_first():
    text = str(HNDLError("E_SCHEMA", "limits must be a mapping"))
    assert text.splitlines()[0] == "E_SCHEMA: limits must be a mapping"


def test_location_renders_each_known_part():
    assert str(Location()) == ""
    assert str(Location(node="n0")) == "node n0"
    assert str(Location(line=7, column=3)) == "line 7, column 3"
    assert "field bias" in str(Location(node="n1", field="bias"))


# -- located() -----------------------------------------------------------------------------------
def test_located_fills_unknown_fields_only():
    error = HNDLError("E_ARGUMENT", "out_features must be positive", node="n1", chain=("c",), remedies=("r",))
    moved = error.located(node="n9", field="out_features", line=2, column=8)
    assert moved.location.node == "n1"  # already known: kept
    assert moved.location.field == "out_features"
    assert (moved.location.line, moved.location.column) == (2, 8)
    assert (moved.code, moved.message, moved.chain, moved.remedies) == (
        "E_ARGUMENT", "out_features must be positive", ("c",), ("r",),
    )
    assert "line 2" in str(moved) and "node n1" in str(moved)


def test_located_returns_a_new_error_and_leaves_the_original_alone():
    error = HNDLError("E_NAME", "undefined local 'h'")
    moved = error.located(line=3)
    assert isinstance(moved, HNDLError)
    assert moved is not error
    assert error.location.line is None
    assert moved.location.line == 3


def test_located_never_overwrites_a_known_position():
    error = HNDLError("E_SYNTAX", "lambda is not allowed", line=5, column=9)
    moved = error.located(line=1, column=1)
    assert (moved.location.line, moved.location.column) == (5, 9)


def test_located_keeps_the_default_remedy():
    moved = HNDLError("E_CURRENT", "current is unset").located(node="n4")
    assert moved.remedies == (CODES["E_CURRENT"],)


# -- errors are ordinary exception values ---------------------------------------------------------
def test_an_error_survives_pickling():
    # Errors cross process boundaries (the isolated parser worker of §7, multiprocessing hosts).
    error = HNDLError("E_RESOURCE", "too many nodes", line=2, node="n0", chain=("a",), remedies=("r",))
    restored = pickle.loads(pickle.dumps(error))
    assert isinstance(restored, HNDLError)
    assert (restored.code, restored.message, restored.location, restored.chain, restored.remedies) == (
        error.code, error.message, error.location, error.chain, error.remedies,
    )
    assert str(restored) == str(error)


def test_an_error_can_be_copied():
    error = HNDLError("E_OPERATOR", "unknown operator 'silu'", line=1, column=1)
    duplicate = copy.copy(error)
    assert (duplicate.code, duplicate.message, duplicate.location) == (error.code, error.message, error.location)


def test_a_message_shows_a_digit_flood_or_a_long_string_briefly():
    from hndl.errors import SHOWN_CHARS, shown

    assert shown(10**5000) == "an integer of about 5001 digits"  # str() would raise ValueError
    assert shown(("B", 10**5000)) == "a tuple holding an integer too long to show"
    assert len(shown("9" * 5000)) < SHOWN_CHARS + 30 and "(5002 characters)" in shown("9" * 5000)
    assert shown("B") == "'B'" and shown(128) == "128"


def test_a_contract_with_a_digit_flood_is_e_resource_with_a_short_message():
    with pytest.raises(hndl.HNDLError) as error:
        hndl.resolve("linear()", input_shape=("B", 10**5000), output_shape=("B", 8))
    assert error.value.code == "E_RESOURCE" and "about 5001 digits" in error.value.message
    assert len(str(error.value)) < 500


# -- every message is bounded and inert (issue 29, items 11 and 12) ------------------------------

OSC52 = "\x1b]52;c;aGVsbG8=\x07"


def test_a_terminal_escape_anywhere_in_an_error_is_shown_escaped():
    error = HNDLError("E_SCHEMA", f"state key {OSC52!s} is unexpected", node=f"n{OSC52}", field=f"w\u202e{OSC52}",
                      file="a\x9bb", chain=[f"fact {OSC52}"], remedies=[f"remove {OSC52}"])
    text = str(error)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\x9b" not in text
    assert "\\x1b]52;c;aGVsbG8=\\x07" in error.message
    assert error.location.field == "w\\u202e\\x1b]52;c;aGVsbG8=\\x07" and error.location.file == "a\\x9bb"
    assert error.chain == ("fact \\x1b]52;c;aGVsbG8=\\x07",)
    assert error.remedies == ("remove \\x1b]52;c;aGVsbG8=\\x07",)


def test_a_message_keeps_its_own_line_breaks_but_an_echoed_name_does_not():
    error = HNDLError("E_SCHEMA", "first line\n\tsecond line", field="a\nb")
    assert error.message == "first line\n\tsecond line"
    assert error.location.field == "a\\x0ab"


def test_a_megabyte_message_fact_remedy_or_name_is_cut_and_counted():
    huge = "x" * (1 << 20)
    error = HNDLError("E_SCHEMA", huge, node=huge, chain=[huge] * 5, remedies=[huge])
    assert len(str(error)) < 40_000
    assert error.message.endswith(f"... ({(1 << 20) - 4000} more characters)")
    assert error.location.node.endswith(f"... ({1 << 20} characters)")
    assert all(len(fact) < 4100 for fact in error.chain)


def test_twenty_thousand_facts_end_in_a_count():
    error = HNDLError("E_SCHEMA", "m", chain=[f"fact {index}" for index in range(20_000)])
    assert len(error.chain) == 21 and error.chain[-1] == "... and 19980 more (fact lines not shown)"


def test_bounding_is_idempotent_so_copies_and_pickles_keep_the_same_text():
    error = HNDLError("E_SCHEMA", "y" * 10_000 + OSC52, field="f" * 1000, chain=["c"] * 50)
    for again in (error.located(line=3), pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert again.message == error.message and again.chain == error.chain
        assert again.location.field == error.location.field


def test_echo_and_listed_bound_what_an_echo_site_shows():
    from hndl.errors import echo, listed

    assert echo("short") == "short"
    assert echo(OSC52) == "\\x1b]52;c;aGVsbG8=\\x07"
    assert echo("k" * 1000) == "k" * 60 + "... (1000 characters)"
    assert echo(2 ** 5000).startswith("an integer of about")
    assert listed(["a", "b", "c"]) == "a, b, c"
    assert listed([f"key{index}" for index in range(20_000)]).endswith(", key19, ... and 19980 more")
    assert len(listed(["z" * 100_000] * 100)) < 2_000
