"""chunk@1: equal sections of one axis, inference both ways, the batch axis, one-tuples,
views carrying first and second derivatives, and every error code."""

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import build, network
from hndl_ops_basic.chunk import Chunk


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def test_declaration():
    spec = spec_of(Chunk)
    assert spec.alias == "chunk" and spec.qualified == "chunk@1"
    assert spec.batch == "relation"
    assert spec.outputs_from == "chunks"
    assert spec.args["dim"].default == 1
    assert spec.output_ports({"chunks": 3, "dim": 1}) == ("out0", "out1", "out2")


def test_two_equal_sections():
    plan = hndl.resolve("a, b = chunk(x, 2, dim=1)\nadd(a, b)", input_shape=("B", 8), output_shape=("B", 4))
    node = plan.nodes[0]
    assert node.args == {"chunks": 2, "dim": 1}
    assert node.output_shapes == {"out0": ("B", 4), "out1": ("B", 4)}


def test_spatial_sections_on_rank_four():
    plan = hndl.resolve("a, b, c = chunk(x, 3, dim=3)\nout = c", input_shape=("B", 2, 5, 9), output_shape=("B", 2, 5, 3))
    assert plan.nodes[0].output_shapes == {f"out{i}": ("B", 2, 5, 3) for i in range(3)}


def test_known_section_fixes_the_input_extent():
    plan = hndl.resolve("h = linear(x)\na, b = chunk(h, 2, dim=1)\nout = b", input_shape=("B", 3), output_shape=("B", 4))
    assert plan.nodes[0].args["out_features"] == 8
    assert plan.nodes[1].input_shapes["x"] == ("B", 8)


def test_uneven_division_fails_at_resolution():
    error = _fails("a, b = chunk(x, 2, dim=1)\nadd(a, b)", ("B", 5), ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_section_contradicting_the_input_fails():
    error = _fails("a, b = chunk(x, 2, dim=1)\nout = a", ("B", 5), ("B", 2))
    assert error.code == "E_CONSTRAINT"


def test_out_of_range_dim_fails_at_resolution():
    error = _fails("a, b = chunk(x, 2, dim=2)\nout = a", ("B", 8), ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_negative_dim_is_an_argument_error():
    error = _fails("a, b = chunk(x, 2, dim=-1)\nout = a", ("B", 8), ("B", 4))
    assert error.code == "E_ARGUMENT"


@pytest.mark.parametrize("chunks", [0, 33, -1])
def test_chunk_count_bounds(chunks):
    error = _fails(f"parts = chunk(x, {chunks})\nout = x", ("B", 66), ("B", 66))
    assert error.code == "E_ARGUMENT"


def test_thirty_two_chunks_is_allowed():
    names = ", ".join(f"p{i}" for i in range(32))
    plan = hndl.resolve(f"{names} = chunk(x, 32)\nout = p31", input_shape=("B", 64), output_shape=("B", 2))
    assert len(plan.nodes[0].output_shapes) == 32


def test_one_chunk_is_a_one_tuple():
    plan = hndl.resolve("(a,) = chunk(x, 1, dim=1)\nout = a", input_shape=("B", 8), output_shape=("B", 8))
    assert plan.nodes[0].output_shapes == {"out0": ("B", 8)}


def test_one_chunk_clears_current():
    error = _fails("a, = chunk(x, 1)\nrelu()", ("B", 8), ("B", 8))
    assert error.code == "E_CURRENT"


def test_one_chunk_needs_one_tuple_unpacking():
    error = _fails("a, b = chunk(x, 1)\nout = a", ("B", 8), ("B", 8))
    assert error.code == "E_OUTPUT_ARITY"


def test_two_chunks_reject_three_targets():
    error = _fails("a, b, c = chunk(x, 2)\nout = a", ("B", 8), ("B", 4))
    assert error.code == "E_OUTPUT_ARITY"


def test_one_chunk_module_returns_a_one_tuple():
    plan = hndl.resolve("(a,) = chunk(x, 1)\nout = a", input_shape=("B", 8), output_shape=("B", 8))
    module = build(plan, device="cpu").nodes.n_n0
    x = torch.randn(2, 8)
    result = module(x)
    assert isinstance(result, tuple) and len(result) == 1
    assert torch.equal(result[0], x)


def test_batch_axis_inverts_concat():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\na, b = chunk(both, 2, dim=0)\nadd(a, b)",
        input_shape=("B", 4),
        output_shape=("B", 4),
    )
    join, chunk = plan.nodes[0], plan.nodes[1]
    assert join.output_shapes["out"] == ("2*B", 4)
    assert chunk.input_shapes["x"] == ("2*B", 4)
    assert chunk.output_shapes == {"out0": ("B", 4), "out1": ("B", 4)}


def test_batch_of_two_into_three_fails():
    error = _fails("both = concat(x, x, axis=0)\na, b, c = chunk(both, 3, dim=0)\nout = a", ("B", 3), ("B", 3))
    assert error.code == "E_CONSTRAINT"


def test_plain_batch_into_two_fails():
    error = _fails("a, b = chunk(x, 2, dim=0)\nadd(a, b)", ("B", 4), ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_three_batches_into_three():
    plan = hndl.resolve(
        "both = concat(x, x, x, axis=0)\na, b, c = chunk(both, 3, dim=0)\nadd(a, c)",
        input_shape=("B", 2),
        output_shape=("B", 2),
    )
    assert plan.nodes[0].output_shapes["out"] == ("3*B", 2)
    assert plan.nodes[1].output_shapes["out2"] == ("B", 2)


def test_first_and_second_derivatives_reach_the_input_through_every_section():
    plan = hndl.resolve("a, b, c = chunk(x, 3)\nout = a", input_shape=("B", 6), output_shape=("B", 2))
    module = build(plan, device="cpu").nodes.n_n0
    x = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    sections = module(x)
    assert len(sections) == 3
    for index, section in enumerate(sections):
        assert section._base is x  # a view, not a copy
        torch.testing.assert_close(section, x[:, 2 * index: 2 * index + 2])
        (grad,) = torch.autograd.grad(section.pow(3).sum(), x, create_graph=True)
        expected = torch.zeros_like(x)
        expected[:, 2 * index: 2 * index + 2] = 3 * x[:, 2 * index: 2 * index + 2] ** 2
        torch.testing.assert_close(grad, expected)
        (second,) = torch.autograd.grad(grad.sum(), x)
        expected2 = torch.zeros_like(x)
        expected2[:, 2 * index: 2 * index + 2] = 6 * x[:, 2 * index: 2 * index + 2]
        torch.testing.assert_close(second, expected2)


def test_network_forward_and_backward_through_both_sections():
    model = network("a, b = chunk(x, 2)\nadd(a, b)", input_shape=("B", 8), output_shape=("B", 4), device="cpu")
    x = torch.randn(3, 8, requires_grad=True)
    out = model(x)
    torch.testing.assert_close(out, x[:, :4] + x[:, 4:])
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3, 8))


def test_module_called_directly_on_an_indivisible_extent_is_a_runtime_error():
    plan = hndl.resolve("a, b = chunk(x, 2)\nadd(a, b)", input_shape=("B", 8), output_shape=("B", 4))
    module = build(plan, device="cpu").nodes.n_n0
    with pytest.raises(HNDLError) as error:
        module(torch.randn(2, 7))
    assert error.value.code == "E_RUNTIME"


def test_batch_module_called_directly_on_an_odd_batch_is_a_runtime_error():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\na, b = chunk(both, 2, dim=0)\nadd(a, b)", input_shape=("B", 4), output_shape=("B", 4)
    )
    module = build(plan, device="cpu").nodes.n_n1
    with pytest.raises(HNDLError) as error:
        module(torch.randn(3, 4))
    assert error.value.code == "E_RUNTIME"
