"""add@1 and mul@1 keep refusing broadcasts (§3); a per-channel mismatch names the declared operator.

A [B, C] or [B, C, 1, 1] operand against a [B, C, H, W] map is what a reference's broadcast
does for time embeddings and FiLM: the error says joins never broadcast and points to
channel_add (for add) or channel_scale_shift (for mul). The shared join relation adds the
facts the pattern x[B, ...], y[B, ...] -> out[B, ...] added: resolved plans keep their
semantic digests (tests/test_vectors.py is the published promise; this compares the two rules
directly on graphs where the join carries inference)."""

import pytest
import torch
from torch import nn

import hndl
import hndl_ops_basic
from hndl import Example, HNDLError, Registry, operator
from hndl_ops_basic.add import Add
from hndl_ops_basic.mul import Mul

MAP = ("B", 8, 4, 4)


def _fails(source, input_shape, output_shape, registry=None):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry)
    assert error.value.code == "E_CONSTRAINT"
    return error.value


@pytest.mark.parametrize("alias, operator_name", [("add", "channel_add"), ("mul", "channel_scale_shift")])
@pytest.mark.parametrize("narrow", [("B", 8), ("B", 8, 1, 1), ("B", 8, 1)])
def test_a_per_channel_operand_names_the_channel_operator(alias, operator_name, narrow):
    error = _fails(f"{alias}(x, y)", {"x": MAP, "y": narrow}, MAP)
    shown = "[" + ", ".join(map(str, narrow)) + "]"
    assert error.message == (f"{alias} operands differ: port x is [B, 8, 4, 4] and port y is {shown}, "
                             f"and joins never broadcast")
    assert (error.location.node, error.location.line) == ("n0", 1)
    assert f"call {operator_name}(feature_map, " in error.remedies[0]
    assert "the [B, 8, 4, 4] tensor first" in error.remedies[0]
    assert "the declared form of that broadcast" in error.remedies[0]
    assert ("flatten()" in error.remedies[0]) == (len(narrow) > 2)
    assert error.remedies[1] == "Otherwise give both operands exactly the same shape."


def test_the_narrow_operand_first_is_recognised_too():
    error = _fails("add(y, x)", {"x": MAP, "y": ("B", 8)}, MAP)
    assert error.message == ("add operands differ: port x is [B, 8] and port y is [B, 8, 4, 4], "
                             "and joins never broadcast")
    assert "channel_add(feature_map, vector) with the [B, 8, 4, 4] tensor first and the [B, 8] one second" \
        in error.remedies[0]


def test_a_narrow_operand_against_the_output_contract_names_the_operator():
    error = _fails("t = linear(z, 8)\nadd(t, t)", {"z": ("B", 3)}, MAP)
    assert error.message == ("add gives out the shape of its operands, but port x is [B, 8] and out must be "
                             "[B, 8, 4, 4]: joins never broadcast")
    assert error.location.node == "n1" and "channel_add" in error.remedies[0]


def test_a_projected_embedding_added_to_a_feature_map_names_channel_add():
    error = _fails("t = linear(z, 8)\nadd(x, t)", {"x": MAP, "z": ("B", 16)}, MAP)
    assert error.location.node == "n1" and "channel_add" in error.remedies[0]
    plan = hndl.resolve("t = linear(z)\nchannel_add(x, t)", input_shape={"x": MAP, "z": ("B", 16)}, output_shape=MAP)
    assert plan.node("n0").args["out_features"] == 8  # what the remedy leads to resolves


@pytest.mark.parametrize("alias", ["add", "mul"])
@pytest.mark.parametrize("other", [("B", 8, 4, 1), ("B", 1, 4, 4), ("B", 6), ("B", 8, 4, 5)])
def test_other_mismatches_keep_the_equation_message(alias, other):
    error = _fails(f"{alias}(x, y)", {"x": MAP, "y": other}, MAP)
    assert "channel" not in " ".join(error.remedies)
    assert error.remedies == ("Change a literal or a contract so the declared relations agree.",)


@operator("add", summary="Pattern-only add.", shape="x[B, ...], y[B, ...] -> out[B, ...]", category="join",
          examples=(Example("add(x, x)", ("B", 4), ("B", 4)),), reference=lambda module: torch.add)
class PatternAdd(nn.Module):
    """add@1 as declared before the join relation."""

    def forward(self, x, y):
        return x + y


@operator("mul", summary="Pattern-only mul.", shape="x[B, ...], y[B, ...] -> out[B, ...]", category="join",
          examples=(Example("mul(x, x)", ("B", 4), ("B", 4)),), reference=lambda module: torch.mul)
class PatternMul(nn.Module):
    """mul@1 as declared before the join relation."""

    def forward(self, x, y):
        return x * y


@pytest.fixture(scope="module")
def registries():
    pattern = Registry()
    for cls in hndl_ops_basic.OPERATORS:
        pattern.add({Add: PatternAdd, Mul: PatternMul}.get(cls, cls))
    return Registry.from_packs("basic"), pattern


@pytest.mark.parametrize("source, input_shape, output_shape", [
    ("a = linear(x)\nb = linear(x)\nadd(a, b)", ("B", 5), ("B", 7)),
    ("a = linear(x)\nmul(x, a)", ("B", 5), ("B", 5)),
    ("h = reshape(x, 4, 4)\nl = linear(h)\nm = mul(h, l)\nadd(m, h)\nflatten()", ("B", 16), ("B", 16)),
    ("a = reshape(x, 2, 2)\nb = linear(a)\nadd(a, b)\nflatten()", ("B", 4), ("B", 4)),
    ("t = transpose(x, 1, 2)\nl = linear(t)\nu = transpose(l, 1, 2)\nmul(u, x)", ("B", 3, 6), ("B", 3, 6)),
])
def test_plans_keep_their_semantic_digest(registries, source, input_shape, output_shape):
    current, pattern = registries
    ours = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=current)
    before = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=pattern)
    assert ours.semantic_digest == before.semantic_digest
    assert [node.output_shapes for node in ours.nodes] == [node.output_shapes for node in before.nodes]


@pytest.mark.parametrize("source, input_shape, output_shape", [
    ("a = reshape(x, 2, 2)\nb = reshape(x, 2, 2)\nadd(a, b)\nflatten()", ("B", 4), ("B", 4)),
    ("add(x, y)", {"x": ("B", 4), "y": ("B", 2, 2)}, ("B", 4)),
    ("a = reshape(x)\nb = linear(x, 4)\nc = reshape(b, 2, 2)\nadd(a, c)\nflatten()", ("B", 4), ("B", 4)),
])
def test_failures_keep_their_code(registries, source, input_shape, output_shape):
    codes = []
    for registry in registries:
        with pytest.raises(HNDLError) as error:
            hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry)
        codes.append(error.value.code)
    assert codes[0] == codes[1]
