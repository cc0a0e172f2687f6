"""hndl.suggestions: the closest spellings of an unknown name, and the installed pack that provides
an operator alias a registry lacks."""

from __future__ import annotations

from hndl import Registry
from hndl.suggestions import closest, did_you_mean, missing_pack_remedies, operator_remedies, providing_packs

FALLBACK = "Register the operator, or fix the spelling."


def test_the_closest_names_come_best_first():
    assert closest("lienar", ["relu", "linear", "layer_norm"]) == ("linear",)
    assert closest("conv", ["conv1d", "concat", "conv"]) == ("conv", "conv1d", "concat")
    assert closest("zzz", ["linear", "relu"]) == ()


def test_a_name_that_is_not_text_has_no_close_names():
    assert closest(None, ["linear"]) == () and closest(3, ["linear"]) == ()
    assert did_you_mean(["linear"], ["linear"]) is None


def test_did_you_mean_names_one_or_several_candidates():
    assert did_you_mean("lienar", ["linear", "relu"]) == "Did you mean linear?"
    assert did_you_mean("rleu", ["relu", "relu6", "tanh"]) == "Did you mean relu or relu6?"
    assert did_you_mean("conv", ["conv1d", "concat", "conv"]) == "Did you mean conv, conv1d or concat?"
    assert did_you_mean("qqq", ["linear"]) is None


def test_the_installed_pack_that_provides_a_missing_alias_is_named_with_the_registry_to_build():
    basic = Registry.from_packs("basic")
    assert providing_packs("conv", basic) == ("vision",)
    assert missing_pack_remedies("conv", basic) == (
        "The installed pack 'vision' provides 'conv': resolve with Registry.from_packs('basic', 'vision') "
        "(on the command line: --packs basic,vision).",
    )
    # A provider found replaces the spelling guesses: conv is not a misspelt concat.
    assert operator_remedies("conv", basic, FALLBACK) == missing_pack_remedies("conv", basic)


def test_a_pack_the_registry_already_holds_is_never_offered():
    both = Registry.from_packs("basic", "vision")
    assert providing_packs("conv", both) == ()
    assert providing_packs("linear", Registry.from_packs("vision")) == ("basic",)


def test_without_a_provider_the_remedies_are_the_close_aliases_then_the_fallback():
    basic = Registry.from_packs("basic")
    assert operator_remedies("lienar", basic, FALLBACK) == ("Did you mean linear?", FALLBACK)
    assert operator_remedies("no_such_operator_anywhere", basic, FALLBACK) == (FALLBACK,)


def test_a_hand_built_registry_is_told_the_pack_by_itself():
    empty = Registry()
    assert missing_pack_remedies("relu", empty) == (
        "The installed pack 'basic' provides 'relu': resolve with Registry.from_packs('basic') "
        "(on the command line: --packs basic).",
    )
