"""The vision pack is discoverable under hndl.packs and loads into its own registry."""

import hndl_ops_vision
from hndl import Registry
from hndl.packs import installed_packs


def test_registered_under_the_entry_point_group():
    assert installed_packs()["vision"].value == "hndl_ops_vision"


def test_loads_exactly_its_declared_operators():
    registry = Registry.from_packs("vision")
    assert registry.packs == ("vision",)
    assert len(registry) == len(hndl_ops_vision.OPERATORS)
