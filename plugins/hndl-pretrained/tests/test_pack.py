"""The pretrained pack is discoverable under hndl.packs and its dependencies import offline."""

import importlib
import os

import hndl_pretrained
from hndl import Registry
from hndl.packs import installed_packs


def test_registered_under_the_entry_point_group():
    assert installed_packs()["pretrained"].value == "hndl_pretrained"


def test_loads_exactly_its_declared_operators():
    registry = Registry.from_packs("pretrained")
    assert registry.packs == ("pretrained",)
    assert len(registry) == len(hndl_pretrained.OPERATORS)


def test_dependencies_are_installed_and_tests_run_offline():
    for name in ("transformers", "timm", "safetensors", "huggingface_hub", "torchvision"):
        importlib.import_module(name)
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert os.environ.get("TRANSFORMERS_OFFLINE") == "1"
