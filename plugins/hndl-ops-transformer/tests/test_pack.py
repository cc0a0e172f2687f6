"""The transformer pack is discoverable under hndl.packs and loads into its own registry."""

import pytest

import hndl_ops_transformer
from hndl import Registry
from hndl.declaration import spec_of
from hndl.packs import installed_packs

ALIASES = ("positional_embedding", "attention", "feed_forward", "transformer_block", "moe", "learned_tokens",
           "positional_embedding_v1", "feed_forward_v1", "transformer_block_v1", "attention_v1", "feed_forward_v2",
           "transformer_block_v2", "split_heads", "merge_heads", "scaled_dot_product_attention", "rotary_embedding",
           "rotary", "relative_position_bias", "timestep_embedding", "relative_position_table")


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
        "attention": ("attention@2", "attention"),
        "feed_forward": ("feed_forward@3", "feed-forward"),
        "transformer_block": ("transformer_block@3", "block"),
        "moe": ("moe@1", "feed-forward"),
        "learned_tokens": ("learned_tokens@1", "embedding"),
        "positional_embedding_v1": ("positional_embedding@1", "embedding"),
        "feed_forward_v1": ("feed_forward@1", "feed-forward"),
        "transformer_block_v1": ("transformer_block@1", "block"),
        "attention_v1": ("attention@1", "attention"),
        "feed_forward_v2": ("feed_forward@2", "feed-forward"),
        "transformer_block_v2": ("transformer_block@2", "block"),
        "split_heads": ("split_heads@1", "attention"),
        "merge_heads": ("merge_heads@1", "attention"),
        "scaled_dot_product_attention": ("scaled_dot_product_attention@1", "attention"),
        "rotary_embedding": ("rotary_embedding@1", "embedding"),
        "rotary": ("rotary@1", "attention"),
        "relative_position_bias": ("relative_position_bias@1", "attention"),
        "timestep_embedding": ("timestep_embedding@1", "embedding"),
        "relative_position_table": ("relative_position_table@1", "attention"),
    }


@pytest.mark.parametrize("alias, old_version, new_version", [
    ("positional_embedding", 1, 2), ("feed_forward", 1, 3), ("feed_forward", 2, 3), ("transformer_block", 1, 3),
    ("transformer_block", 2, 3), ("attention", 1, 2)])
def test_each_old_alias_keeps_the_identity_and_the_arguments_its_successor_extends(alias, old_version, new_version):
    registry = Registry.from_packs("transformer")
    old, new = registry.get(f"{alias}_v{old_version}"), registry.get(alias)
    assert (old.identity, old.version, new.identity, new.version) == (alias, old_version, alias, new_version)
    assert registry.by_identity(f"{alias}@{old_version}") is old
    assert registry.by_identity(f"{alias}@{new_version}") is new
    assert issubclass(old.cls, new.cls)
    for name, arg in old.args.items():  # every old argument survives with its default and bounds
        assert new.args[name].default == arg.default and new.args[name].min == arg.min
        assert set(arg.choices or ()) <= set(new.args[name].choices or ())


def test_the_builtin_registry_includes_the_pack():
    assert set(ALIASES) <= set(Registry.builtins().aliases())
