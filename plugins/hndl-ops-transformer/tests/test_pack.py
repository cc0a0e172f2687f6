"""The transformer pack is discoverable under hndl.packs and loads into its own registry."""

import hndl_ops_transformer
from hndl import Registry
from hndl.declaration import spec_of
from hndl.packs import installed_packs

ALIASES = ("positional_embedding", "attention", "feed_forward", "transformer_block", "moe", "learned_tokens",
           "positional_embedding_v1", "feed_forward_v1", "transformer_block_v1")


def test_registered_under_the_entry_point_group():
    assert installed_packs()["transformer"].value == "hndl_ops_transformer"


def test_loads_exactly_its_declared_operators():
    registry = Registry.from_packs("transformer")
    assert registry.packs == ("transformer",)
    assert len(registry) == len(hndl_ops_transformer.OPERATORS)
    assert registry.aliases() == ALIASES
    assert [spec.cls for spec in registry] == list(hndl_ops_transformer.OPERATORS)


def test_every_operator_has_its_version_and_a_catalog_category():
    categories = {spec_of(cls).alias: (spec_of(cls).qualified, spec_of(cls).category)
                  for cls in hndl_ops_transformer.OPERATORS}
    assert categories == {
        "positional_embedding": ("positional_embedding@2", "embedding"),
        "attention": ("attention@1", "attention"),
        "feed_forward": ("feed_forward@2", "feed-forward"),
        "transformer_block": ("transformer_block@2", "block"),
        "moe": ("moe@1", "feed-forward"),
        "learned_tokens": ("learned_tokens@1", "embedding"),
        "positional_embedding_v1": ("positional_embedding@1", "embedding"),
        "feed_forward_v1": ("feed_forward@1", "feed-forward"),
        "transformer_block_v1": ("transformer_block@1", "block"),
    }


def test_each_version_one_alias_keeps_the_identity_and_the_arguments_its_successor_extends():
    registry = Registry.from_packs("transformer")
    for alias in ("positional_embedding", "feed_forward", "transformer_block"):
        old, new = registry.get(f"{alias}_v1"), registry.get(alias)
        assert (old.identity, old.version, new.identity, new.version) == (alias, 1, alias, 2)
        assert registry.by_identity(f"{alias}@1") is old and registry.by_identity(f"{alias}@2") is new
        assert issubclass(old.cls, new.cls)
        for name, arg in old.args.items():  # every version-1 argument survives with its default and bounds
            assert new.args[name].default == arg.default and new.args[name].min == arg.min


def test_the_builtin_registry_includes_the_pack():
    assert set(ALIASES) <= set(Registry.builtins().aliases())
