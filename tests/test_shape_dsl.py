"""§8 "The shape DSL": the port/relation grammar of operator declarations.

A declaration's shape= string names the input ports before the arrow and the output ports
after it, each with an optional pattern and dtype. A malformed shape string fails
registration with E_REGISTRY, quoting the text and pointing at the offending column.
"""

from __future__ import annotations

import pytest

from hndl.errors import HNDLError
from hndl.shape_dsl import (
    DTYPES,
    MAX_LITERAL,
    MAX_NAME,
    MAX_PORTS,
    MAX_SYMBOLS,
    Dim,
    PortPattern,
    ShapeSignature,
    parse_shape,
)

B = Dim("batch")
ELLIPSIS = Dim("ellipsis")


def sym(name: str, scale: int = 1) -> Dim:
    return Dim("symbol", symbol=name, scale=scale)


def lit(value: int) -> Dim:
    return Dim("literal", value=value)


def symbol_ports(prefix: str, symbols: list[str]) -> str:
    """Rank-4 ports carrying three symbols each, so many symbols fit in few ports."""
    groups = [symbols[i:i + 3] for i in range(0, len(symbols), 3)]
    return ", ".join(
        f"{prefix}{i}[B, {', '.join(group)}]" for i, group in enumerate(groups)
    )


def rejected(text, column=None) -> HNDLError:
    """Parse text expecting E_REGISTRY; check the caret sits under the reported column."""
    with pytest.raises(HNDLError) as caught:
        parse_shape(text)
    error = caught.value
    assert error.code == "E_REGISTRY"
    assert error.location.field == "shape"
    assert error.remedies and all(error.remedies)
    if column is not None:
        assert error.location.column == column
        assert f"at column {column}" in error.message
        quoted, shown, caret = error.message.split("\n")
        assert quoted.startswith(f"shape '{text}': ")
        assert shown == f"  {text}"
        assert caret == "  " + " " * (column - 1) + "^"
    return error


# --------------------------------------------------------------------------- spec examples


def test_spec_example_ellipsis_with_feature_symbols():
    sig = parse_shape("x[B, ..., D_in] -> out[B, ..., D_out]")
    assert sig.inputs == (PortPattern("x", (B, ELLIPSIS, sym("D_in"))),)
    assert sig.outputs == (PortPattern("out", (B, ELLIPSIS, sym("D_out"))),)
    assert sig.symbols == ("D_in", "D_out")
    assert sig.text == "x[B, ..., D_in] -> out[B, ..., D_out]"
    assert str(sig) == "x[B, ..., D_in] -> out[B, ..., D_out]"


def test_spec_example_adaptive_norm_with_scaled_symbol():
    sig = parse_shape("x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]")
    x, params = sig.inputs
    assert x == PortPattern("x", (B, sym("C"), sym("H"), sym("W")))
    assert params == PortPattern("params", (B, sym("C", 2)))
    assert params.dims[1].scale == 2 and params.dims[1].symbol == "C"
    assert sig.outputs == (PortPattern("out", (B, sym("C"), sym("H"), sym("W"))),)
    assert sig.symbols == ("C", "H", "W")
    assert str(sig) == "x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]"


def test_spec_example_rank_preserving_custom_operator():
    sig = parse_shape("x[B, ...] -> out[B, ...]")
    assert sig.inputs == (PortPattern("x", (B, ELLIPSIS)),)
    assert sig.outputs == (PortPattern("out", (B, ELLIPSIS)),)
    assert sig.symbols == ()
    assert sig.inputs[0].has_ellipsis and sig.inputs[0].fixed_rank is None


# --------------------------------------------------------------------------- accepted forms


def test_ports_keep_binding_order_on_both_sides():
    sig = parse_shape("a[B, C], b[B, C], c[B, C] -> y[B, C], z[B, C]")
    assert [p.name for p in sig.inputs] == ["a", "b", "c"]
    assert [p.name for p in sig.outputs] == ["y", "z"]


def test_symbols_are_distinct_in_first_appearance_order_and_exclude_batch():
    sig = parse_shape("x[B, T, D], y[B, 3*D, K] -> out[B, T, K, Q]")
    assert sig.symbols == ("T", "D", "K", "Q")
    assert "B" not in sig.symbols


def test_symbols_may_use_lowercase_digits_and_underscores():
    sig = parse_shape("x[B, d_model2] -> out[B, d_model2]")
    assert sig.inputs[0].dims[1] == sym("d_model2")


def test_scaled_symbol_records_exact_integer_multiple():
    sig = parse_shape("x[B, C] -> out[B, 4*C]")
    assert sig.outputs[0].dims[1] == Dim("symbol", symbol="C", scale=4)
    assert str(sig.outputs[0].dims[1]) == "4*C"
    big = parse_shape(f"x[B, {MAX_LITERAL}*C] -> out")
    assert big.inputs[0].dims[1].scale == MAX_LITERAL


def test_positive_integer_literals():
    sig = parse_shape("x[B, 1, 28, 28] -> out[B, 10]")
    assert sig.inputs[0].dims == (B, lit(1), lit(28), lit(28))
    assert sig.outputs[0].dims == (B, lit(10))
    assert parse_shape(f"x[B, {MAX_LITERAL}] -> out").inputs[0].dims[1].value == MAX_LITERAL
    assert sig.symbols == ()


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_supported_fixed_ranks(rank):
    dims = ", ".join(["B"] + ["C"] * (rank - 1))
    port = parse_shape(f"x[{dims}] -> out").inputs[0]
    assert port.fixed_rank == rank
    assert not port.has_ellipsis


@pytest.mark.parametrize(
    "pattern",
    ["[B, ...]", "[B, ..., C]", "[B, C, ...]", "[B, C, ..., D]", "[B, C, ..., D, E]",
     "[B, C, D, E, ...]"],
)
def test_ellipsis_after_batch_with_at_most_four_fixed_axes(pattern):
    port = parse_shape(f"x{pattern} -> out{pattern}").inputs[0]
    assert port.has_ellipsis
    assert port.fixed_rank is None
    assert sum(d.kind == "ellipsis" for d in port.dims) == 1


def test_unconstrained_ports_have_no_pattern():
    sig = parse_shape("x, y -> out")
    assert [p.dims for p in sig.inputs + sig.outputs] == [None, None, None]
    port = sig.inputs[0]
    assert port.fixed_rank is None and not port.has_ellipsis
    assert str(sig) == "x, y -> out"


def test_variadic_input_without_pattern():
    sig = parse_shape("x* -> out")
    assert sig.inputs == (PortPattern("x", None, variadic=True),)
    assert sig.variadic_input and not sig.variadic_output
    assert str(sig) == "x* -> out"


def test_variadic_input_pattern_is_shared_by_every_expanded_port():
    sig = parse_shape("x*[B, ..., C] -> out[B, ..., C]")
    assert sig.inputs == (PortPattern("x", (B, ELLIPSIS, sym("C")), variadic=True),)
    assert str(sig.inputs[0]) == "x*[B, ..., C]"


def test_variadic_output_without_pattern():
    sig = parse_shape("x[B, ...] -> out*")
    assert sig.outputs == (PortPattern("out", None, variadic=True),)
    assert sig.variadic_output and not sig.variadic_input
    assert str(sig) == "x[B, ...] -> out*"


def test_dtype_after_pattern():
    sig = parse_shape("ids[B, T]:int64 -> out[B, T, D]")
    assert sig.inputs == (PortPattern("ids", (B, sym("T")), dtype="int64"),)
    assert sig.outputs[0].dtype == "compute"
    assert str(sig) == "ids[B, T]:int64 -> out[B, T, D]"


def test_dtype_before_pattern_is_the_same_port():
    before = parse_shape("ids:int64[B, T] -> out[B, T, D]")
    after = parse_shape("ids[B, T]:int64 -> out[B, T, D]")
    assert before.inputs == after.inputs
    assert str(before) == "ids[B, T]:int64 -> out[B, T, D]"


def test_dtype_on_unconstrained_port():
    sig = parse_shape("mask:bool, x[B, T, D] -> out[B, T, D]")
    assert sig.inputs[0] == PortPattern("mask", None, dtype="bool")
    assert sig.inputs[1] == PortPattern("x", (B, sym("T"), sym("D")))
    assert str(sig) == "mask:bool, x[B, T, D] -> out[B, T, D]"


def test_dtype_on_variadic_ports():
    sig = parse_shape("x*:any -> out*:int64")
    assert sig.inputs == (PortPattern("x", None, dtype="any", variadic=True),)
    assert sig.outputs == (PortPattern("out", None, dtype="int64", variadic=True),)


def test_the_eight_dtype_names():
    assert DTYPES == ("compute", "any", "float32", "float16", "bfloat16", "int64", "int32",
                      "bool")


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_is_accepted_in_both_placements(dtype):
    after = parse_shape(f"x[B, C]:{dtype} -> out:{dtype}")
    before = parse_shape(f"x:{dtype}[B, C] -> out")
    assert after.inputs[0].dtype == dtype
    assert after.outputs[0].dtype == dtype
    assert before.inputs[0] == after.inputs[0]


def test_dtype_defaults_to_compute_and_canonical_text_omits_it():
    sig = parse_shape("x[B, C]:compute -> out[B, C]")
    assert sig.inputs[0].dtype == "compute"
    assert parse_shape("x[B, C] -> out").inputs[0].dtype == "compute"
    assert str(sig) == "x[B, C] -> out[B, C]"


def test_whitespace_is_free():
    sig = parse_shape("  x [ B ,C,\t2 * C ] : int64\n,y->out*  ")
    assert sig.inputs[0] == PortPattern("x", (B, sym("C"), sym("C", 2)), dtype="int64")
    assert str(sig) == "x[B, C, 2*C]:int64, y -> out*"
    assert sig.text == "  x [ B ,C,\t2 * C ] : int64\n,y->out*  "


def test_same_name_may_appear_once_on_each_side():
    sig = parse_shape("x[B, C] -> x[B, C]")
    assert sig.inputs[0].name == sig.outputs[0].name == "x"


def test_canonical_text_round_trips():
    texts = [
        "x[B, ..., D_in] -> out[B, ..., D_out]",
        "x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]",
        "x*[B, ...]:any -> out*:float16",
        "mask:bool,ids:int32[B,T]->out[B,T,64]:bfloat16",
    ]
    for text in texts:
        sig = parse_shape(text)
        again = parse_shape(str(sig))
        assert (again.inputs, again.outputs, again.symbols) == (
            sig.inputs, sig.outputs, sig.symbols)
        assert str(again) == str(sig)


def test_dim_text():
    assert [str(d) for d in (B, ELLIPSIS, sym("C"), sym("C", 2), lit(4))] == [
        "B", "...", "C", "2*C", "4"]


def test_results_are_immutable():
    sig = parse_shape("x[B, C] -> out[B, C]")
    assert isinstance(sig, ShapeSignature)
    with pytest.raises(AttributeError):
        sig.inputs = ()
    with pytest.raises(AttributeError):
        sig.inputs[0].dims[0].kind = "symbol"


def test_limits_are_inclusive():
    inputs = ", ".join(f"p{i}" for i in range(MAX_PORTS))
    sig = parse_shape(f"{inputs} -> {inputs}")
    assert len(sig.inputs) == len(sig.outputs) == MAX_PORTS
    symbols = [f"S{i}" for i in range(MAX_SYMBOLS)]
    sig = parse_shape(f"{symbol_ports('p', symbols)} -> out")
    assert sig.symbols == tuple(symbols)
    name = "n" * MAX_NAME
    symbol = "S" * MAX_NAME
    sig = parse_shape(f"{name}[B, {symbol}] -> out")
    assert sig.inputs[0].name == name and sig.symbols == (symbol,)
    text = "x -> out".ljust(4096)
    assert len(text) == 4096 and parse_shape(text).outputs[0].name == "out"


# --------------------------------------------------------------------------- the text


def test_message_quotes_text_and_shows_caret_example():
    error = rejected("x[B, C -> out[B, C]", column=7)
    assert error.message == (
        "shape 'x[B, C -> out[B, C]': expected ']' at column 7\n"
        "  x[B, C -> out[B, C]\n"
        "        ^"
    )


@pytest.mark.parametrize("value", [None, 3, b"x -> out", ["x -> out"]])
def test_shape_must_be_a_str(value):
    error = rejected(value)
    assert "must be a str" in error.message


def test_shape_is_at_most_4096_characters():
    error = rejected("x -> out".ljust(4097))
    assert "4097 characters" in error.message and "4096" in error.message
    assert error.location.column == 4097


def test_empty_shape():
    error = rejected("", column=1)
    assert "expected a port name" in error.message


def test_caret_aligns_under_multiline_text():
    with pytest.raises(HNDLError) as caught:
        parse_shape("x[B, C]\n-> out[Q, C]")
    error = caught.value
    assert error.location.column == 16
    quoted, shown, caret = error.message.split("\n")
    assert shown == "  x[B, C] -> out[Q, C]"
    assert caret.index("^") == shown.index("Q")


@pytest.mark.parametrize(
    "text, column, problem",
    [
        ("x[B, C] -> out[B, C] $", 22, "unexpected character '$'"),
        ("x[B, C] => out", 9, "unexpected character '='"),
        ("x[B, -1] -> out", 6, "stray '-'"),
        ("x[B, ..] -> out", 6, "stray '.'"),
        ("x[B, C] -> out[B, Cé]", 20, "unexpected character 'é'"),
    ],
)
def test_unexpected_characters(text, column, problem):
    assert problem in rejected(text, column).message


# --------------------------------------------------------------------------- the arrow


def test_missing_arrow():
    error = rejected("x[B, C] out[B, C]", column=8)
    assert "expected ',' or '->'" in error.message


def test_missing_arrow_at_end():
    assert "expected ',' or '->'" in rejected("x[B, C]", column=8).message


def test_exactly_one_arrow():
    error = rejected("x -> y -> out", column=8)
    assert "more than one '->'" in error.message


@pytest.mark.parametrize(
    "text, column",
    [("-> out", 1), ("  -> out", 3), ("x ->", 5), ("x -> ", 5), ("x, -> out", 3),
     ("x -> out,", 10), ("x,, y -> out", 3)],
)
def test_each_side_is_a_non_empty_list_of_ports(text, column):
    assert "expected a port name" in rejected(text, column).message


def test_junk_after_outputs():
    error = rejected("x -> out[B, C] y", column=15)
    assert "expected ',' or end of shape" in error.message


# --------------------------------------------------------------------------- port names


@pytest.mark.parametrize(
    "text, column, name",
    [("X -> out", 1, "X"), ("x -> Out", 6, "Out"), ("_x -> out", 1, "_x"),
     ("1x -> out", 1, "1x"), ("x, 2 -> out", 4, "2")],
)
def test_port_names_match_lowercase_identifier(text, column, name):
    error = rejected(text, column)
    assert f"invalid port name '{name}'" in error.message
    assert "[a-z][a-z0-9_]*" in error.message


def test_port_name_at_most_64_characters():
    name = "p" * (MAX_NAME + 1)
    error = rejected(f"x, {name} -> out", column=4)
    assert "65 characters" in error.message


def test_input_port_names_unique():
    error = rejected("x[B, C], y, x -> out", column=13)
    assert "duplicate input port 'x'" in error.message


def test_output_port_names_unique():
    error = rejected("x -> out, out", column=11)
    assert "duplicate output port 'out'" in error.message


def test_at_most_32_input_ports():
    names = [f"p{i}" for i in range(MAX_PORTS + 1)]
    text = ", ".join(names) + " -> out"
    error = rejected(text, column=text.index("p32") + 1)
    assert "more than 32 input ports" in error.message


def test_at_most_32_output_ports():
    names = [f"p{i}" for i in range(MAX_PORTS + 1)]
    text = "x -> " + ", ".join(names)
    error = rejected(text, column=text.index("p32") + 1)
    assert "more than 32 output ports" in error.message


# --------------------------------------------------------------------------- variadic ports


@pytest.mark.parametrize(
    "text, column, problem",
    [
        ("x*, y -> out", 1, "variadic port 'x*' must be the sole input port"),
        ("y, x* -> out", 4, "variadic port 'x*' must be the sole input port"),
        ("x -> out*, aux", 6, "variadic port 'out*' must be the sole output port"),
        ("x -> aux, out*", 11, "variadic port 'out*' must be the sole output port"),
    ],
)
def test_variadic_port_is_sole_port_on_its_side(text, column, problem):
    assert problem in rejected(text, column).message


@pytest.mark.parametrize(
    "text, column",
    [("x[B, ...] -> out*[B, ...]", 18), ("x -> out*:int64[B, C]", 16)],
)
def test_variadic_output_carries_no_pattern(text, column):
    error = rejected(text, column)
    assert "variadic output 'out*' carries no shape pattern" in error.message
    assert "relation=" in error.remedies[0]


@pytest.mark.parametrize(
    "text, column", [("x[B, C]* -> out", 8), ("x:int64* -> out", 8), ("x** -> out", 3)]
)
def test_star_directly_follows_the_port_name(text, column):
    assert "'*' must directly follow the port name" in rejected(text, column).message


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "text, column, name",
    [("x[B, C]:float64 -> out", 9, "float64"), ("x:Int64 -> out", 3, "Int64"),
     ("x -> out:half", 10, "half")],
)
def test_unknown_dtype(text, column, name):
    error = rejected(text, column)
    assert f"unknown dtype '{name}'" in error.message
    for dtype in DTYPES:
        assert dtype in error.message


@pytest.mark.parametrize("text, column", [("x: -> out", 3), ("x[B, C]: -> out", 9)])
def test_missing_dtype_after_colon(text, column):
    assert "expected a dtype after ':'" in rejected(text, column).message


def test_one_dtype_per_port():
    error = rejected("x:int64[B, T]:int32 -> out", column=14)
    assert "port 'x' has a second dtype" in error.message


def test_one_pattern_per_port():
    error = rejected("x[B, C][B, C] -> out", column=8)
    assert "port 'x' has a second pattern" in error.message


# --------------------------------------------------------------------------- the batch axis


@pytest.mark.parametrize(
    "text, column, entry",
    [("x[C, B] -> out", 3, "C"), ("x[..., C] -> out", 3, "..."), ("x[4, C] -> out", 3, "4"),
     ("x -> out[2*C, B]", 10, "2*C")],
)
def test_batch_axis_must_be_first(text, column, entry):
    error = rejected(text, column)
    assert f"the first axis must be the batch axis 'B', not '{entry}'" in error.message


@pytest.mark.parametrize("text, column", [("x[B, B] -> out", 6), ("x[B, ..., B] -> out", 11)])
def test_batch_axis_only_first(text, column):
    assert "may only be the first axis" in rejected(text, column).message


@pytest.mark.parametrize(
    "text, column", [("x[2*B, C] -> out", 3), ("x[B, 2*B] -> out", 6), ("x[3 * B] -> out", 3)]
)
def test_pattern_never_spells_a_multiple_of_batch(text, column):
    error = rejected(text, column)
    assert "never spells a multiple of the batch axis" in error.message


def test_empty_pattern():
    error = rejected("x[] -> out", column=3)
    assert "empty pattern" in error.message


# --------------------------------------------------------------------------- entries


@pytest.mark.parametrize(
    "text, column, problem",
    [
        ("x[B, 0] -> out", 6, "dimension literal 0 is not positive"),
        ("x[B, 04] -> out", 6, "dimension literal '04' has a leading zero"),
        ("x[B, 00] -> out", 6, "dimension literal '00' has a leading zero"),
        (f"x[B, {MAX_LITERAL + 1}] -> out", 6, f"dimension literal {MAX_LITERAL + 1} exceeds"),
        ("x[B, 99999999999999999999] -> out", 6, "exceeds 2**31 - 1"),
    ],
)
def test_literals_are_positive_without_leading_zeros_and_bounded(text, column, problem):
    assert problem in rejected(text, column).message


@pytest.mark.parametrize(
    "text, column, problem",
    [
        ("x[B, 0*C] -> out", 6, "scale 0 is less than 2"),
        ("x[B, 1*C] -> out", 6, "scale 1 is less than 2"),
        ("x[B, 02*C] -> out", 6, "scale '02' has a leading zero"),
        (f"x[B, {MAX_LITERAL + 1}*C] -> out", 6, "exceeds 2**31 - 1"),
        ("x[B, C*2] -> out", 6, "write the integer scale first"),
        ("x[B, C*D] -> out", 6, "write the integer scale first"),
        ("x[B, 2*3] -> out", 6, "multiplies two literals"),
        ("x[B, 2*] -> out", 8, "expected a dimension symbol after '*'"),
        ("x[B, 2**C] -> out", 8, "expected a dimension symbol after '*'"),
        ("x[B, 2*_C] -> out", 8, "invalid axis entry '_C'"),
    ],
)
def test_multiples_are_integer_k_at_least_2_times_a_symbol(text, column, problem):
    assert problem in rejected(text, column).message


@pytest.mark.parametrize(
    "text, column, entry",
    [("x[B, 2C] -> out", 6, "2C"), ("x[B, _C] -> out", 6, "_C"), ("x[B, 1_0] -> out", 6, "1_0")],
)
def test_invalid_entries(text, column, entry):
    assert f"invalid axis entry '{entry}'" in rejected(text, column).message


def test_symbol_at_most_64_characters():
    symbol = "S" * (MAX_NAME + 1)
    error = rejected(f"x[B, {symbol}] -> out", column=6)
    assert "dimension symbol is 65 characters" in error.message


def test_at_most_64_distinct_symbols():
    symbols = [f"S{i}" for i in range(MAX_SYMBOLS + 1)]
    text = symbol_ports("p", symbols) + " -> out"
    error = rejected(text, column=text.index("S64") + 1)
    assert "more than 64 distinct dimension symbols" in error.message


def test_repeated_symbols_count_once():
    symbols = [f"S{i}" for i in range(MAX_SYMBOLS)]
    inputs = symbol_ports("p", symbols)
    outputs = symbol_ports("q", symbols[::-1])
    assert parse_shape(f"{inputs} -> {outputs}").symbols == tuple(symbols)


@pytest.mark.parametrize(
    "text, column, expected",
    [
        ("x[B, C -> out", 7, "expected ']'"),
        ("x -> out[B, C", 14, "expected ']'"),
        ("x[B C] -> out", 4, "expected ','"),
        ("x[B, C D] -> out", 7, "expected ','"),
        ("x[B, C,] -> out", 8, "expected an axis entry"),
        ("x[, B] -> out", 3, "expected an axis entry"),
        ("x[B, :] -> out", 5, "expected an axis entry"),
    ],
)
def test_pattern_punctuation(text, column, expected):
    assert expected in rejected(text, column).message


# --------------------------------------------------------------------------- ellipsis and rank


@pytest.mark.parametrize("text, column", [("x[B, ..., ...] -> out", 11),
                                          ("x[B, ..., C, ...] -> out", 14)])
def test_ellipsis_at_most_once_per_pattern(text, column):
    assert "'...' may appear only once per pattern" in rejected(text, column).message


def test_rank_one_pattern_is_unsupported():
    error = rejected("x[B] -> out", column=4)
    assert "rank 1" in error.message and "rank 2, 3 or 4" in error.message


def test_rank_five_pattern_is_unsupported():
    error = rejected("x[B, C, D, H, W] -> out", column=15)
    assert "rank 5" in error.message and "rank 2, 3 or 4" in error.message


def test_ellipsis_pattern_fixes_at_most_four_axes():
    error = rejected("x[B, C, ..., D, H, W] -> out", column=20)
    assert "fixes 5 axes besides '...'" in error.message
