"""avg_pool1d@1 (alias avg_pool1d_v1): the version-1 declaration kept for saved plans.

tests/saved_plans/pooling1d_v1.json was written by HNDL before avg_pool1d gained ceil_mode (its
node "pool" records avg_pool1d@1). It must keep restoring byte for byte, rebuild this module
and compute what avg_pool1d@2 computes in floor mode. Also: the version-1 schema itself and its
[B, C, L] axis order, numerics, float64 gradcheck and gradgradcheck, every error code, and the
public harness."""

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
from hndl_ops_vision.avg_pool1d import AvgPool1d
from hndl_ops_vision.avg_pool1d_v1 import AvgPool1dV1
from hndl_ops_vision.pooling1d import pool1d_relation, validate_padding1d

SAVED = Path(__file__).parent / "saved_plans" / "pooling1d_v1.json"


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration_is_version_one_unchanged():
    spec = spec_of(AvgPool1dV1)
    assert spec.alias == "avg_pool1d_v1" and spec.qualified == "avg_pool1d@1"
    assert spec.category == "pooling" and spec.summary and spec.examples
    assert "[B, C, L]" in spec.docstring and "[B, T, D]" in spec.docstring and "[B, C, L]" in spec.shape_text
    assert spec.reference is not None and all(arg.help for arg in spec.args.values())
    assert tuple(spec.args) == ("kernel_size", "stride", "padding", "count_include_pad")
    assert spec.args["padding"].default == 0 and spec.args["count_include_pad"].default is True
    assert spec.positional_args == ("kernel_size",) and spec.args["stride"].inferable
    assert spec.relation is pool1d_relation and spec.validate is validate_padding1d
    assert str(spec.shape) == "x[B, C, L] -> out[B, C, L_out]"


def test_the_public_harness_passes():
    check_operator(AvgPool1dV1, registry=Registry.from_packs("basic", "vision", "transformer"))


def test_the_saved_plan_restores_byte_for_byte_and_builds_version_one():
    text = SAVED.read_text(encoding="utf-8")
    plan = ResolvedPlan.from_json(text)
    assert plan.to_json() == text
    node = next(node for node in plan.nodes if node.id == "pool")
    assert node.op == "avg_pool1d@1" and node.alias == "avg_pool1d_v1"
    assert dict(node.args) == {"kernel_size": 2, "stride": 2, "padding": 0, "count_include_pad": False}
    model = restore(text, device="cpu")
    layer = model.nodes.n_pool
    assert type(layer) is torch.nn.AvgPool1d and layer.ceil_mode is False  # built as the torch layer it configures
    x = torch.randn(2, 3, 5)
    expected = F.avg_pool1d(x, 2, 2, 0, count_include_pad=False)
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(AvgPool1d(kernel_size=2, stride=2, count_include_pad=False)(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(model(torch.ones(2, 3, 9)), torch.ones(2, 3, 2))


def test_the_version_one_alias_resolves_to_the_saved_node():
    saved = next(node for node in ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8")).nodes if node.id == "pool")
    node = hndl.resolve('avg_pool1d_v1(2, count_include_pad=False, name="pool")', input_shape=("B", 3, 5),
                        output_shape=("B", 3, 2)).nodes[0]
    assert (node.op, node.args, node.provenance) == (saved.op, saved.args, saved.provenance)


def test_todays_spec_resolves_to_version_two_in_floor_mode():
    node = hndl.resolve("avg_pool1d(2)", input_shape=("B", 3, 5), output_shape=("B", 3, 2)).nodes[0]
    assert node.op == "avg_pool1d@2" and node.args["ceil_mode"] is False


def test_without_the_version_one_declaration_restoring_is_a_state_version_error():
    registry = Registry.from_packs("basic")
    for cls in OPERATORS:
        if cls is not AvgPool1dV1:
            registry.add(cls)
    with pytest.raises(HNDLError) as error:
        ResolvedPlan.from_json(SAVED.read_text(encoding="utf-8"), registry=registry)
    assert error.value.code == "E_STATE_VERSION" and "avg_pool1d@1" in error.value.message


def test_backward_inference_is_version_ones_interval():
    error = _fails("linear()\nreshape(3)\navg_pool1d_v1(2)", ("B", 2), ("B", 3, 4))
    assert error.code == "E_AMBIGUOUS" and "8..9" in error.message
    plan = hndl.resolve("linear()\nreshape(3)\navg_pool1d_v1(3, stride=1, padding=1)", input_shape=("B", 2),
                        output_shape=("B", 3, 6))
    assert plan.nodes[0].args["out_features"] == 18


@pytest.mark.parametrize("include", [True, False])
def test_numerics_and_float64_gradcheck_and_gradgradcheck(include):
    model = network(f"avg_pool1d_v1(3, stride=2, padding=1, count_include_pad={include})",
                    input_shape=("B", 2, 10), output_shape=("B", 2, 5), device="cpu")
    layer = model.nodes.n_n0
    x = torch.randn(2, 2, 10)
    out = model(x)
    torch.testing.assert_close(out, F.avg_pool1d(x, 3, 2, 1, count_include_pad=include))
    torch.testing.assert_close(out, spec_of(AvgPool1dV1).reference(layer)(x))
    layer = layer.double()
    x64 = torch.randn(1, 2, 10, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x64,))
    assert torch.autograd.gradgradcheck(layer, (x64,))


@pytest.mark.parametrize("args", ["2, ceil_mode=True", "2, ceil_mode=False", "0", "2, dilation=2", "2, 1"])
def test_invalid_arguments_are_argument_errors(args):
    assert _fails(f"avg_pool1d_v1({args})", ("B", 2, 8), ("B", 2, 4)).code == "E_ARGUMENT"


def test_padding_above_half_the_kernel_is_an_argument_error():
    error = _fails("avg_pool1d_v1(3, padding=2)", ("B", 2, 8), ("B", 2, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"


def test_shape_and_dtype_errors():
    assert _fails("avg_pool1d_v1(2)", ("B", 2, 8), ("B", 2, 3)).code == "E_CONSTRAINT"
    assert _fails("avg_pool1d_v1(4)", ("B", 2, 3), ("B", 2, 1)).code == "E_CONSTRAINT"
    assert _fails("avg_pool1d_v1(2)", ("B", 2, 8, 8), ("B", 2, 4, 4)).code == "E_CONSTRAINT"
    assert _fails("avg_pool1d_v1(2)", ("B", 2, 8), ("B", 2, 4), input_dtype="int64").code == "E_DTYPE"
