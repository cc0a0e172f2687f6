"""Contract keywords as PyTorch users write them: a rank-1 shape is told the batch symbol comes first,
and torch dtype objects are accepted wherever a dtype name is, leading to the very same plan."""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.contracts import dtype_name, parse_contracts
from hndl.torch import network, network_file

MLP = "linear(8)\nrelu()\nlinear()"
EMBED = "embedding(100, 8)\nflatten()\nlinear()"


@pytest.fixture(scope="module")
def basic() -> Registry:
    return Registry.from_packs("basic")


def failure(call) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        call()
    return caught.value


# -- rank 1 ---------------------------------------------------------------------------------------
def test_a_rank_1_contract_says_the_batch_symbol_comes_first():
    error = failure(lambda: parse_contracts((10,), ("B", 4)))
    assert error.code == "E_SCHEMA" and error.location.field == "input_shape['x']"
    assert error.message == ("input_shape['x'] has rank 1; axis 0 must be the batch symbol such as 'B', "
                             "followed by the extents of one example")
    assert error.remedies == ("The batch symbol comes first: write ('B', 10), not (10,).",)


def test_a_rank_1_output_contract_gets_the_same_remedy():
    error = failure(lambda: parse_contracts(("B", 4), [7]))
    assert error.location.field == "output_shape['output']"
    assert error.remedies == ("The batch symbol comes first: write ('B', 7), not (7,).",)


def test_a_lone_batch_symbol_is_told_to_add_the_extents():
    error = failure(lambda: parse_contracts(("N",), ("N", 4)))
    assert error.remedies == ("Give the extents of one example after the batch symbol, e.g. ('N', 128).",)


def test_a_rank_1_entry_that_is_no_extent_still_gets_a_batch_first_remedy():
    error = failure(lambda: parse_contracts((-3,), ("B", 4)))
    assert error.remedies == ("The batch symbol comes first: write ('B', 128), not (-3,).",)


def test_a_leading_integer_batch_keeps_its_remedy():
    error = failure(lambda: parse_contracts((32, 128), ("B", 4)))
    assert error.remedies == ("Write the batch axis as a symbol, e.g. ('B', 128).",)


# -- torch dtype objects --------------------------------------------------------------------------
@pytest.mark.parametrize("value, name", [
    (torch.float32, "float32"), (torch.float, "float32"), (torch.half, "float16"), (torch.float16, "float16"),
    (torch.bfloat16, "bfloat16"), (torch.long, "int64"), (torch.int64, "int64"), (torch.int, "int32"),
    (torch.bool, "bool"), (torch.float64, "float64"), (torch.complex64, "complex64"),
])
def test_a_torch_dtype_is_read_as_its_name(value, name):
    assert dtype_name(value) == name


@pytest.mark.parametrize("value", ["float32", None, 3, ("float32",)])
def test_other_values_pass_through_unchanged(value):
    assert dtype_name(value) == value


def test_torch_dtypes_give_the_same_plan_as_their_names(basic):
    by_name = hndl.resolve(MLP, input_shape=("B", 16), output_shape=("B", 4), dtype="float16", registry=basic)
    by_object = hndl.resolve(MLP, input_shape=("B", 16), output_shape=("B", 4), dtype=torch.half, registry=basic)
    assert by_object.semantic_digest == by_name.semantic_digest
    assert by_object.to_json() == by_name.to_json()
    assert by_object.dtype == "float16"


def test_a_torch_input_dtype_gives_the_same_plan_as_its_name(basic):
    keywords = dict(input_shape=("B", 5), output_shape=("B", 3), registry=basic)
    by_name = hndl.resolve(EMBED, input_dtype="int64", **keywords)
    by_object = hndl.resolve(EMBED, input_dtype=torch.long, dtype=torch.float32, **keywords)
    assert by_object.to_json() == by_name.to_json()
    assert by_object.inputs[0]["dtype"] == "int64"


def test_a_per_input_mapping_of_torch_dtypes_gives_the_same_plan(basic):
    source = "e = embedding(ids, 100, 8)\nf = flatten(e)\nconcat(f, extra)\nlinear()"
    keywords = dict(input_shape={"ids": ("B", 5), "extra": ("B", 4)}, output_shape=("B", 3), registry=basic)
    by_name = hndl.resolve(source, input_dtype={"ids": "int64", "extra": "float32"}, **keywords)
    by_object = hndl.resolve(source, input_dtype={"ids": torch.int64, "extra": torch.float32}, **keywords)
    assert by_object.to_json() == by_name.to_json()


def test_every_entry_point_accepts_torch_dtypes(basic, tmp_path):
    path = tmp_path / "embed.hndl"
    path.write_text(EMBED, encoding="utf-8")
    keywords = dict(input_shape=("B", 5), output_shape=("B", 3), registry=basic)
    expected = hndl.resolve(EMBED, input_dtype="int64", **keywords).semantic_digest

    def captured(x):
        basic.ops.embedding(100, 8)
        basic.ops.flatten()
        return basic.ops.linear()

    plans = {
        "resolve_file": hndl.resolve_file(path, dtype=torch.float32, input_dtype=torch.long, **keywords),
        "network": network(EMBED, dtype=torch.float32, input_dtype=torch.long, device="cpu", **keywords).plan,
        "network_file": network_file(path, dtype=torch.float32, input_dtype=torch.long, device="cpu",
                                     **keywords).plan,
    }
    assert {name: plan.semantic_digest for name, plan in plans.items()} == dict.fromkeys(plans, expected)
    by_callable = hndl.resolve_callable(captured, input_dtype=torch.long, **keywords)
    assert by_callable.semantic_digest == hndl.resolve_callable(captured, input_dtype="int64", **keywords).semantic_digest
    model = network(EMBED, input_dtype=torch.long, device="cpu", **keywords)
    assert model(torch.randint(0, 100, (2, 5))).shape == (2, 3)


@pytest.mark.parametrize("value, name", [(torch.float64, "float64"), (torch.complex64, "complex64"),
                                         (torch.int8, "int8")])
def test_an_unsupported_torch_dtype_fails_like_its_name(basic, value, name):
    keywords = dict(input_shape=("B", 16), output_shape=("B", 4), registry=basic)
    by_object = failure(lambda: hndl.resolve(MLP, dtype=value, **keywords))
    by_name = failure(lambda: hndl.resolve(MLP, dtype=name, **keywords))
    assert by_object.code == "E_SCHEMA" and str(by_object) == str(by_name)
    assert by_object.message == f"dtype must be one of float32, float16, bfloat16, got {name!r}"


@pytest.mark.parametrize("value, name", [(torch.float64, "float64"), (torch.uint8, "uint8")])
def test_an_unsupported_torch_input_dtype_fails_like_its_name(basic, value, name):
    keywords = dict(input_shape=("B", 16), output_shape=("B", 4), registry=basic)
    by_object = failure(lambda: hndl.resolve(MLP, input_dtype=value, **keywords))
    by_name = failure(lambda: hndl.resolve(MLP, input_dtype=name, **keywords))
    assert by_object.code == "E_SCHEMA" and str(by_object) == str(by_name)
    assert by_object.message == ("input_dtype of 'x' must be one of float32, float16, bfloat16, int64, int32, bool, "
                                 f"got {name!r}")


def test_a_floating_torch_input_dtype_must_still_equal_the_compute_dtype(basic):
    error = failure(lambda: hndl.resolve(MLP, input_shape=("B", 16), output_shape=("B", 4), input_dtype=torch.half,
                                         registry=basic))
    assert error.code == "E_SCHEMA"
    assert error.message == "floating input_dtype 'float16' of 'x' must equal the compute dtype 'float32'"


# -- issue 30: E_CONSTRAINT remedies that name the fix ------------------------------------------------
GENERIC = "Change a literal or a contract so the declared relations agree."


@pytest.fixture(scope="module")
def images() -> Registry:
    return Registry.from_packs("basic", "vision")


def test_two_unpadded_convs_say_why_the_extent_is_28_and_which_padding_keeps_32(images):
    """Item 2: the equation with its numbers, then padding="same" on every conv, then the padding here."""
    source = "conv(16, kernel_size=3)\nrelu()\nconv(kernel_size=3)"
    error = failure(lambda: hndl.resolve(source, input_shape=("B", 3, 32, 32), output_shape=("B", 16, 32, 32),
                                         registry=images))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n2"
    assert error.message == ("conv: H_out = floor((30 + 2*0 - 1*(3 - 1) - 1) / 1 + 1) = 28 from input extent 30 "
                             "(kernel_size 3, stride 1, padding 0, dilation 1), but out[2] must be 32")
    assert error.remedies == (
        'The input extent is already 30, not 32: node n0 (conv) made it 30 (see the chain). To keep 32 throughout, '
        'give every stride-1 convolution padding="same" (padding=dilation * (kernel_size - 1) // 2 for an odd '
        'kernel).',
        "Give padding=2: H_out = floor((30 + 2*2 - 1*(3 - 1) - 1) / 1 + 1) = 32.")
    assert error.chain[0] == "node n0 (conv) relation: out[2] = 30"
    assert GENERIC not in error.remedies
    for fixed in (source.replace("kernel_size=3)", 'kernel_size=3, padding="same")'),
                  source.replace("kernel_size=3)", "kernel_size=3, padding=1)")):
        plan = hndl.resolve(fixed, input_shape=("B", 3, 32, 32), output_shape=("B", 16, 32, 32), registry=images)
        assert plan.nodes[2].output_shapes["out"] == ("B", 16, 32, 32)


def test_padding_same_on_a_strided_conv_is_refused_as_torch_refuses_it(images):
    error = failure(lambda: hndl.resolve('conv(8, kernel_size=3, stride=2, padding="same")',
                                         input_shape=("B", 3, 32, 32), output_shape=("B", 8, 16, 16),
                                         registry=images))
    assert error.code == "E_ARGUMENT" and "padding=1" in error.remedies[0]


@pytest.mark.parametrize("source, node, line", [("linear(100)", "n0", 1),
                                                ("linear(100)\nrelu()\nlinear(100)", "n2", 3)])
def test_a_literal_width_that_conflicts_with_the_contract_is_named_and_omitting_it_suggested(basic, source, node, line):
    """Item 3: the literal's node, argument and value, and the width the graph requires instead."""
    error = failure(lambda: hndl.resolve(source, input_shape=("B", 64), output_shape=("B", 10), registry=basic))
    assert error.code == "E_CONSTRAINT" and error.location.node == node
    assert error.remedies == (f"Omit out_features=100 at node {node} (linear, line {line}): the rest of the graph "
                              "requires out_features 10 there, and an omitted out_features is inferred from what "
                              "consumes the result.",)


def test_two_literals_that_meet_are_both_named(basic):
    source = "a = linear(x, 100)\nb = linear(y, 10)\nadd(a, b)"
    error = failure(lambda: hndl.resolve(source, input_shape={"x": ("B", 64), "y": ("B", 64)},
                                         output_shape=("B", 10), registry=basic))
    assert [remedy.split(":")[0] for remedy in error.remedies] == [
        "Omit out_features=100 at node n0 (linear, line 1), or change it",
        "Omit out_features=10 at node n1 (linear, line 2), or change it"]


def test_a_literal_that_is_only_a_premise_is_not_named(images):
    """out_channels=16 is read by the conv's relation but is no fix for its spatial miss."""
    error = failure(lambda: hndl.resolve("conv(16, kernel_size=3, stride=2)", input_shape=("B", 3, 32, 32),
                                         output_shape=("B", 16, 32, 32), registry=images))
    assert not any("out_channels" in remedy for remedy in error.remedies)


@pytest.mark.parametrize("source, first", [
    ("layer_norm()", "To act on the channels of [B, C, H, W] at every position, write channel_layer_norm() instead "
                     "of layer_norm: it normalizes the C channels at each position of [B, C, H, W], like ConvNeXt's "
                     "LayerNorm2d."),
    ("linear()", "To act on the channels of [B, C, H, W] at every position, write conv(kernel_size=1) instead of "
                 "linear: it applies one learned C_in -> C_out map at each position of [B, C, H, W] (a 1x1 "
                 "convolution)."),
])
def test_a_last_axis_operator_on_an_image_names_the_channel_operator(images, source, first):
    """Item 5: layer_norm() and linear on [B, C, H, W] name channel_layer_norm and the 1x1 conv."""
    error = failure(lambda: hndl.resolve(source, input_shape=("B", 8, 4, 4), output_shape=("B", 8, 4, 4),
                                         registry=images))
    assert error.code == "E_CONSTRAINT"
    alias = source.split("(")[0]
    assert error.remedies == (first, f"To act on all C*H*W features of each example, insert flatten() before {alias}.")
    replacement = first.split("write ")[1].split(" instead")[0]
    assert hndl.resolve(replacement, input_shape=("B", 8, 4, 4), output_shape=("B", 8, 4, 4), registry=images)


def test_a_registry_without_the_channel_operator_does_not_name_it(basic):
    error = failure(lambda: hndl.resolve("layer_norm()", input_shape=("B", 8, 4, 4), output_shape=("B", 8, 4, 4),
                                         registry=basic))
    assert error.remedies == ("To act on all C*H*W features of each example, insert flatten() before layer_norm.",)
