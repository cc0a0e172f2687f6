"""Issue 30 items 1 and 6: a call written the way torch writes the layer either means what it means in
torch, or fails with an HNDLError whose remedy names the HNDL spelling; never a silent other meaning.

The audit table below lists every first-party operator whose alias is a torch layer's (or close to
one) with torch's positional spelling. Before this change ``layer_norm(64)`` resolved with
``eps=64.0`` (and ``rms_norm(64)``, ``channel_layer_norm(64)``, ``patch_merging(96)``,
``layer_scale(64)`` likewise); the refusals and their remedies are new, so these tests fail on the
old code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import TorchSpelling
from hndl.torch import network
from hndl.suggestions import operator_remedies, synonym_remedy


def _resolve(source, input_shape, output_shape, **kwargs):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)


def _refusal(source, input_shape, output_shape, **kwargs) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        _resolve(source, input_shape, output_shape, **kwargs)
    return caught.value


def _first_args(plan) -> dict:
    return dict(plan.nodes[0].args)


# --------------------------------------------------------------------------------------
# The audit: torch's positional spelling that HNDL reads the same way (checked, not silent).
# --------------------------------------------------------------------------------------

SAME_MEANING = [
    # (HNDL source written as torch writes it, input, output, the arguments it must mean)
    ("softmax(-1)", ("B", 3, 8), ("B", 3, 8), {"dim": -1}),                 # nn.Softmax(dim)
    ("log_softmax(-1)", ("B", 3, 8), ("B", 3, 8), {"dim": -1}),             # nn.LogSoftmax(dim)
    ("dropout(0.1)", ("B", 8), ("B", 8), {"p": 0.1}),                       # nn.Dropout(p)
    ("leaky_relu(0.2)", ("B", 8), ("B", 8), {"negative_slope": 0.2}),       # nn.LeakyReLU(negative_slope)
    ("hardtanh(0, 6)", ("B", 8), ("B", 8), {"min_val": 0.0, "max_val": 6.0}),  # nn.Hardtanh(min_val, max_val)
    ("gelu('tanh')", ("B", 8), ("B", 8), {"approximate": "tanh"}),          # nn.GELU(approximate)
    ("group_norm(2)", ("B", 8, 4, 4), ("B", 8, 4, 4), {"num_groups": 2}),   # nn.GroupNorm(num_groups, ...)
    ("max_pool(2)", ("B", 3, 8, 8), ("B", 3, 4, 4), {"kernel_size": (2, 2), "stride": (2, 2)}),  # stride=kernel
    ("avg_pool(2)", ("B", 3, 8, 8), ("B", 3, 4, 4), {"kernel_size": (2, 2), "stride": (2, 2)}),
    ("max_pool1d(2)", ("B", 3, 8), ("B", 3, 4), {"kernel_size": 2, "stride": 2}),
    ("avg_pool1d(2)", ("B", 3, 8), ("B", 3, 4), {"kernel_size": 2, "stride": 2}),
    ("adaptive_avg_pool(1)", ("B", 3, 8, 8), ("B", 3, 1, 1), {"output_size": (1, 1)}),
    ("adaptive_avg_pool1d(1)", ("B", 3, 8), ("B", 3, 1), {"output_size": 1}),
    ("transpose(1, 2)", ("B", 3, 8), ("B", 8, 3), {"dim0": 1, "dim1": 2}),  # torch.transpose(x, dim0, dim1)
    ("transpose(-1, -2)", ("B", 3, 8), ("B", 8, 3), {"dim0": -1, "dim1": -2}),
    ("unsqueeze(1)", ("B", 3), ("B", 1, 3), {"dim": 1}),
    ("squeeze(-1)", ("B", 3, 1), ("B", 3), {"dim": -1}),
    ("mean(1)", ("B", 3, 8), ("B", 8), {"dim": 1, "keepdim": False}),       # torch.mean(x, dim, keepdim)
    ("max(-1)", ("B", 3, 8), ("B", 3), {"dim": -1, "keepdim": False}),
    ("select(1, 0)", ("B", 3, 8), ("B", 8), {"dim": 1, "index": 0}),        # torch.select(x, dim, index)
    ("stochastic_depth(0.1, 'row')", ("B", 8), ("B", 8), {"p": 0.1, "mode": "row"}),  # StochasticDepth(p, mode)
    ("upsample(scale_factor=2)", ("B", 3, 4, 4), ("B", 3, 8, 8), {"scale_factor": 2}),
    ("layer_norm(1e-6)", ("B", 8), ("B", 8), {"eps": 1e-6}),                # a float is eps, as before
    ("rms_norm(1e-5)", ("B", 8), ("B", 8), {"eps": 1e-5}),
    ("timestep_embedding(32)", ("B", 1), ("B", 32), {"dims": 32}),          # diffusers Timesteps(num_channels)
]


@pytest.mark.parametrize("source, input_shape, output_shape, meaning", SAME_MEANING, ids=[c[0] for c in SAME_MEANING])
def test_a_torch_spelling_hndl_accepts_means_what_it_means_in_torch(source, input_shape, output_shape, meaning):
    args = _first_args(_resolve(source, input_shape, output_shape))
    assert {name: args[name] for name in meaning} == meaning


def test_embedding_takes_torchs_order():
    args = _first_args(_resolve("embedding(10, 4)", ("B", 3), ("B", 3, 4), input_dtype="int64"))
    assert args["num_embeddings"] == 10 and args["embedding_dim"] == 4


# --------------------------------------------------------------------------------------
# The audit: torch's positional spelling that would mean something else here is refused, and the
# remedy names the HNDL spelling.
# --------------------------------------------------------------------------------------

REFUSED = [
    # (torch-style source, input, output, the field, a phrase of the remedy that names the fix)
    ("layer_norm(64)", ("B", 64), ("B", 64), "eps", "layer_norm()"),
    ("layer_norm(64)", ("B", 3, 64), ("B", 3, 64), "eps", "layer_norm(eps=1e-05)"),
    ("rms_norm(64)", ("B", 64), ("B", 64), "eps", "rms_norm()"),
    ("rms_norm(64, 1e-6)", ("B", 64), ("B", 64), None, "rms_norm()"),
    ("channel_layer_norm(64)", ("B", 64, 4, 4), ("B", 64, 4, 4), "eps", "channel_layer_norm()"),
    ("patch_merging(96)", ("B", 96, 4, 4), ("B", 192, 2, 2), "eps", "patch_merging()"),
    ("layer_scale(64)", ("B", 64), ("B", 64), "init_value", "layer_scale(init_value=1e-05)"),
    ("batch_norm(64)", ("B", 64, 4, 4), ("B", 64, 4, 4), None, "batch_norm()"),
    ("batch_norm1d(64)", ("B", 64, 4), ("B", 64, 4), None, "batch_norm1d()"),
    ("instance_norm(64)", ("B", 64, 4, 4), ("B", 64, 4, 4), None, "instance_norm()"),
    ("group_norm(2, 8)", ("B", 8, 4, 4), ("B", 8, 4, 4), None, "group_norm(32) here"),
    ("flatten(1)", ("B", 3, 8), ("B", 24), None, "flatten()"),
    ("max_pool(3, 2, 1)", ("B", 3, 8, 8), ("B", 3, 4, 4), None, "max_pool(3, stride=2, padding=1)"),
    ("avg_pool(3, 2, 1)", ("B", 3, 8, 8), ("B", 3, 4, 4), None, "avg_pool(3, stride=2, padding=1)"),
    ("max_pool1d(3, 2, 1)", ("B", 3, 8), ("B", 3, 4), None, "max_pool1d(3, stride=2, padding=1)"),
    ("avg_pool1d(3, 2, 1)", ("B", 3, 8), ("B", 3, 4), None, "avg_pool1d(3, stride=2, padding=1)"),
    ("squeeze_excitation(8)", ("B", 32, 4, 4), ("B", 32, 4, 4), None, "squeeze_excitation(squeeze_channels=8)"),
    ("attention(16, 2)", ("B", 3, 16), ("B", 3, 16), None, "attention(8) here"),
    ("transformer_block(16, 2)", ("B", 3, 16), ("B", 3, 16), None, "transformer_block(8, hidden=2048)"),
    ("swin_block(16, 2, 2, 1)", ("B", 16, 4, 4), ("B", 16, 4, 4), None, "swin_block(3, 7, 3)"),
    ("window_attention(16, 2, 1, 2)", ("B", 16, 4, 4), ("B", 16, 4, 4), None, "window_attention(3, 7, 3)"),
    ("reshape(-1, 16)", ("B", 64), ("B", 4, 16), "shape", "reshape(16)"),
    ("reshape(4, -1)", ("B", 64), ("B", 4, 16), "shape", "reshape(4)"),
    ("a, b = chunk(2, -1)\nout = a", ("B", 3, 8), ("B", 3, 4), "dim", "chunk(2, 2)"),
    ("a, b = split(2, -1)\nout = a", ("B", 3, 8), ("B", 3, 2), "dim", "split(2, 2)"),
    ("a, b = split(2, 0)\nout = a", ("B", 3, 8), ("B", 3, 2), "dim", "split(2, 1)"),
    ("a, b = split([2, 6], 1)\nout = a", ("B", 8), ("B", 2), "size", "split(2, dim)"),
    ("a = linear(4)\nb = linear(4)\nconcat(a, b, 1)", ("B", 3), ("B", 8), None, "concat(a, b, axis=1)"),
    ("a = linear(4)\nb = linear(4)\nconcat(a, b, dim=1)", ("B", 3), ("B", 8), "dim", "axis="),
    ("upsample(size=8)", ("B", 3, 4, 4), ("B", 3, 8, 8), "size", "upsample(scale_factor=2)"),
    ("layer_norm(normalized_shape=8)", ("B", 8), ("B", 8), "normalized_shape", "layer_norm()"),
    ("relu(inplace=True)", ("B", 8), ("B", 8), "inplace", "drop inplace="),
]


@pytest.mark.parametrize("source, input_shape, output_shape, field, fix", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_torch_spelling_with_another_meaning_here_is_refused_naming_the_fix(source, input_shape, output_shape,
                                                                             field, fix):
    error = _refusal(source, input_shape, output_shape)
    assert error.code == "E_ARGUMENT"
    if field is not None:
        assert error.location.field == field
    assert any(fix in remedy for remedy in error.remedies), error.remedies


def test_the_refusal_of_layer_norm_64_says_what_it_would_have_meant():
    """The old code resolved layer_norm(64) with eps=64.0 and outputs off by up to 1.76."""
    error = _refusal("layer_norm(64)", ("B", 64), ("B", 64))
    assert "eps=64.0" in error.message and "nn.LayerNorm(normalized_shape" in error.message
    assert error.location.line == 1


def test_the_callable_frontend_refuses_the_same_spellings():
    def layer_normed(x):
        return hndl.ops.layer_norm(x, 64)

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(layer_normed, input_shape=("B", 64), output_shape=("B", 64))
    assert caught.value.code == "E_ARGUMENT" and "layer_norm()" in caught.value.remedies[0]


#: The operators of the audit above whose declarations carry the torch spelling and its hint.
AUDITED = ("layer_norm", "rms_norm", "channel_layer_norm", "patch_merging", "layer_scale", "adaptive_norm",
           "batch_norm", "batch_norm1d", "instance_norm", "group_norm", "embedding", "flatten", "max_pool",
           "avg_pool", "max_pool1d", "avg_pool1d", "upsample", "concat", "squeeze_excitation", "attention",
           "transformer_block", "swin_block", "window_attention")


def test_every_audited_operator_is_registered_and_takes_a_torch_signature():
    registry = Registry.builtins()
    assert set(AUDITED) <= set(registry.aliases())
    for spec in registry:
        spelling = spec.torch
        if spelling is None or not spelling.hint:
            continue
        assert "(" in spelling.signature and spec.alias in spelling.hint
        if spelling.width_first:  # the first positional HNDL argument is a float: an int is a width
            assert spec.args[spec.positional_args[0]].type is float
    for alias in AUDITED:
        assert registry.get(alias).torch.hint, alias


def test_the_refusal_is_for_first_party_operators_only():
    """A user's own operator that shares a torch name keeps its own positional meaning."""
    registry = Registry()

    @registry.operator("layer_norm", identity="mine.layer_norm", summary="Scale by a constant.",
                       shape="x[B, ...] -> out[B, ...]",
                       args={"eps": hndl.Arg(float, 1.0, help="The constant.")})
    class Scale(nn.Module):
        """Multiplies by eps."""

        def __init__(self, eps: float = 1.0) -> None:
            super().__init__()
            self.eps = eps

        def forward(self, x):
            return x * self.eps

    plan = _resolve("layer_norm(64)", ("B", 4), ("B", 4), registry=registry)
    assert _first_args(plan)["eps"] == 64.0


def test_a_float_eps_still_computes_torchs_layer_norm():
    model = network("layer_norm(1e-3)", input_shape=("B", 6), output_shape=("B", 6), device="cpu")
    x = torch.randn(4, 6)
    expected = F.layer_norm(x, (6,), eps=1e-3)
    torch.testing.assert_close(model(x), expected)


# --------------------------------------------------------------------------------------
# Item 6: names researchers type.
# --------------------------------------------------------------------------------------

NAMES = [
    ("silu()", "swish()"),
    ("drop_path(0.1)", "stochastic_depth(p)"),
    ("conv2d(8)", "HNDL calls conv2d conv"),
    ("Conv2d(8)", "HNDL calls Conv2d conv"),
    ("BatchNorm2d()", "batch_norm()"),
    ("LayerNorm()", "layer_norm"),
    ("SiLU()", "swish()"),
    ("cat(x, x)", "concat(a, b, axis=1)"),
]


@pytest.mark.parametrize("source, fix", NAMES, ids=[c[0] for c in NAMES])
def test_a_torch_name_names_the_hndl_operator(source, fix):
    error = _refusal(source, ("B", 3, 4, 4), ("B", 8, 4, 4))
    assert error.code == "E_OPERATOR"
    assert fix in error.remedies[0], error.remedies


def test_registry_get_and_ops_name_the_hndl_operator():
    registry = Registry.builtins()
    with pytest.raises(HNDLError) as caught:
        registry.get("silu")
    assert caught.value.remedies[0] == "HNDL calls silu swish: write swish()."
    with pytest.raises(HNDLError) as caught:
        registry.ops.drop_path
    assert "stochastic_depth" in caught.value.remedies[0]


def test_a_synonym_is_offered_only_for_an_operator_the_registry_has():
    """The torch names are the declarations' own (torch=TorchSpelling(names=...)): a registry
    answers for the operators it holds, and reads no pack it was not built from."""
    basic = Registry.from_packs("basic")
    assert synonym_remedy("silu", basic) == "HNDL calls silu swish: write swish()."
    assert synonym_remedy("conv2d", basic) is None  # conv is the vision pack's, not imported for a hint
    assert synonym_remedy("conv2d", Registry.builtins()) == (
        "HNDL calls conv2d conv: write conv(out_channels, kernel_size=3, padding=1).")
    assert synonym_remedy("silu", Registry()) is None
    assert synonym_remedy("no_such_thing", basic) is None and synonym_remedy(3, basic) is None
    assert synonym_remedy("x" * 10_000, basic) is None
    named = {name for spec in Registry.builtins() if spec.torch is not None for name in spec.torch.names}
    assert {"silu", "drop_path", "conv2d", "batchnorm2d", "cat", "interpolate", "mha", "gelu_tanh",
            "se", "mlp", "swiglu"} <= named


def test_the_spec_example_registering_its_own_silu_keeps_working():
    """§8: registry = Registry.builtins(); @registry.operator("silu", identity="example.silu") ..."""
    registry = Registry.builtins()

    @registry.operator("silu", identity="example.silu", version=1, summary="Sigmoid linear unit, x * sigmoid(x).",
                       shape="x[B, ...] -> out[B, ...]")
    class SiLU(nn.SiLU):
        """Out-of-place SiLU."""

    model = network("linear(64)\nsilu()\nlinear()", input_shape=("B", 128), output_shape=("B", 10),
                         registry=registry, device="cpu")
    assert model(torch.randn(2, 128)).shape == (2, 10)
    assert "silu" not in Registry.builtins()  # nothing leaked into the shared built-ins


def test_unknown_names_keep_their_old_remedies_when_no_synonym_applies():
    basic = Registry.from_packs("basic")
    assert operator_remedies("lienar", basic, "F") == ("Did you mean linear?", "F")
    assert operator_remedies("no_such_operator_anywhere", basic, "F") == ("F",)


def test_squeeze_excitation_8_names_squeeze_channels():
    error = _refusal("squeeze_excitation(8)", ("B", 32, 4, 4), ("B", 32, 4, 4))
    assert "squeeze_excitation(squeeze_channels=8)" in error.remedies[0]
    plan = _resolve("squeeze_excitation(squeeze_channels=8)", ("B", 32, 4, 4), ("B", 32, 4, 4))
    assert _first_args(plan)["squeeze_channels"] == 8


def test_reshape_minus_one_says_the_omitted_factor_is_inferred():
    error = _refusal("reshape(-1, 16)", ("B", 64), ("B", 4, 16))
    assert "inferred" in error.message and "reshape(16)" in error.remedies[0]
    # The spelling the remedy names resolves, the factor inferred from the element count.
    plan = _resolve("reshape(4)", ("B", 64), ("B", 4, 16))
    assert plan.nodes[0].outputs == ("out",)


def test_a_list_of_tensors_in_a_callable_says_pass_them_as_separate_arguments():
    def joined(x):
        a = hndl.ops.linear(x, 4)
        b = hndl.ops.linear(x, 4)
        return hndl.ops.concat([a, b], axis=1)

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(joined, input_shape=("B", 3), output_shape=("B", 8))
    error = caught.value
    assert error.code == "E_ARGUMENT" and "list of 2 tensors" in error.message
    assert error.remedies == ("Pass the tensors as separate arguments, not as one list: concat(a, b, axis=1), "
                              "or concat(*tensors, axis=1).",)

    def separate(x):
        return hndl.ops.concat(hndl.ops.linear(x, 4), hndl.ops.linear(x, 4), axis=1)

    assert hndl.resolve_callable(separate, input_shape=("B", 3), output_shape=("B", 8)) is not None


def test_a_list_of_tensors_in_configuration_names_the_separate_arguments():
    error = _refusal("a = linear(4)\nb = linear(4)\nconcat([a, b], axis=1)", ("B", 3), ("B", 8))
    assert error.code == "E_SYNTAX" and "concat(a, b, axis=1)" in error.remedies[0]


def test_torch_cat_in_a_capture_names_ops_concat():
    def joined(x):
        a = hndl.ops.linear(x, 4)
        return torch.cat([a, a], dim=1)

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(joined, input_shape=("B", 3), output_shape=("B", 8))
    assert caught.value.code == "E_CAPTURE" and "ops.concat(a, b, axis=1)" in caught.value.remedies[0]


# --------------------------------------------------------------------------------------
# Item 6: one spelling of the tanh GELU; torch's approximate="tanh" accepted everywhere.
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "feed_forward(approximate='tanh')",
    "feed_forward(activation='gelu', approximate='tanh')",
    "feed_forward(activation='gelu_tanh', approximate='tanh')",
])
def test_a_feed_forward_accepts_torchs_approximate_and_records_gelu_tanh(source):
    plan = _resolve(source, ("B", 3, 8), ("B", 3, 8))
    spelled = _resolve("feed_forward(activation='gelu_tanh')", ("B", 3, 8), ("B", 3, 8))
    assert _first_args(plan) == _first_args(spelled)
    assert _first_args(plan)["activation"] == "gelu_tanh"


def test_a_transformer_block_accepts_torchs_approximate():
    plan = _resolve("transformer_block(2, approximate='tanh')", ("B", 3, 8), ("B", 3, 8))
    assert _first_args(plan)["activation"] == "gelu_tanh"
    exact = _resolve("transformer_block(2, approximate='none')", ("B", 3, 8), ("B", 3, 8))
    assert _first_args(exact)["activation"] == "gelu"


def test_the_tanh_gelu_computes_torchs_approximate_tanh_in_gelu_and_in_the_block():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    gelu = network("gelu(approximate='tanh')", input_shape=("B", 3, 8), output_shape=("B", 3, 8), device="cpu")
    torch.testing.assert_close(gelu(x), F.gelu(x, approximate="tanh"))
    block = network("feed_forward(approximate='tanh')", input_shape=("B", 3, 8), output_shape=("B", 3, 8),
                         device="cpu")
    ff = next(module for module in block.modules() if hasattr(module, "fc1"))
    expected = F.linear(F.gelu(F.linear(x, ff.fc1.weight, ff.fc1.bias), approximate="tanh"),
                        ff.fc2.weight, ff.fc2.bias)
    torch.testing.assert_close(block(x), expected)


@pytest.mark.parametrize("source, phrase", [
    ("feed_forward(activation='relu', approximate='tanh')", "activation='gelu_tanh'"),
    ("feed_forward(activation='gelu_tanh', approximate='none')", "activation='gelu'"),
    ("feed_forward(approximate='fast')", "approximate='tanh'"),
    ("feed_forward(approximate=1)", "approximate='tanh'"),
])
def test_a_contradictory_approximate_is_refused_naming_the_fix(source, phrase):
    error = _refusal(source, ("B", 3, 8), ("B", 3, 8))
    assert error.code == "E_ARGUMENT" and error.location.field == "approximate"
    assert any(phrase in remedy for remedy in error.remedies), error.remedies


def test_an_operator_without_a_gelu_choice_still_refuses_approximate():
    error = _refusal("relu(approximate='tanh')", ("B", 8), ("B", 8))
    assert error.code == "E_ARGUMENT" and "no argument 'approximate'" in error.message


def test_unpacking_max_like_torch_says_it_returns_the_values_only():
    error = _refusal("values, indices = max(1)\nout = values", ("B", 3, 8), ("B", 8))
    assert error.code == "E_OUTPUT_ARITY"
    assert error.remedies == ("max has one output: assign it to one name, e.g. values = max(...). Unlike "
                              "torch.max(x, dim), which returns values and indices, max returns the values only.",)
    assert _first_args(_resolve("values = max(1)", ("B", 3, 8), ("B", 8))) == {"dim": 1, "keepdim": False}


def test_a_positional_overflow_without_a_torch_hint_names_the_keywords():
    error = _refusal("embedding(10, 4, 0)", ("B", 3), ("B", 3, 4), input_dtype="int64")
    assert error.code == "E_ARGUMENT"
    assert error.remedies[-1] == "Pass the remaining values by keyword: embedding(padding_idx=...)."
    error = _refusal("dropout(0.1, True)", ("B", 3), ("B", 3))
    assert error.remedies == ("dropout takes no other arguments: write dropout(p).",)


# --------------------------------------------------------------------------------------
# The hints are the declarations' own (operator(torch=TorchSpelling(...))): a user's operator may
# declare a torch spelling and gets the same remedies; the core names no first-party operator.
# --------------------------------------------------------------------------------------

def _scaled_registry() -> Registry:
    registry = Registry.from_packs("basic")

    def habit(args):
        if args.get("factor", 1.0) < 0:
            return ("factor", "scaled(factor<0): mylib flips the sign first", ("Write flip() then scaled().",))
        return None

    @registry.operator(
        "scaled", identity="mine.scaled", summary="Multiply by a constant factor.",
        shape="x[B, ...] -> out[B, ...]",
        args={"factor": hndl.Arg(float, 1.0, help="The factor.")},
        torch=TorchSpelling(
            signature="mylib.Scale(width, factor=1.0)",
            hint="scaled reads the width from its input: mylib's Scale(64) is scaled() here.",
            width_first=True,
            names=("Scale", "mylib_scale"),
            call="scaled(factor)",
            keywords={"scale": "scaled spells mylib's scale= as factor=: write scaled(factor=...)."},
            unpack="Unlike mylib.scale, scaled returns the product only.",
            habit=habit,
        ),
    )
    class Scaled(nn.Module):
        """Multiplies by factor."""

        def __init__(self, factor: float = 1.0) -> None:
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return x * self.factor

    return registry


def test_a_custom_operator_declaring_a_torch_spelling_gets_its_hints():
    registry = _scaled_registry()
    contract = dict(input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    error = _refusal("scaled(64)", **contract)  # the transcribed width, refused rather than read as factor=64.0
    assert error.code == "E_ARGUMENT" and error.location.field == "factor"
    assert "mylib.Scale(width, factor=1.0)" in error.message and "factor=64.0" in error.message
    assert error.remedies == ("scaled reads the width from its input: mylib's Scale(64) is scaled() here.",)
    assert _first_args(_resolve("scaled(2.0)", **contract))["factor"] == 2.0
    error = _refusal("Scale(2.0)", **contract)
    assert error.code == "E_OPERATOR" and error.remedies[0] == "HNDL calls Scale scaled: write scaled(factor)."
    error = _refusal("scaled(scale=2.0)", **contract)
    assert error.remedies[0] == "scaled spells mylib's scale= as factor=: write scaled(factor=...)."
    error = _refusal("scaled(in_channels=4)", **contract)  # a declared torch spelling reads widths from inputs
    assert error.remedies[0] == "scaled reads that width from its input tensor: leave it out, e.g. scaled()."
    error = _refusal("scaled(factor=-1.0)", **contract)
    assert error.location.field == "factor" and error.remedies == ("Write flip() then scaled().",)
    error = _refusal("scaled(1.0, 2.0)", **contract)
    assert error.remedies[0] == "scaled reads the width from its input: mylib's Scale(64) is scaled() here."
    error = _refusal("a, b = scaled(2.0)\nout = a", **contract)
    assert error.remedies[0].endswith(" Unlike mylib.scale, scaled returns the product only.")
    assert synonym_remedy("mylib_scale", registry) == "HNDL calls mylib_scale scaled: write scaled(factor)."


def test_a_torch_function_in_a_capture_is_named_from_the_capture_registrys_declarations():
    registry = _scaled_registry()

    def scaled(x):
        return torch.cat([x, x], dim=1)

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(scaled, input_shape=("B", 3), output_shape=("B", 6), registry=registry)
    assert caught.value.remedies[0] == "torch.cat is ops.concat(a, b, axis=1) in a capture."
    with pytest.raises(HNDLError) as caught:  # a registry without concat names no concat
        hndl.resolve_callable(scaled, input_shape=("B", 3), output_shape=("B", 6), registry=Registry())
    assert not any("ops.concat" in remedy for remedy in caught.value.remedies)


def test_the_core_names_no_first_party_operator():
    """The torch-habit tables left hndl/suggestions.py and the configuration interpreter: no
    first-party alias is spelled there, and no first-party module is named."""
    root = Path(hndl.__file__).parent
    sources = {path: path.read_text() for path in (root / "suggestions.py", root / "frontends" / "config" /
                                                   "interpret.py")}
    for spec in Registry.builtins():
        for path, text in sources.items():
            assert f'"{spec.alias}"' not in text and f"'{spec.alias}'" not in text, (spec.alias, path)
    for path, text in sources.items():
        assert "hndl_ops_" not in text, path


def test_the_catalog_page_shows_the_declared_torch_spelling():
    from hndl.docs.catalog import operator_page

    registry = Registry.builtins()
    page = operator_page(registry.get("swish"), "basic", registry)
    assert "- Torch: `nn.SiLU()`\n- Torch names: `silu`, `sigmoid_linear_unit`\n" in page
    assert "- Torch" not in operator_page(registry.get("channel_add"), "basic", registry)  # declares none


@pytest.mark.parametrize("source, input_shape, output_shape", [
    ("relu(in_channels=8)", ("B", 8), ("B", 8)),
    ("conv(8, kernel_size=3, padding=1, num_channels=3)", ("B", 3, 4, 4), ("B", 8, 4, 4)),
    ("attention(2, embed_dim=8)", ("B", 3, 8), ("B", 3, 8)),
    ("residual_block(num_features=8)", ("B", 8, 4, 4), ("B", 8, 4, 4)),
])
def test_a_torch_width_keyword_is_told_the_width_comes_from_the_input(source, input_shape, output_shape):
    error = _refusal(source, input_shape, output_shape)
    alias = source.split("(")[0]
    assert error.code == "E_ARGUMENT"
    assert error.remedies[0] == f"{alias} reads that width from its input tensor: leave it out, e.g. {alias}()."
