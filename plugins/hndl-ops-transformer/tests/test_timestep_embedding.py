"""timestep_embedding@1: declaration, dims given or inferred from the output contract, numerics
bit for bit against diffusers' get_timestep_embedding and Timesteps (even and odd widths, both
orders, shift, scale, max_period; integer and fractional timesteps), the non-persistent float32
frequency buffer and the output dtype under dtype moves, float64 gradcheck and gradgradcheck,
the harness, and every error code it raises."""

import pytest
import torch
from diffusers.models.embeddings import Timesteps, get_timestep_embedding

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_transformer.timestep_embedding import TimestepEmbedding, timestep_frequencies


def _fails(source, input_shape, output_shape, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    return error.value


def _embedding(dims, input_dtype="int64", dtype=None, **args):
    text = "".join(f", {name}={value!r}" for name, value in args.items())
    model = network(f"timestep_embedding({dims}{text})", input_shape=("B", 1), output_shape=("B", dims),
                    input_dtype=input_dtype, device="cpu", **({"dtype": dtype} if dtype else {}))
    return model, model.nodes.n_n0


def test_declaration():
    spec = spec_of(TimestepEmbedding)
    assert spec.alias == "timestep_embedding" and spec.qualified == "timestep_embedding@1"
    assert spec.category == "embedding"
    assert spec.summary and spec.docstring.strip() and spec.examples and spec.reference is not None
    assert spec.positional_args == ("dims",)
    assert spec.args["dims"].inferable and spec.args["dims"].dim == "D"
    defaults = {name: arg.default for name, arg in spec.args.items() if name != "dims"}
    assert defaults == {"flip_sin_to_cos": False, "downscale_freq_shift": 1.0, "scale": 1.0, "max_period": 10000}
    assert all(arg.help for arg in spec.args.values())
    assert str(spec.shape) == "t[B, 1]:any -> out[B, D]"


def test_check_operator():
    check_operator(TimestepEmbedding)


def test_dims_is_inferred_from_the_output_contract():
    node = hndl.resolve("timestep_embedding()", input_shape=("B", 1), output_shape=("B", 12),
                        input_dtype="int64").nodes[0]
    assert node.args["dims"] == 12 and node.provenance["dims"] == "inferred"


@pytest.mark.parametrize("input_dtype", ["int64", "int32", "float32"])
def test_any_numeric_timestep_dtype_is_accepted(input_dtype):
    model, _ = _embedding(8, input_dtype=input_dtype)
    t = torch.tensor([[3], [999]]).to(getattr(torch, input_dtype))
    out = model(t)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, get_timestep_embedding(t.reshape(-1), 8), rtol=0, atol=0)


@pytest.mark.parametrize("dims", [32, 33, 7])
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_matches_diffusers_timesteps_bit_for_bit(dims, flip, shift):
    model, layer = _embedding(dims, flip_sin_to_cos=flip, downscale_freq_shift=shift)
    t = torch.tensor([0, 1, 17, 500, 999])
    ours = model(t[:, None])
    theirs = Timesteps(dims, flip, shift)(t)
    assert ours.shape == (5, dims)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    torch.testing.assert_close(ours, spec_of(TimestepEmbedding).reference(layer)(t[:, None]), rtol=0, atol=0)


def test_scale_and_max_period_and_fractional_timesteps_match_get_timestep_embedding():
    model, _ = _embedding(10, input_dtype="float32", scale=2.5, max_period=500, downscale_freq_shift=0.5)
    t = torch.tensor([0.25, 3.5, 40.125])
    expected = get_timestep_embedding(t, 10, downscale_freq_shift=0.5, scale=2.5, max_period=500)
    torch.testing.assert_close(model(t[:, None]), expected, rtol=0, atol=0)


def test_frequencies_are_a_non_persistent_float32_buffer():
    model, layer = _embedding(16, dtype="bfloat16")
    assert not list(layer.parameters()) and model.state_dict() == {}
    assert [name for name, _ in layer.named_buffers()] == ["frequencies"]
    assert layer.frequencies.dtype == torch.float32
    assert torch.equal(layer.frequencies, timestep_frequencies(16, 1.0, 10000))


def test_the_output_follows_the_compute_dtype_computed_in_float32():
    t = torch.tensor([[5], [700]])
    low, layer = _embedding(16, dtype="bfloat16")
    out = low(t)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, get_timestep_embedding(t.reshape(-1), 16).to(torch.bfloat16))  # as UNet2DModel casts
    layer.to("cpu")  # a device move keeps the output dtype
    assert low(t).dtype == torch.bfloat16
    low.float()
    assert layer.frequencies.dtype == torch.float32 and low(t).dtype == torch.float32
    low.half()
    assert low(t).dtype == torch.float16


def test_forward_is_deterministic():
    model, _ = _embedding(8)
    t = torch.tensor([[4], [9]])
    model.train()
    first = model(t)
    model.eval()
    assert torch.equal(first, model(t))


def test_float64_gradcheck_and_gradgradcheck_in_a_fractional_timestep():
    _, layer = _embedding(9, input_dtype="float32", flip_sin_to_cos=True)
    layer = layer.double()
    t = torch.tensor([[0.5], [2.25]], dtype=torch.float64, requires_grad=True)
    assert layer(t).dtype == torch.float64
    assert torch.autograd.gradcheck(layer, (t,))
    assert torch.autograd.gradgradcheck(layer, (t,))


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["timestep_embedding(0)", "timestep_embedding(8.0)",
                                    "timestep_embedding(2)", "timestep_embedding(3, downscale_freq_shift=1.0)",
                                    "timestep_embedding(8, max_period=0)", "timestep_embedding(8, flip_sin_to_cos=1)",
                                    "timestep_embedding(8, scale='x')", "timestep_embedding(8, period=10)"])
def test_invalid_arguments_are_argument_errors(source):
    dims = 8 if "(8" in source else 2
    assert _fails(source, ("B", 1), ("B", dims), input_dtype="int64").code == "E_ARGUMENT"


def test_a_degenerate_inferred_width_is_a_constraint_error():
    error = _fails("timestep_embedding()", ("B", 1), ("B", 3), input_dtype="int64")
    assert error.code == "E_CONSTRAINT" and "dims=3" in error.message
    assert hndl.resolve("timestep_embedding(downscale_freq_shift=0.0)", input_shape=("B", 1), output_shape=("B", 3),
                        input_dtype="int64").nodes[0].args["dims"] == 3


def test_a_width_of_one_is_a_single_zero_as_in_diffusers():
    model, _ = _embedding(1, downscale_freq_shift=0.0)
    t = torch.tensor([[3], [8]])
    torch.testing.assert_close(model(t), get_timestep_embedding(t.reshape(-1), 1, downscale_freq_shift=0),
                               rtol=0, atol=0)
    assert torch.equal(model(t), torch.zeros(2, 1))


def test_direct_construction_refuses_a_degenerate_width():
    with pytest.raises(HNDLError) as error:
        TimestepEmbedding(2)
    assert error.value.code == "E_ARGUMENT"


def test_contradicting_contracts_are_constraint_errors():
    assert _fails("timestep_embedding(8)", ("B", 1), ("B", 6), input_dtype="int64").code == "E_CONSTRAINT"
    assert _fails("timestep_embedding(8)", ("B", 2), ("B", 8), input_dtype="int64").code == "E_CONSTRAINT"
    assert _fails("timestep_embedding(8)", ("B", 1, 1), ("B", 8), input_dtype="int64").code == "E_CONSTRAINT"
