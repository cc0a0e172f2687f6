"""hndl.suggestions: the closest spellings of an unknown name, and the installed pack that provides
an operator alias a registry lacks."""

from __future__ import annotations

import sys

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


def test_a_huge_name_is_never_handed_to_difflib(monkeypatch):
    """A 900 KB alias or keyword took difflib 0.1-0.2 s per comparison pool; one more than 7/3 as
    long as every candidate cannot reach the 0.6 ratio, so it is not compared at all."""
    import difflib

    def forbidden(*args, **kwargs):
        raise AssertionError("difflib compared a name too long to be close")

    monkeypatch.setattr(difflib, "get_close_matches", forbidden)
    assert closest("a" * 900_000, ["linear", "relu"]) == ()
    assert did_you_mean("b" * 20, ["linear"]) is None


def test_bounding_the_name_changes_no_answer():
    """Every name up to the bound gets difflib's own answer; past it difflib finds nothing either."""
    import difflib

    candidates = ["ab", "relu", "linear", "layer_norm"]
    for length in range(1, 40):
        for name in ("ab" * 20)[:length], ("layer_norm" * 4)[:length], ("linear" * 7)[:length]:
            assert closest(name, candidates) == tuple(difflib.get_close_matches(name, candidates)), name


def test_an_installed_pack_is_named_from_its_declared_aliases_without_importing_it(monkeypatch, tmp_path):
    """The providing pack comes from the distribution's static list (entry-point group hndl.operators):
    a pack whose module cannot even be imported is still named, and one declaring nothing is not."""
    for pack, operators in (("ghost", "[hndl.operators]\nghost_op = hndl_test_ghost_module\n"), ("mute", "")):
        info = tmp_path / f"{pack}_pack-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pack}-pack\nVersion: 0.1\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(
            f"[hndl.packs]\n{pack} = hndl_test_{pack}_module\n\n{operators}", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    basic = Registry.from_packs("basic")
    assert missing_pack_remedies("ghost_op", basic) == (
        "The installed pack 'ghost' provides 'ghost_op': resolve with Registry.from_packs('basic', 'ghost') "
        "(on the command line: --packs basic,ghost).",
    )
    assert providing_packs("mute_op", basic) == ()
    assert not {"hndl_test_ghost_module", "hndl_test_mute_module"} & set(sys.modules)
