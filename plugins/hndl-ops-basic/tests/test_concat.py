"""concat@1: widths add, one unknown term is solved, the batch axis stacks examples (k*B),
the 1024-batch bound, external k*B contracts, numerics against torch.cat, and error codes."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.torch import build, network
from hndl_ops_basic.concat import Concat


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of(Concat)
    assert spec.alias == "concat" and spec.qualified == "concat@1"
    assert spec.batch == "relation"
    assert spec.args["axis"].default == 1
    assert not spec.args["axis"].positional
    assert spec.input_ports(3) == ("x0", "x1", "x2")


def test_widths_add():
    plan = hndl.resolve("a = linear(x, 3)\nconcat(x, a)", input_shape=("B", 5), output_shape=("B", 8))
    node = plan.nodes[1]
    assert node.args == {"input_count": 2, "axis": 1}
    assert node.input_shapes == {"x0": ("B", 5), "x1": ("B", 3)}
    assert node.output_shapes["out"] == ("B", 8)


def test_output_width_is_inferred_forward():
    plan = hndl.resolve("a = linear(x, 3)\nconcat(x, a)\nlinear(2)", input_shape=("B", 5), output_shape=("B", 2))
    assert plan.nodes[1].output_shapes["out"] == ("B", 8)
    assert plan.nodes[2].args["in_features"] == 8


def test_one_unknown_input_width_is_solved_from_a_known_total():
    plan = hndl.resolve("a = linear(x)\nconcat(x, a)", input_shape=("B", 5), output_shape=("B", 8))
    assert plan.nodes[0].args["out_features"] == 3
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_two_unknown_input_widths_stay_ambiguous():
    error = _fails("a = linear(x)\nb = linear(x)\nconcat(a, b)", ("B", 5), ("B", 8))
    assert error.code in ("E_AMBIGUOUS", "E_UNRESOLVED")


def test_known_total_smaller_than_the_known_parts_fails():
    error = _fails("a = linear(x)\nconcat(x, a)", ("B", 5), ("B", 5))
    assert error.code == "E_CONSTRAINT"


def test_joining_a_later_axis_of_rank_three():
    plan = hndl.resolve("a = linear(x, 3)\nconcat(x, a, axis=2)", input_shape=("B", 5, 2), output_shape=("B", 5, 5))
    assert plan.nodes[1].output_shapes["out"] == ("B", 5, 5)


def test_batch_axis_two_batches():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\na, b = chunk(both, 2, dim=0)\nadd(a, b)", input_shape=("B", 4), output_shape=("B", 4)
    )
    assert plan.nodes[0].input_shapes == {"x0": ("B", 4), "x1": ("B", 4)}
    assert plan.nodes[0].output_shapes["out"] == ("2*B", 4)


def test_batch_axis_three_batches_from_two_plus_one():
    plan = hndl.resolve(
        "two = concat(x, x, axis=0)\nthree = concat(two, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, c)",
        input_shape=("B", 2, 3, 3),
        output_shape=("B", 2, 3, 3),
    )
    assert plan.nodes[0].output_shapes["out"] == ("2*B", 2, 3, 3)
    assert plan.nodes[1].input_shapes == {"x0": ("2*B", 2, 3, 3), "x1": ("B", 2, 3, 3)}
    assert plan.nodes[1].output_shapes["out"] == ("3*B", 2, 3, 3)


def test_batch_multiples_pass_through_ordinary_operators():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\nh = linear(both, 6)\na, b = chunk(h, 2, dim=0)\nadd(a, b)",
        input_shape=("B", 4),
        output_shape=("B", 6),
    )
    assert plan.nodes[1].input_shapes["x"] == ("2*B", 4)
    assert plan.nodes[1].output_shapes["out"] == ("2*B", 6)


def _opaque_registry():
    """A registry with an operator that relates nothing about its output batch."""
    registry = Registry.builtins()

    def relation(s):
        pass

    @registry.operator(
        "opaque",
        identity="test.opaque",
        summary="Passes features through without relating the batch entry.",
        shape="x[B, F] -> out[B, F]",
        batch="relation",
        relation=relation,
    )
    class Opaque(nn.Module):
        """Test fixture."""

        def forward(self, x):
            return x

    return registry


def test_one_unknown_input_batch_is_solved_from_a_known_total():
    # chunk fixes the join to 3*B; x is B, so the unrelated branch must carry 2*B.
    plan = hndl.resolve(
        "y = opaque(x)\nj = concat(x, y, axis=0)\na, b, c = chunk(j, 3, dim=0)\nout = c",
        input_shape=("B", 4),
        output_shape=("B", 4),
        registry=_opaque_registry(),
    )
    assert plan.nodes[0].output_shapes["out"] == ("2*B", 4)
    assert plan.nodes[1].input_shapes == {"x0": ("B", 4), "x1": ("2*B", 4)}
    assert plan.nodes[1].output_shapes["out"] == ("3*B", 4)


def test_unknown_input_batch_solved_as_one_batch():
    plan = hndl.resolve(
        "y = opaque(x)\nj = concat(y, x, axis=0)\na, b = chunk(j, 2, dim=0)\nout = a",
        input_shape=("B", 4),
        output_shape=("B", 4),
        registry=_opaque_registry(),
    )
    assert plan.nodes[0].output_shapes["out"] == ("B", 4)
    assert plan.nodes[1].output_shapes["out"] == ("2*B", 4)


def test_unknown_input_batch_with_no_room_left_fails():
    # chunk fixes the join at 1 * B, but x already supplies one batch: nothing is left for y.
    error = _fails(
        "y = opaque(x)\nj = concat(x, y, axis=0)\n(a,) = chunk(j, 1, dim=0)\nout = a",
        ("B", 4),
        ("B", 4),
        registry=_opaque_registry(),
    )
    assert error.code == "E_CONSTRAINT"


def _doublings(count):
    lines, name = [], "x"
    for i in range(1, count + 1):
        lines.append(f"h{i} = concat({name}, {name}, axis=0)")
        name = f"h{i}"
    remaining, level = 2 ** count, 0
    while remaining > 1:
        parts = min(32, remaining)
        targets = ", ".join(f"c{level}_{j}" for j in range(parts))
        lines.append(f"{targets} = chunk({name}, {parts}, dim=0)")
        name, remaining, level = f"c{level}_0", remaining // parts, level + 1
    lines.append(f"out = {name}")
    return "\n".join(lines)


def test_ten_doublings_reach_exactly_1024_batches():
    plan = hndl.resolve(_doublings(10), input_shape=("B", 2), output_shape=("B", 2))
    assert plan.nodes[9].output_shapes["out"] == ("1024*B", 2)


def test_a_sum_above_1024_batches_is_a_resource_error():
    error = _fails(_doublings(11), ("B", 2), ("B", 2))
    assert error.code == "E_RESOURCE"


def _wide(extra):
    # 32 batches, then 32 * 32 = 1024, then 1024 + 32 * extra; chunked back to one batch.
    total = 1024 + 32 * extra
    lines = ["h1 = concat(" + ", ".join(["x"] * 32) + ", axis=0)"]
    lines.append("h2 = concat(" + ", ".join(["h1"] * 32) + ", axis=0)")
    name = "h2"
    if extra:
        lines.append("h3 = concat(h2, " + ", ".join(["h1"] * extra) + ", axis=0)")
        name = "h3"
    level = 0
    for parts in (32, total // 32 // 6 if extra else 32, 6 if extra else 1):
        if parts == 1:
            continue
        targets = ", ".join(f"c{level}_{j}" for j in range(parts))
        lines.append(f"{targets} = chunk({name}, {parts}, dim=0)")
        name, level = f"c{level}_0", level + 1
    lines.append(f"out = {name}")
    return "\n".join(lines)


def test_a_wide_join_of_exactly_1024_batches_resolves():
    plan = hndl.resolve(_wide(0), input_shape=("B", 2), output_shape=("B", 2))
    assert plan.nodes[1].output_shapes["out"] == ("1024*B", 2)


def test_a_wide_join_above_1024_batches_is_a_resource_error():
    # 1024 + 4 * 32 = 1152 = 32 * 6 * 6 batches: chunkable back, but beyond the bound.
    error = _fails(_wide(4), ("B", 2), ("B", 2))
    assert error.code == "E_RESOURCE"


@pytest.mark.parametrize("entry", ["2*B", "1*B", "B*2", "0*B"])
def test_external_batch_multiples_are_schema_errors(entry):
    error = _fails("both = concat(x, x, axis=0)", ("B", 4), (entry, 4))
    assert error.code == "E_SCHEMA"
    error = _fails("", (entry, 4), ("B", 4))
    assert error.code == "E_SCHEMA"


def test_publishing_an_unchunked_join_fails():
    error = _fails("both = concat(x, x, axis=0)", ("B", 4), ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_negative_axis_is_rejected_not_normalized():
    error = _fails("concat(x, x, axis=-1)", ("B", 5), ("B", 10))
    assert error.code == "E_ARGUMENT"


def test_axis_beyond_the_rank_fails():
    error = _fails("concat(x, x, axis=2)", ("B", 5), ("B", 10))
    assert error.code == "E_CONSTRAINT"


def test_mismatched_non_joined_axis_fails():
    error = _fails("a = linear(x, 3)\nconcat(x, a, axis=1)", ("B", 5, 2), ("B", 8, 2))
    assert error.code == "E_CONSTRAINT"


def test_mismatched_features_on_the_batch_axis_fail():
    error = _fails("a = linear(x, 3)\nboth = concat(x, a, axis=0)\np, q = chunk(both, 2, dim=0)\nout = p", ("B", 5), ("B", 5))
    assert error.code == "E_CONSTRAINT"


def test_mismatched_rank_fails():
    error = _fails("concat(x, y)", {"x": ("B", 4), "y": ("B", 4, 2)}, ("B", 8))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("literal", ["0", "5", "True"])
def test_a_positional_literal_after_the_tensors_is_never_silently_dropped(literal):
    # axis is keyword-only and input_count is set from the call, so a trailing positional
    # literal has nowhere to go. It must fail (E_ARGUMENT) rather than resolve with axis=1:
    # concat(x, x, 0) silently producing a width-10 feature join discards an author literal.
    error = _fails(f"concat(x, x, {literal})", ("B", 5), ("B", 10))
    assert error.code == "E_ARGUMENT"


def test_a_positional_literal_is_never_silently_dropped_in_native_capture():
    from hndl import ops

    def join(x):
        return ops.concat(x, x, 0)

    with pytest.raises(HNDLError) as error:
        hndl.resolve_callable(join, input_shape=("B", 5), output_shape=("B", 10))
    assert error.value.code == "E_ARGUMENT"


def test_input_count_is_not_an_author_argument():
    error = _fails("concat(x, x, input_count=2)", ("B", 5), ("B", 10))
    assert error.code == "E_ARGUMENT"


def test_batch_multiples_use_the_declared_batch_symbol():
    plan = hndl.resolve(
        "both = concat(x, x, axis=0)\nthree = concat(both, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, b)",
        input_shape=("N", 4),
        output_shape=("N", 4),
    )
    assert plan.nodes[0].output_shapes["out"] == ("2*N", 4)
    assert plan.nodes[1].output_shapes["out"] == ("3*N", 4)
    assert plan.nodes[2].output_shapes["out0"] == ("N", 4)


def test_fewer_than_two_inputs_is_a_binding_error():
    error = _fails("concat(x)", ("B", 5), ("B", 5))
    assert error.code == "E_BINDING"


def test_more_than_32_inputs_are_reported_as_tensors_with_nesting_as_the_remedy():
    """Issue 15, item 23: 33 tensors gave "Give input_count as an int in [2, 32]", an argument
    nobody writes. A declaration has at most 32 input ports, so the bound stays; the message
    counts the tensors the call passes and the remedy nests concats."""
    error = _fails("concat(" + ", ".join(["x"] * 33) + ")", ("B", 4), ("B", 132))
    assert error.code == "E_ARGUMENT"
    assert error.message == "concat takes 2 to 32 input tensors in one call (x0, x1, ...), got 33"
    assert (error.location.line, error.location.column) == (1, 1)
    assert "Give input_count" not in str(error)
    (remedy,) = error.remedies
    assert remedy.startswith("Pass at most 32 tensors to one concat call") and "concat(concat(" in remedy
    # the remedy works: nested, the same 33 tensors resolve to the same width
    nested = "a = concat(" + ", ".join(["x"] * 32) + ")\nconcat(a, x)"
    plan = hndl.resolve(nested, input_shape=("B", 4), output_shape=("B", 132))
    assert plan.nodes[1].output_shapes["out"] == ("B", 132)
    # native capture reports the same
    from hndl import ops

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(lambda x: ops.concat(*[x] * 33), input_shape=("B", 4), output_shape=("B", 132))
    assert caught.value.message == error.message


def test_numerics_and_gradients_against_torch_cat():
    model = network(
        "a = linear(x, 3)\nb = relu(x)\nconcat(x, a, b)", input_shape=("B", 4), output_shape=("B", 11), device="cpu"
    )
    layer = model.nodes.n_n0
    x = torch.randn(5, 4, requires_grad=True)
    out = model(x)
    expected = torch.cat([x, torch.nn.functional.linear(x, layer.weight, layer.bias), torch.relu(x)], dim=1)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn(5, 11)
    (grad,) = torch.autograd.grad((out * upstream).sum(), x)
    x2 = x.detach().clone().requires_grad_(True)
    reference = torch.cat([x2, torch.nn.functional.linear(x2, layer.weight, layer.bias), torch.relu(x2)], dim=1)
    (expected_grad,) = torch.autograd.grad((reference * upstream).sum(), x2)
    torch.testing.assert_close(grad, expected_grad)


def test_module_matches_torch_cat_on_each_axis():
    for axis, shapes in ((0, [(2, 3), (4, 3)]), (1, [(2, 3), (2, 5)]), (2, [(2, 3, 1), (2, 3, 4)])):
        module = Concat(input_count=2, axis=axis)
        tensors = [torch.randn(*shape) for shape in shapes]
        torch.testing.assert_close(module(*tensors), torch.cat(tensors, dim=axis))


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_batch_join_and_chunk_run_with_first_and_second_derivatives(batch):
    plan = hndl.resolve(
        "both = concat(x, y, axis=0)\nh = linear(both, 3)\nt = tanh(h)\na, b = chunk(t, 2, dim=0)\nadd(a, b)",
        input_shape={"x": ("B", 4), "y": ("B", 4)},
        output_shape=("B", 3),
    )
    model = build(plan, device="cpu")
    layer = model.nodes.n_n1
    x = torch.randn(batch, 4, requires_grad=True)
    y = torch.randn(batch, 4, requires_grad=True)
    out = model(x=x, y=y)["output"]
    assert out.shape == (batch, 3)

    def reference(x, y):
        return torch.tanh(torch.nn.functional.linear(x, layer.weight, layer.bias)) + torch.tanh(
            torch.nn.functional.linear(y, layer.weight, layer.bias)
        )

    torch.testing.assert_close(out, reference(x, y))
    gx, gy = torch.autograd.grad(out.pow(2).sum(), (x, y), create_graph=True)
    rx, ry = torch.autograd.grad(reference(x, y).pow(2).sum(), (x, y), create_graph=True)
    torch.testing.assert_close((gx, gy), (rx, ry))
    hx, hy = torch.autograd.grad(gx.sum() + gy.sum(), (x, y))
    sx, sy = torch.autograd.grad(rx.sum() + ry.sum(), (x, y))
    torch.testing.assert_close((hx, hy), (sx, sy))
    assert hx.abs().sum() > 0 and hy.abs().sum() > 0
