"""The transformer pack is discoverable under hndl.packs and loads into its own registry."""

import hndl_ops_transformer
from hndl import Registry
from hndl.declaration import spec_of
from hndl.packs import installed_packs

ALIASES = ("positional_embedding", "attention", "feed_forward", "transformer_block", "moe")


def test_registered_under_the_entry_point_group():
    assert installed_packs()["transformer"].value == "hndl_ops_transformer"


def test_loads_exactly_its_declared_operators():
    registry = Registry.from_packs("transformer")
    assert registry.packs == ("transformer",)
    assert len(registry) == len(hndl_ops_transformer.OPERATORS)
    assert registry.aliases() == ALIASES
    assert [spec.cls for spec in registry] == list(hndl_ops_transformer.OPERATORS)


def test_every_operator_is_version_one_with_a_catalog_category():
    categories = {spec_of(cls).alias: (spec_of(cls).qualified, spec_of(cls).category)
                  for cls in hndl_ops_transformer.OPERATORS}
    assert categories == {
        "positional_embedding": ("positional_embedding@1", "embedding"),
        "attention": ("attention@1", "attention"),
        "feed_forward": ("feed_forward@1", "feed-forward"),
        "transformer_block": ("transformer_block@1", "block"),
        "moe": ("moe@1", "feed-forward"),
    }


def test_the_builtin_registry_includes_the_pack():
    assert set(ALIASES) <= set(Registry.builtins().aliases())
