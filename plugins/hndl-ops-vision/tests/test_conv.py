"""conv2d@2 (alias conv): the §6 equation per axis, the down2 policy, interval inversion,
channel inference, numerics against a handwritten nn.Conv2d, and every error code."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.conv import Conv


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def _equation(extent, k, s, p, d):
    return (extent + 2 * p - d * (k - 1) - 1) // s + 1


def test_declaration():
    spec = spec_of(Conv)
    assert spec.alias == "conv" and spec.qualified == "conv2d@2"
    assert spec.positional_args == ("out_channels",)
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    defaults = {name: spec.args[name].default for name in ("stride", "padding", "dilation", "groups", "bias")}
    assert defaults == {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1, "bias": True}
    assert not spec.args["kernel_size"].inferable
    assert set(spec.policies) == {"down2"}
    assert spec.policies["down2"].identity == "spatial.down2_conv@1"


@pytest.mark.parametrize(
    "size, k, s, p, d",
    [
        ((9, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
        ((28, 28), (4, 4), (2, 2), (1, 1), (1, 1)),
        ((17, 12), (3, 5), (2, 3), (0, 2), (1, 1)),
        ((15, 16), (3, 2), (1, 2), (2, 0), (2, 3)),
        ((5, 11), (1, 1), (3, 4), (0, 0), (1, 1)),
    ],
)
def test_spec_equation_per_axis_matches_torch(size, k, s, p, d):
    expected = tuple(_equation(size[j], k[j], s[j], p[j], d[j]) for j in range(2))
    source = f"conv(4, kernel_size={k}, stride={s}, padding={p}, dilation={d})"
    # Forward: the output extents follow from the input alone (checked against the contract).
    plan = hndl.resolve(source, input_shape=("B", 3, *size), output_shape=("B", 4, *expected))
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 4, *expected)
    assert (node.args["kernel_size"], node.args["stride"], node.args["padding"], node.args["dilation"]) == (k, s, p, d)
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 4, *expected), device="cpu")
    assert model(torch.randn(2, 3, *size)).shape == (2, 4, *expected)
    # Backward: with stride 1 on both axes the inverse interval is one value and fixes an
    # omitted input; a larger stride leaves an interval of s values, which stays ambiguous.
    inverse = f"linear()\nreshape(3)\n{source}"
    if s == (1, 1):
        plan = hndl.resolve(inverse, input_shape=("B", 2), output_shape=("B", 4, *expected))
        assert plan.nodes[1].output_shapes["out"] == ("B", 3, *size)
    else:
        assert _fails(inverse, ("B", 2), ("B", 4, *expected)).code == "E_AMBIGUOUS"
    # A wrong output extent on either axis contradicts the equation.
    for axis in range(2):
        wrong = list(expected)
        wrong[axis] += 1
        assert _fails(source, ("B", 3, *size), ("B", 4, *wrong)).code == "E_CONSTRAINT"


def test_same_padding_preserves_size():
    plan = hndl.resolve(
        "conv(3, kernel_size=3, stride=1, padding=1)", input_shape=("B", 64, 32, 32), output_shape=("B", 3, 32, 32)
    )
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 3, 32, 32)
    assert node.args["in_channels"] == 64 and node.provenance["in_channels"] == "inferred"


def test_down2_policy_halves_and_records_its_requirements():
    plan = hndl.resolve('conv(64, policy="down2")', input_shape=("B", 1, 28, 28), output_shape=("B", 64, 14, 14))
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 64, 14, 14)
    assert node.args["kernel_size"] == (4, 4)
    assert node.args["stride"] == (2, 2)
    assert node.args["padding"] == (1, 1)
    assert node.args["dilation"] == (1, 1)
    assert node.args["groups"] == 1
    for name in ("kernel_size", "stride", "padding", "dilation", "groups"):
        assert node.provenance[name] == "policy"
    assert node.provenance["out_channels"] == "explicit"
    assert node.source["policy"] == "spatial.down2_conv@1"


def test_down2_policy_does_not_pick_an_input_from_its_interval():
    # out 8 with kernel 4, stride 2, padding 1 admits inputs 16 and 17: still ambiguous.
    error = _fails('linear()\nreshape(3)\nconv(8, policy="down2")', ("B", 10), ("B", 8, 8, 8))
    assert error.code == "E_AMBIGUOUS"


def test_explicit_value_agreeing_with_the_policy_is_kept_as_explicit():
    plan = hndl.resolve('conv(64, policy="down2", stride=2)', input_shape=("B", 1, 28, 28), output_shape=("B", 64, 14, 14))
    assert plan.nodes[0].args["stride"] == (2, 2)
    assert plan.nodes[0].provenance["stride"] == "explicit"


@pytest.mark.parametrize("extra", ["stride=1", "kernel_size=3", "padding=0", "groups=2", "dilation=2"])
def test_explicit_value_contradicting_the_policy_conflicts(extra):
    error = _fails(f'conv(64, policy="down2", {extra})', ("B", 2, 28, 28), ("B", 64, 14, 14))
    assert error.code == "E_POLICY_CONFLICT"


def test_undeclared_policy_conflicts():
    error = _fails('conv(64, policy="up2")', ("B", 1, 28, 28), ("B", 64, 14, 14))
    assert error.code == "E_POLICY_CONFLICT"


def test_missing_kernel_size_without_policy_is_an_argument_error():
    error = _fails("conv(64)", ("B", 1, 28, 28), ("B", 64, 28, 28))
    assert error.code == "E_ARGUMENT"
    assert error.location.field == "kernel_size"


def test_no_activation_shorthand():
    error = _fails('conv(8, kernel_size=3, activation="relu")', ("B", 1, 8, 8), ("B", 8, 6, 6))
    assert error.code == "E_ARGUMENT"


@pytest.mark.parametrize(
    "args",
    ["kernel_size=0", "kernel_size=-3", "kernel_size=3, stride=0", "kernel_size=3, padding=-1",
     "kernel_size=3, dilation=0", "kernel_size=3, groups=0", "kernel_size=(1, 2, 3)", "kernel_size=3, bias=1",
     "kernel_size=True"],
)
def test_invalid_arguments_are_argument_errors(args):
    error = _fails(f"conv(8, {args})", ("B", 2, 8, 8), ("B", 8, 6, 6))
    assert error.code == "E_ARGUMENT"


def test_stride_two_inverse_interval_stays_ambiguous():
    # kernel 3, stride 2, padding 1: an 8x8 output admits inputs 15 and 16; the reshape's
    # spatial size (and so the projection width) stays undetermined.
    error = _fails("linear()\nreshape(3)\nconv(5, kernel_size=3, stride=2, padding=1)", ("B", 10), ("B", 5, 8, 8))
    assert error.code == "E_AMBIGUOUS"


@pytest.mark.parametrize("padding, size", [(1, 8), (0, 10)])
def test_stride_one_interval_collapses_and_the_input_is_inferred(padding, size):
    plan = hndl.resolve(
        f"linear()\nreshape(3)\nconv(5, kernel_size=3, stride=1, padding={padding})", input_shape=("B", 10), output_shape=("B", 5, 8, 8)
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, size, size)
    assert plan.nodes[0].args["out_features"] == 3 * size * size


def test_two_intervals_intersect_to_one_input():
    # [15, 16] from kernel 3 / padding 1 and [16, 17] from kernel 2 intersect at 16.
    plan = hndl.resolve(
        "linear()\nr = reshape(3)\na = conv(r, 5, kernel_size=3, stride=2, padding=1)\n"
        "b = conv(r, 5, kernel_size=2, stride=2)\nadd(a, b)",
        input_shape=("B", 10),
        output_shape=("B", 5, 8, 8),
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 16, 16)


def test_disjoint_intervals_are_a_contradiction():
    # kernel 1, padding 5 makes outputs of at least 11; 9 admits no input.
    error = _fails("linear()\nreshape(3)\nconv(5, kernel_size=1, padding=5)", ("B", 3), ("B", 5, 9, 9))
    assert error.code == "E_CONSTRAINT"


def test_input_smaller_than_the_kernel_is_a_constraint_error():
    error = _fails("conv(5, kernel_size=5)", ("B", 3, 3, 3), ("B", 5, 1, 1))
    assert error.code == "E_CONSTRAINT"


def test_group_divisibility_of_input_channels():
    error = _fails("conv(8, kernel_size=3, groups=2)", ("B", 3, 8, 8), ("B", 8, 6, 6))
    assert error.code == "E_CONSTRAINT"


def test_group_divisibility_of_output_channels():
    error = _fails("conv(3, kernel_size=3, groups=2)", ("B", 4, 8, 8), ("B", 3, 6, 6))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("shape", [("B", 8), ("B", 3, 8)])
def test_non_image_rank_is_a_constraint_error(shape):
    error = _fails("conv(8, kernel_size=3)", shape, shape)
    assert error.code == "E_CONSTRAINT"


def test_out_channels_inferred_backward_from_the_output_contract():
    plan = hndl.resolve("conv(kernel_size=3)", input_shape=("B", 4, 8, 8), output_shape=("B", 7, 6, 6))
    node = plan.nodes[0]
    assert node.args["out_channels"] == 7
    assert node.provenance["out_channels"] == "inferred"


def test_out_channels_inferred_through_a_following_layer_width():
    plan = hndl.resolve("conv(kernel_size=3)\nflatten()", input_shape=("B", 4, 8, 8), output_shape=("B", 180))
    assert plan.nodes[0].args["out_channels"] == 5


def test_literal_out_channels_contradicting_the_contract_fails():
    error = _fails("conv(6, kernel_size=3)", ("B", 4, 8, 8), ("B", 7, 6, 6))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize(
    "source, in_shape, out_shape, kwargs",
    [
        ("conv(6, kernel_size=3, padding=1)", (3, 9, 7), (6, 9, 7), dict(kernel_size=3, padding=1)),
        ('conv(6, policy="down2")', (3, 8, 10), (6, 4, 5), dict(kernel_size=4, stride=2, padding=1)),
        ("conv(6, kernel_size=(3, 1), stride=(2, 1), dilation=(1, 2), groups=3, bias=False)",
         (3, 9, 7), (6, 4, 7), dict(kernel_size=(3, 1), stride=(2, 1), dilation=(1, 2), groups=3, bias=False)),
    ],
)
def test_numerics_against_a_handwritten_conv2d_forward_and_backward(source, in_shape, out_shape, kwargs):
    model = network(source, input_shape=("B", *in_shape), output_shape=("B", *out_shape), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.Conv2d(in_shape[0], out_shape[0], **kwargs)
    with torch.no_grad():
        reference.weight.copy_(layer.weight)
        if reference.bias is not None:
            reference.bias.copy_(layer.bias)
    assert (layer.bias is None) == (reference.bias is None)
    x = torch.randn(2, *in_shape, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out = model(x)
    expected = reference(x_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(
        out, F.conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding, layer.dilation, layer.groups)
    )
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
    if reference.bias is not None:
        torch.testing.assert_close(layer.bias.grad, reference.bias.grad)


def test_optimizer_step_matches_the_handwritten_layer():
    model = network("conv(4, kernel_size=3)", input_shape=("B", 2, 6, 6), output_shape=("B", 4, 4, 4), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.Conv2d(2, 4, 3)
    reference.load_state_dict(layer.state_dict())
    x = torch.randn(3, 2, 6, 6)
    for module, net in ((layer, model), (reference, reference)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        net(x).square().mean().backward()
        optimizer.step()
    torch.testing.assert_close(layer.weight, reference.weight)
    torch.testing.assert_close(layer.bias, reference.bias)


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("conv(3, kernel_size=1)", input_shape=("B", 2, 4, 4), output_shape=("B", 3, 4, 4), input_dtype="int64")
    assert error.value.code == "E_DTYPE"


def test_runtime_spatial_mismatch_is_a_runtime_error():
    model = network("conv(3, kernel_size=3)", input_shape=("B", 2, 8, 8), output_shape=("B", 3, 6, 6), device="cpu")
    with pytest.raises(HNDLError) as error:
        model(torch.randn(2, 2, 9, 9))
    assert error.value.code == "E_RUNTIME"


# -- conv@2: torch's padding strings (issue 30 item 2) ---------------------------------------------
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("k, d, size", [(3, 1, (9, 7)), (4, 1, (8, 8)), ((3, 5), (2, 1), (12, 10)), (1, 1, (5, 6))])
def test_same_padding_keeps_h_and_w_and_computes_what_torch_computes(k, d, size):
    source = f'conv(5, kernel_size={k}, dilation={d}, padding="same")'
    model = network(source, input_shape=("B", 3, *size), output_shape=("B", 5, *size), device="cpu")
    node = model.plan.nodes[0]
    assert node.args["padding"] == "same" and node.output_shapes["out"] == ("B", 5, *size)
    layer = model.nodes.n_n0
    twin = nn.Conv2d(3, 5, k, dilation=d, padding="same")
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(2, 3, *size, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    out, expected = model(x), twin(x_twin)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_twin.grad)
    torch.testing.assert_close(layer.weight.grad, twin.weight.grad)
    torch.testing.assert_close(spec_of(Conv).reference(layer)(x), expected)


def test_same_padding_infers_the_input_extent_backward():
    plan = hndl.resolve('linear()\nreshape(3)\nconv(4, kernel_size=3, padding="same")', input_shape=("B", 2),
                        output_shape=("B", 4, 6, 5))
    assert plan.nodes[1].output_shapes["out"] == ("B", 3, 6, 5)


def test_same_padding_gradcheck_and_gradgradcheck_in_float64():
    torch.manual_seed(0)
    layer = network('conv(2, kernel_size=(2, 3), padding="same")', input_shape=("B", 2, 4, 5),
                    output_shape=("B", 2, 4, 5), device="cpu").nodes.n_n0.double()
    x = torch.randn(2, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,), fast_mode=True)


def test_valid_padding_records_what_padding_zero_records():
    valid = hndl.resolve('conv(4, kernel_size=3, padding="valid")', input_shape=("B", 2, 8, 8),
                         output_shape=("B", 4, 6, 6))
    zero = hndl.resolve("conv(4, kernel_size=3, padding=0)", input_shape=("B", 2, 8, 8), output_shape=("B", 4, 6, 6))
    assert valid.nodes[0].args["padding"] == (0, 0) and valid.nodes[0].args == zero.nodes[0].args


def test_same_padding_with_a_stride_is_an_argument_error_naming_the_number():
    error = _fails('conv(4, kernel_size=3, stride=2, padding="same")', ("B", 2, 8, 8), ("B", 4, 4, 4))
    assert error.code == "E_ARGUMENT" and error.location.field == "padding"
    assert "stride 1" in error.message and "torch refuses it too" in error.message
    assert error.remedies[0].startswith("Give the padding as a number: padding=1 ")
    assert hndl.resolve("conv(4, kernel_size=3, stride=2, padding=1)", input_shape=("B", 2, 8, 8),
                        output_shape=("B", 4, 4, 4))


def test_an_unknown_padding_string_is_an_argument_error():
    error = _fails('conv(4, kernel_size=3, padding="full")', ("B", 2, 8, 8), ("B", 4, 8, 8))
    assert error.code == "E_ARGUMENT" and "'same', 'valid'" in error.message
    assert '"same" (stride 1) or "valid"' in error.remedies[0]


def test_a_padding_that_contradicts_same_extents_is_a_constraint_error():
    assert _fails('conv(4, kernel_size=3, padding="same")', ("B", 2, 8, 8), ("B", 4, 6, 6)).code == "E_CONSTRAINT"


# -- the conv equation's remedy names the padding or stride (issue 30 item 2) ---------------------
def test_an_unpadded_conv_that_misses_the_contract_names_the_padding_that_keeps_it():
    error = _fails("conv(16, kernel_size=3)", ("B", 3, 32, 32), ("B", 16, 32, 32))
    assert error.code == "E_CONSTRAINT"
    assert error.message == ("conv: H_out = floor((32 + 2*0 - 1*(3 - 1) - 1) / 1 + 1) = 30 from input extent 32 "
                             "(kernel_size 3, stride 1, padding 0, dilation 1), but out[2] must be 32")
    assert error.remedies == ('Give padding=1: H_out = floor((32 + 2*1 - 1*(3 - 1) - 1) / 1 + 1) = 32 '
                              '(padding="same" keeps every extent of a stride-1 convolution).',)
    assert error.chain == ("input contract 'x' axis 2 is 32", "output contract 'output' axis 2 is 32")


def test_a_downsampling_contract_gets_the_stride_and_padding_that_give_it():
    error = _fails("conv(16, kernel_size=3)", ("B", 3, 32, 32), ("B", 16, 16, 16))
    assert error.remedies == ("Give stride=2, padding=1: H_out = floor((32 + 2*1 - 1*(3 - 1) - 1) / 2 + 1) = 16.",)


def test_a_stride_that_overshoots_gets_stride_one():
    error = _fails("conv(16, kernel_size=3, stride=2)", ("B", 3, 32, 32), ("B", 16, 32, 32))
    assert error.remedies == ("Give stride=1, padding=1: H_out = floor((32 + 2*1 - 1*(3 - 1) - 1) / 1 + 1) = 32.",)


def test_axes_that_need_different_paddings_get_a_pair():
    error = _fails("conv(16, kernel_size=3)", ("B", 3, 32, 32), ("B", 16, 32, 30))
    assert error.remedies[0].startswith("Give padding=(1, 0): ")


def test_the_padding_remedy_is_what_resolves():
    """Every padding or stride a remedy names resolves when written in."""
    for size, target in (((32, 32), (32, 32)), ((32, 32), (16, 16)), ((11, 9), (11, 9)), ((20, 20), (7, 7))):
        error = _fails("conv(4, kernel_size=3)", ("B", 2, *size), ("B", 4, *target))
        fix = error.remedies[0].split(":")[0].removeprefix("Give ")
        assert hndl.resolve(f"conv(4, kernel_size=3, {fix})", input_shape=("B", 2, *size),
                            output_shape=("B", 4, *target))


# -- torch's positional order (issue 30 item 1's audit) -----------------------------------------------
def test_torch_positional_order_is_refused_not_read_another_way():
    """torch's Conv2d(3, 16, 3) is conv(16, kernel_size=3); conv(3, 16, 3) must not mean something else."""
    error = _fails("conv(3, 16, 3)", ("B", 3, 32, 32), ("B", 16, 30, 30))
    assert error.code == "E_ARGUMENT" and "positional" in error.message
    assert any("kernel_size=" in remedy for remedy in error.remedies)
    assert hndl.resolve("conv(16, kernel_size=3)", input_shape=("B", 3, 32, 32), output_shape=("B", 16, 30, 30))
    assert "conv(16, kernel_size=3)" in spec_of(Conv).docstring


def test_torch_keywords_mean_torchs_meaning_and_a_wrong_in_channels_is_named():
    """conv(in_channels=3, out_channels=16, kernel_size=3) is torch's Conv2d by keyword; in_channels is checked."""
    plan = hndl.resolve("conv(in_channels=3, out_channels=16, kernel_size=3, padding=1)", input_shape=("B", 3, 8, 8),
                        output_shape=("B", 16, 8, 8))
    assert (plan.nodes[0].args["in_channels"], plan.nodes[0].args["out_channels"]) == (3, 16)
    error = _fails("conv(in_channels=4, out_channels=16, kernel_size=3)", ("B", 3, 8, 8), ("B", 16, 6, 6))
    assert error.code == "E_CONSTRAINT"
    assert error.remedies == ("Omit in_channels=4 at node n0 (conv, line 1): the rest of the graph requires "
                              "in_channels 3 there, and an omitted in_channels is inferred from the tensor it reads.",)


def test_the_public_harness_passes():
    check_operator(Conv)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
def test_an_even_kernel_that_cannot_keep_the_extent_with_numbers_is_told_padding_same():
    error = _fails("conv(16, kernel_size=4)", ("B", 3, 16, 16), ("B", 16, 16, 16))
    assert error.remedies[0].startswith('Give padding="same": a stride-1 convolution then keeps every extent')
    model = network('conv(16, kernel_size=4, padding="same")', input_shape=("B", 3, 16, 16),
                    output_shape=("B", 16, 16, 16), device="cpu")
    assert model(torch.randn(1, 3, 16, 16)).shape == (1, 16, 16, 16)


def test_a_policy_miss_says_to_drop_the_policy():
    error = _fails('conv(16, policy="down2")', ("B", 3, 16, 16), ("B", 16, 16, 16))
    assert error.remedies == ('Drop policy="down2" and give stride=1, padding="same": a stride-1 convolution then '
                              "keeps every extent, even with kernel_size 4 (torch pads dilation * (kernel_size - 1) "
                              "zeros, the odd one after).",)


def test_the_fitting_padding_is_the_smallest_that_works_and_costs_nothing_for_huge_kernels():
    from hndl_ops_vision.convolution import conv_output, fitting_padding

    for extent, target, k, s, d in [(e, t, k, s, d) for e in range(1, 12) for t in range(1, 14) for k in (1, 2, 3, 5)
                                    for s in (1, 2, 3) for d in (1, 2)]:
        brute = next((p for p in range(d * (k - 1) + 1) if conv_output(extent, k, s, p, d) == target), None)
        assert fitting_padding(extent, target, k, s, d) == brute
    error = _fails("conv(4, kernel_size=2147483647, dilation=2147483647)", ("B", 2, 8, 8), ("B", 4, 8, 8))
    assert error.code == "E_CONSTRAINT" and len(str(error)) < 1000


@pytest.mark.parametrize("source, target", [("conv(4, kernel_size=(3, 5))", (16, 16)),
                                            ("conv(4, kernel_size=3, padding=(1, 0))", (16, 15)),
                                            ("conv(4, kernel_size=(3, 5), dilation=(1, 2))", (32, 32))])
def test_per_axis_remedies_resolve_when_written_in(source, target):
    """A remedy gives each axis its own padding (a pair when they differ) and resolves as written."""
    error = _fails(source, ("B", 2, 32, 32), ("B", 4, *target))
    fix = error.remedies[0].split(":")[0].removeprefix("Give ")
    assert hndl.resolve(source[:-1] + f", {fix})", input_shape=("B", 2, 32, 32), output_shape=("B", 4, *target))
