"""max_pool2d@1 (alias max_pool_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/pooling2d_v1.json was written by HNDL before max_pool gained ceil_mode (its
node "stem_pool" records max_pool2d@1). It must keep restoring byte for byte, rebuild this
module and compute what max_pool@2 computes in floor mode. Also: the version-1 schema itself,
numerics, float64 gradcheck and gradgradcheck, every error code, and the public harness."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError, Registry, ResolvedPlan
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network, restore
from hndl_ops_vision import OPERATORS
from hndl_ops_vision.max_pool import MaxPool
from hndl_ops_vision.max_pool_v1 import MaxPoolV1
from hndl_ops_vision.pooling import pool_relation, validate_padding

SAVED = Path(__file__).parent / "saved_plans" / "pooling2d_v1.json"


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _distinct(*shape, dtype=torch.float32):
    """Values at least 0.1 apart, in random order: no window has a tie, even under gradcheck's perturbation."""
    count = 1
    for extent in shape:
        count *= extent
    return (torch.randperm(count).to(dtype) * 0.1 - count * 0.05).reshape(shape)


def test_declaration_is_version_one_unchanged():
    spec = spec_of(MaxPoolV1)
    assert spec.alias == "max_pool_v1" and spec.qualified == "max_pool2d@1"
    assert spec.category == "pooling" and spec.summary and spec.docstring.strip() and spec.examples
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert tuple(spec.args) == ("kernel_size", "stride", "padding", "dilation")
    assert spec.args["padding"].default == (0, 0) and spec.args["dilation"].default == (1, 1)
    assert spec.positional_args == ("kernel_size",) and spec.args["stride"].inferable
    assert spec.relation is pool_relation and spec.validate is validate_padding
    assert str(spec.shape) == "x[B, C, H, W] -> out[B, C, H_out, W_out]"


def test_the_public_harness_passes():
    check_operator(MaxPoolV1, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == "stem_pool")
    assert node.op == "max_pool2d@1" and node.alias == "max_pool_v1"
    assert dict(node.args) == {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1)}
    model = restore(text, device="cpu")
    layer = model.nodes.n_stem_pool
    assert type(layer) is torch.nn.MaxPool2d and layer.ceil_mode is False  # built as the torch layer it configures
    x = torch.randn(2, 3, 9, 9)
    expected = F.max_pool2d(x, 3, 2, 1)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(MaxPool(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))(x), expected, rtol=0, atol=0)


def test_the_version_one_alias_resolves_to_the_saved_node():
    saved = next(node for node in ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8")).nodes
                 if node.id == "stem_pool")
    node = hndl.resolve('max_pool_v1(3, stride=2, padding=1, name="stem_pool")', input_shape=("B", 3, 9, 9),
                        output_shape=("B", 3, 5, 5)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_todays_spec_resolves_to_version_two_in_floor_mode():
    node = hndl.resolve("max_pool(3, stride=2, padding=1)", input_shape=("B", 3, 9, 9),
                        output_shape=("B", 3, 5, 5)).nodes[0]
    assert node.op == "max_pool2d@2" and node.args["ceil_mode"] is False


def test_without_the_version_one_declaration_restoring_is_a_state_version_error():
    registry = Registry.from_packs("basic")
    for cls in OPERATORS:
        if cls is not MaxPoolV1:
            registry.add(cls)
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"), registry=registry)
    assert error.value.code == "E_STATE_VERSION" and "max_pool2d@1" in error.value.message


def test_backward_inference_is_version_ones_interval():
    error = _fails("linear()\nreshape(3)\nmax_pool_v1(2)", ("B", 2), ("B", 3, 4, 4))
    assert error.code == "E_AMBIGUOUS" and "8..9" in error.message
    plan = hndl.resolve("linear()\nreshape(3)\nmax_pool_v1(3, stride=1, padding=1)", input_shape=("B", 2),
                        output_shape=("B", 3, 6, 5))
    assert plan.nodes[0].args["out_features"] == 90


def test_numerics_and_float64_gradcheck_and_gradgradcheck():
    model = network("max_pool_v1((2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1))",
                    input_shape=("B", 2, 6, 7), output_shape=("B", 2, 6, 3), device="cpu")
    layer = model.nodes.n_n0
    x = _distinct(2, 2, 6, 7).requires_grad_(True)
    out = model(x)
    torch.testing.assert_close(out, F.max_pool2d(x, (2, 3), (1, 2), (1, 0), (2, 1)), rtol=0, atol=0)
    torch.testing.assert_close(out, spec_of(MaxPoolV1).reference(layer)(x))
    layer = layer.double()
    x64 = _distinct(1, 2, 6, 7, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(layer, (x64,))
    assert torch.autograd.gradgradcheck(layer, (x64,))


@pytest.mark.parametrize("args", ["2, ceil_mode=True", "2, ceil_mode=False", "0", "2, stride=0", "2.0", "2, 1"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"max_pool_v1({args})", ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_ARGUMENT"


def test_padding_above_half_the_kernel_is_an_argument_error():
    error = _fails("max_pool_v1(3, padding=2)", ("B", 2, 8, 8), ("B", 2, 4, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"


def test_shape_and_dtype_errors():
    assert _fails("max_pool_v1(2)", ("B", 2, 8, 8), ("B", 2, 4, 5)).code == "E_CONSTRAINT"
    assert _fails("max_pool_v1(5)", ("B", 2, 3, 8), ("B", 2, 1, 1)).code == "E_CONSTRAINT"
    assert _fails("max_pool_v1(2)", ("B", 2, 8), ("B", 2, 4)).code == "E_CONSTRAINT"
    assert _fails("max_pool_v1(2)", ("B", 2, 8, 8), ("B", 2, 4, 4), input_dtype="int64").code == "E_DTYPE"
