"""Names the author chose are echoed bounded and escaped, in both frontends (issue 29, item 11).

A 900 KB alias or keyword used to come back as a 1.8 MB error (then, under HNDLError's own
safety net, as several kilobytes of one name). Every site that echoes an untrusted name now shows
at most a short, escaped prefix with the name's length, every list in a message ends in
"... and N more", and the error still says what is wrong and where.
"""

from __future__ import annotations

import pytest

import hndl
from hndl import HNDLError, Registry

BIG = "a" * 900_000
#: The whole rendered error (message, location, facts, remedies) stays under this.
BOUND = 1_000
CONTRACT = dict(input_shape=("B", 16), output_shape=("B", 4))
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"


@pytest.fixture(scope="module")
def basic() -> Registry:
    return Registry.from_packs("basic")


def failure(call) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        call()
    return caught.value


def bounded(error: HNDLError) -> str:
    text = str(error)
    assert len(text) < BOUND, f"{len(text)} characters: {text[:300]}"
    assert "\x1b" not in text and "\x07" not in text
    return text


# -- configuration text ---------------------------------------------------------------------------
def test_a_900_kb_alias_in_configuration_is_echoed_bounded(basic):
    error = failure(lambda: hndl.resolve(f"{BIG}(8)\nlinear()", registry=basic, **CONTRACT))
    bounded(error)
    assert error.code == "E_OPERATOR" and error.message.startswith("unknown operator 'aaaa")
    assert error.message.endswith("... (900000 characters)'")
    assert (error.location.line, error.location.column) == (1, 1)
    assert error.remedies[-1].startswith("Register an operator with alias 'aaaa")


def test_a_900_kb_keyword_in_configuration_is_echoed_bounded(basic):
    error = failure(lambda: hndl.resolve(f"linear(8, {BIG}=1)\nlinear()", registry=basic, **CONTRACT))
    bounded(error)
    assert error.code == "E_ARGUMENT" and error.message.startswith("linear has no argument 'aaaa")
    assert "(900002 characters)" in error.message
    assert error.location.node == "n0" and error.location.field.endswith("(900000 characters)")
    assert error.remedies == ("Use one of: out_features, bias, in_features.",)


#: Half the 1 MiB source budget less a little: long enough to need bounding, short enough to write twice.
HALF = "a" * 500_000
#: A string literal at the 16 KiB string budget.
KEY = "k" * 16_000


@pytest.mark.parametrize("source, start", [
    (f"linear({BIG})", "undefined or forward reference 'aaaa"),
    (f"linear(8)\n{BIG}", "bare names as statements ('aaaa"),
    (f"{HALF}, {HALF} = split(8)", "name 'aaaa"),
    (f"linear(8, {HALF}=1, {HALF}=2)", "keyword argument 'aaaa"),
    (f"linear(8, init={{'{KEY}': 0, '{KEY}': 1}})", "dict key 'kkkk"),
    (f"__{BIG} = linear(8)", "'__aaaa"),
    (f"linear(8, 4, [{BIG}])", "literal containers cannot contain names ('aaaa"),
])
def test_every_configuration_name_echo_is_bounded(basic, source, start):
    error = failure(lambda: hndl.resolve(source, registry=basic, **CONTRACT))
    bounded(error)
    assert start in error.message, error.message[:200]


# -- callable capture ------------------------------------------------------------------------------
def test_a_900_kb_alias_in_capture_is_echoed_bounded(basic):
    error = failure(lambda: getattr(basic.ops, BIG))
    bounded(error)
    assert error.code == "E_OPERATOR" and error.message.startswith("operator 'aaaa")
    assert error.message.endswith("(900002 characters) is not in this registry")


def test_a_900_kb_keyword_in_capture_is_echoed_bounded(basic):
    def network(x):
        return basic.ops.linear(x, 4, **{BIG: 1})

    error = failure(lambda: hndl.resolve_callable(network, registry=basic, **CONTRACT))
    bounded(error)
    assert error.code == "E_ARGUMENT" and error.message.startswith("linear has no argument 'aaaa")


def test_a_keyword_holding_terminal_escapes_is_shown_escaped(basic):
    def network(x):
        return basic.ops.linear(x, 4, **{f"{OSC52}bias": False})

    error = failure(lambda: hndl.resolve_callable(network, registry=basic, **CONTRACT))
    text = bounded(error)
    assert "\\x1b]52;c;" in text


def test_twenty_thousand_port_keywords_are_listed_with_a_count(basic):
    """A variadic operator's ports past x0 named by keyword: the listing stops at 20 and counts the rest."""
    def network(x):
        return basic.ops.concat(**{f"x{index}": x for index in range(1, 20_001)})

    error = failure(lambda: hndl.resolve_callable(network, registry=basic, **CONTRACT))
    bounded(error)
    assert error.code == "E_BINDING" and error.message.endswith("got x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, "
                                                                 "x12, x13, x14, x15, x16, x17, x18, x19, x20, ... and "
                                                                 "19980 more")


def test_twenty_thousand_undeclared_outputs_are_listed_with_a_count(basic):
    def network(x):
        hidden = basic.ops.linear(x, 4)
        return {"logits": hidden, **{f"extra{index}": hidden for index in range(20_000)}}

    error = failure(lambda: hndl.resolve_callable(network, registry=basic, input_shape=("B", 16),
                                                  output_shape={"logits": ("B", 4)}))
    bounded(error)
    assert error.code == "E_OUTPUT" and error.message.endswith("extra19, ... and 19980 more")


def test_a_900_kb_policy_and_node_name_are_echoed_bounded(basic):
    for keywords in ({"policy": [BIG]}, {"name": f"{BIG}!"}):
        def network(x, keywords=keywords):
            return basic.ops.linear(x, 4, **keywords)

        error = failure(lambda: hndl.resolve_callable(network, registry=basic, **CONTRACT))
        bounded(error)
        assert error.code in ("E_ARGUMENT", "E_NAME")


# -- registry and packs ----------------------------------------------------------------------------
def test_a_900_kb_provider_name_is_echoed_bounded(basic):
    error = failure(lambda: basic.provider(BIG))
    bounded(error)
    assert error.code == "E_PRETRAINED" and error.message.startswith("no pretrained provider 'aaaa")


def test_a_900_kb_pack_name_and_a_pack_named_20_000_times_are_echoed_bounded():
    error = failure(lambda: Registry.from_packs(BIG))
    bounded(error)
    assert error.code == "E_REGISTRY" and error.message.startswith("no operator pack named 'aaaa")
    error = failure(lambda: Registry.from_packs(*["basic"] * 20_000))
    bounded(error)
    assert error.message.startswith("the pack 'basic' is named twice") and error.message.endswith("19980 more)")
