"""The vision pack is discoverable under hndl.packs, loads into its own registry, and every
declared example resolves, builds and runs forward and backward."""

import pytest
import torch

import hndl_ops_vision
from hndl import Registry, resolve
from hndl.declaration import spec_of
from hndl.packs import installed_packs
from hndl.torch import build

ALIASES = ("conv", "deconv", "adaptive_norm", "conv1d", "batch_norm", "group_norm", "instance_norm", "max_pool",
           "avg_pool", "adaptive_avg_pool", "upsample", "residual_block", "batch_norm1d", "max_pool1d", "avg_pool1d",
           "adaptive_avg_pool1d", "crop", "channel_layer_norm", "squeeze_excitation", "layer_scale", "stochastic_depth",
           "depthwise_separable_conv", "inverted_residual", "bottleneck", "max_pool_v1", "avg_pool_v1", "max_pool1d_v1",
           "avg_pool1d_v1", "channel_shuffle", "window_partition", "window_merge", "window_attention", "patch_merging",
           "swin_block", "inverted_residual_v1", "residual_block_v1",
           "bottleneck_v1", "depthwise_separable_conv_v1", "conv_v1", "conv1d_v1")
CATEGORIES = {"convolution", "normalization", "pooling", "resampling", "block", "shape", "regularization",
              "attention"}


def test_registered_under_the_entry_point_group():
    assert installed_packs()["vision"].value == "hndl_ops_vision"


def test_loads_exactly_its_declared_operators():
    registry = Registry.from_packs("vision")
    assert registry.packs == ("vision",)
    assert len(registry) == len(hndl_ops_vision.OPERATORS)
    assert registry.aliases() == ALIASES
    assert tuple(spec_of(cls).alias for cls in hndl_ops_vision.OPERATORS) == ALIASES


def test_every_declaration_is_complete():
    for cls in hndl_ops_vision.OPERATORS:
        spec = spec_of(cls)
        assert spec.summary and spec.docstring and spec.examples, spec.alias
        assert spec.category in CATEGORIES, spec.alias
        assert all(arg.help for arg in spec.args.values()), spec.alias
    assert {spec_of(cls).category for cls in hndl_ops_vision.OPERATORS} == CATEGORIES


@pytest.mark.parametrize(
    "cls, index",
    [(cls, index) for cls in hndl_ops_vision.OPERATORS for index in range(len(spec_of(cls).examples))],
    ids=lambda value: spec_of(value).alias if isinstance(value, type) else str(value),
)
def test_every_declared_example_resolves_builds_and_runs(cls, index):
    registry = Registry.from_packs("basic", "vision")
    spec = spec_of(cls)
    example = spec.examples[index]
    plan = resolve(example.source, input_shape=example.input_shape, output_shape=example.output_shape,
                   registry=registry)
    assert any(node.op == spec.qualified for node in plan.nodes)
    model = build(plan, device="cpu", registry=registry)
    x = torch.randn(2, *example.input_shape[1:], requires_grad=True)
    out = model(x=x)["output"]
    assert tuple(out.shape) == (2, *example.output_shape[1:])
    out.square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
