"""split@1: first section plus remainder, inference both ways, current clearing, arity,
views with gradients through either output, and every error code."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import build, network
from hndl_ops_basic.split import Split


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def test_declaration():
    spec = spec_of(Split)
    assert spec.alias == "split" and spec.qualified == "split@1"
    assert spec.positional_args[0] == "size"
    assert spec.args["size"].inferable
    assert spec.args["dim"].default == 1
    assert spec.input_ports() == ("x",)
    assert spec.output_ports({}) == ("first", "rest")


def test_equal_halves():
    plan = hndl.resolve("z1, z2 = split(64)\nadd(z1, z2)", input_shape=("B", 128), output_shape=("B", 64))
    node = plan.nodes[0]
    assert node.output_shapes == {"first": ("B", 64), "rest": ("B", 64)}
    assert node.args["size"] == 64 and node.provenance["size"] == "explicit"


def test_remainder_is_not_repeated_chunking():
    plan = hndl.resolve("z1, z2 = split(64)\nout = z2", input_shape=("B", 160), output_shape=("B", 96))
    assert plan.nodes[0].output_shapes == {"first": ("B", 64), "rest": ("B", 96)}


def test_explicit_tensor_and_keyword_dim_on_rank_three():
    plan = hndl.resolve("a, b = split(x, 4, dim=2)\nout = b", input_shape=("B", 3, 16), output_shape=("B", 3, 12))
    assert plan.nodes[0].output_shapes == {"first": ("B", 3, 4), "rest": ("B", 3, 12)}


def test_channel_split_on_rank_four_keeps_spatial_axes():
    plan = hndl.resolve("a, b = split(x, 2)\nout = b", input_shape=("B", 3, 5, 4), output_shape=("B", 1, 5, 4))
    assert plan.nodes[0].output_shapes == {"first": ("B", 2, 5, 4), "rest": ("B", 1, 5, 4)}


def test_omitted_size_is_inferred_from_a_downstream_join():
    # add(c, b) forces b to match c's literal width 8, so size = 20 - 8 = 12.
    plan = hndl.resolve("a, b = split(x)\nc = linear(a, 8)\nadd(c, b)", input_shape=("B", 20), output_shape=("B", 8))
    node = plan.nodes[0]
    assert node.args["size"] == 12
    assert node.provenance["size"] == "inferred"
    assert node.output_shapes == {"first": ("B", 12), "rest": ("B", 8)}
    assert plan.nodes[1].args["in_features"] == 12


def test_omitted_size_is_inferred_from_an_output_selecting_the_remainder():
    plan = hndl.resolve(
        "a, b = split(x)\np = linear(a, 8)\nq = b",
        input_shape=("B", 20),
        output_shape={"p": ("B", 8), "q": ("B", 6)},
    )
    node = plan.nodes[0]
    assert node.args["size"] == 14 and node.provenance["size"] == "inferred"
    assert plan.nodes[1].args["in_features"] == 14


def test_input_extent_is_inferred_from_both_sections():
    # The producer's width is omitted: first (literal 4) + rest (from the output, 6) = 10.
    plan = hndl.resolve("h = linear(x)\na, b = split(h, 4)\nout = b", input_shape=("B", 3), output_shape=("B", 6))
    assert plan.nodes[0].args["out_features"] == 10
    assert plan.nodes[1].input_shapes["x"] == ("B", 10)


def test_omitted_size_with_nothing_fixing_it_is_not_a_success():
    error = _fails("a, b = split(x)\nc = linear(a)\nd = linear(b)\nadd(c, d)", ("B", 16), ("B", 8))
    assert error.code in ("E_AMBIGUOUS", "E_UNRESOLVED")


def test_batch_split_is_an_argument_error():
    error = _fails("a, b = split(x, 4, dim=0)\nout = b", ("B", 16), ("B", 12))
    assert error.code == "E_ARGUMENT"
    assert error.location.field == "dim"


def test_negative_dim_is_rejected_not_normalized():
    error = _fails("a, b = split(x, 4, dim=-1)\nout = b", ("B", 16), ("B", 12))
    assert error.code == "E_ARGUMENT"


def test_dim_beyond_the_rank_is_a_constraint_error():
    error = _fails("a, b = split(x, 4, dim=2)\nout = b", ("B", 16), ("B", 12))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("size", [16, 20])
def test_empty_or_negative_remainder_is_a_constraint_error(size):
    error = _fails(f"a, b = split(x, {size})\nout = a", ("B", 16), ("B", 16))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("size", ["0", "-4", "True", "2.0"])
def test_invalid_sizes_are_argument_errors(size):
    error = _fails(f"a, b = split(x, {size})\nout = b", ("B", 16), ("B", 12))
    assert error.code == "E_ARGUMENT"


def test_section_width_contradicting_the_output_fails():
    error = _fails("a, b = split(x, 4)\nout = b", ("B", 16), ("B", 10))
    assert error.code == "E_CONSTRAINT"


def test_split_clears_current():
    error = _fails("a, b = split(x, 4)\nrelu()", ("B", 16), ("B", 12))
    assert error.code == "E_CURRENT"


def test_split_clears_current_even_when_discarded():
    error = _fails("split(x, 4)\nrelu()", ("B", 16), ("B", 12))
    assert error.code == "E_CURRENT"


def test_current_is_recovered_by_an_explicit_input():
    plan = hndl.resolve("a, b = split(x, 4)\nrelu(b)\nlinear(5)", input_shape=("B", 16), output_shape=("B", 5))
    assert plan.nodes[2].args["in_features"] == 12


@pytest.mark.parametrize("targets", ["a, b, c", "a,"])
def test_unpacking_arity_must_match(targets):
    error = _fails(f"{targets} = split(x, 4)\nout = a", ("B", 16), ("B", 4))
    assert error.code == "E_OUTPUT_ARITY"


def test_stored_tuple_unpacks_later():
    plan = hndl.resolve("parts = split(x, 4)\na, b = parts\nout = b", input_shape=("B", 16), output_shape=("B", 12))
    assert plan.nodes[0].output_shapes["rest"] == ("B", 12)


def test_both_outputs_are_views_and_gradients_reach_the_input_through_either():
    module = build(
        hndl.resolve("a, b = split(x, 3)\nadd(a, b)", input_shape=("B", 6), output_shape=("B", 3)),
        device="cpu",
    ).nodes.n_n0
    x = torch.randn(4, 6, requires_grad=True)
    first, rest = module(x)
    assert first._base is x and rest._base is x  # views: no silent copy
    torch.testing.assert_close(first, x[:, :3])
    torch.testing.assert_close(rest, x[:, 3:])
    (grad_first,) = torch.autograd.grad((first * 2).sum(), x)
    torch.testing.assert_close(grad_first, torch.cat([torch.full((4, 3), 2.0), torch.zeros(4, 3)], 1))
    (grad_rest,) = torch.autograd.grad((rest * 3).sum(), x)
    torch.testing.assert_close(grad_rest, torch.cat([torch.zeros(4, 3), torch.full((4, 3), 3.0)], 1))


def test_network_numerics_and_gradients_through_both_branches():
    model = network(
        "z1, z2 = split(64)\nc = linear(z1, 96)\nadd(c, z2)", input_shape=("B", 160), output_shape=("B", 96), device="cpu"
    )
    layer = model.nodes.n_n1
    x = torch.randn(3, 160, requires_grad=True)
    out = model(x)
    z1, z2 = torch.split(x, [64, 96], dim=1)
    torch.testing.assert_close(out, torch.nn.functional.linear(z1, layer.weight, layer.bias) + z2)
    out.sum().backward()
    expected = torch.cat([layer.weight.sum(0).expand(3, 64), torch.ones(3, 96)], 1)
    torch.testing.assert_close(x.grad, expected)
