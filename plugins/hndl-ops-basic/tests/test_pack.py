"""The basic pack registers through its entry point and every example builds and runs."""

import torch

import hndl_ops_basic
from hndl import Registry
from hndl.declaration import spec_of
from hndl.torch import build
from hndl import resolve

TORCH_DTYPES = {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool}


def test_entry_point_loads_exactly_the_pack_operators():
    registry = Registry.from_packs("basic")
    assert registry.aliases() == tuple(spec_of(cls).alias for cls in hndl_ops_basic.OPERATORS)
    assert registry.aliases() == (
        "linear", "relu", "leaky_relu", "tanh", "reshape", "flatten", "split", "chunk", "concat", "add", "dropout",
        "embedding", "gelu", "sigmoid", "softmax", "layer_norm", "rms_norm", "mul",
        "relu6", "hardtanh", "swish", "hardswish", "hardsigmoid", "mish", "log_softmax",
        "transpose", "permute", "unsqueeze", "squeeze", "mean", "max", "select",
        "matmul", "quick_gelu", "channel_add", "channel_scale_shift",
    )
    assert "silu" not in registry.aliases()  # silu stays the §8 custom-operator example; SiLU is swish


def test_every_declared_example_resolves_builds_and_runs():
    registry = Registry.from_packs("basic")
    for cls in hndl_ops_basic.OPERATORS:
        spec = spec_of(cls)
        assert spec.summary and spec.docstring and spec.category and spec.examples
        assert all(arg.help for arg in spec.args.values())
        for example in spec.examples:
            plan = resolve(example.source, input_shape=example.input_shape,
                           output_shape=example.output_shape, input_dtype=example.input_dtype, registry=registry)
            module = build(plan, device="cpu", registry=registry)
            batch = 2
            shapes = example.input_shape if isinstance(example.input_shape, dict) else {"x": example.input_shape}
            if example.input_dtype in TORCH_DTYPES:
                # id 0 is valid for every vocabulary size
                inputs = {name: torch.zeros(batch, *shape[1:], dtype=TORCH_DTYPES[example.input_dtype])
                          for name, shape in shapes.items()}
            else:
                inputs = {name: torch.randn(batch, *shape[1:]) for name, shape in shapes.items()}
            out = module(**inputs)["output"]
            assert tuple(out.shape) == (batch, *example.output_shape[1:])
