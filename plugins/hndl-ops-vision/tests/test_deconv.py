"""conv_transpose2d@1 (alias deconv): exact doubling under up2 in both directions, the §7
generator resolutions and failures, exact inversion, output_padding validation, numerics
against a handwritten nn.ConvTranspose2d, and the generator's printed table."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_operator
from hndl.torch import network
from hndl_ops_vision.deconv import Deconv

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""

GENERATOR_TABLE = """\
Network: [B, 128] -> [B, 3, 32, 32]  dtype=float32
index  name  operation  input shape       output shape
0      n0    linear     [B, 128]          [B, 8192]
1      n1    relu       [B, 8192]         [B, 8192]
2      n2    reshape    [B, 8192]         [B, 512, 4, 4]
3      n3    deconv     [B, 512, 4, 4]    [B, 256, 8, 8]
4      n4    relu       [B, 256, 8, 8]    [B, 256, 8, 8]
5      n5    deconv     [B, 256, 8, 8]    [B, 128, 16, 16]
6      n6    relu       [B, 128, 16, 16]  [B, 128, 16, 16]
7      n7    deconv     [B, 128, 16, 16]  [B, 64, 32, 32]
8      n8    relu       [B, 64, 32, 32]   [B, 64, 32, 32]
9      n9    conv       [B, 64, 32, 32]   [B, 3, 32, 32]
10     n10   tanh       [B, 3, 32, 32]    [B, 3, 32, 32]"""


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def _equation(extent, k, s, p, d, op):
    return (extent - 1) * s - 2 * p + d * (k - 1) + op + 1


def test_declaration():
    spec = spec_of(Deconv)
    assert spec.alias == "deconv" and spec.qualified == "conv_transpose2d@1"
    assert spec.positional_args == ("out_channels",)
    assert spec.args["output_padding"].default == (0, 0)
    assert spec.args["out_channels"].inferable and spec.args["in_channels"].inferable
    assert set(spec.policies) == {"up2"}
    policy = spec.policies["up2"]
    assert policy.identity == "spatial.up2_transpose@1"
    assert dict(policy.requires) == {
        "kernel_size": (4, 4), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "output_padding": (0, 0),
        "groups": 1,
    }


def test_up2_doubles_exactly_and_records_the_policy():
    plan = hndl.resolve('deconv(256, policy="up2")', input_shape=("B", 512, 4, 6), output_shape=("B", 256, 8, 12))
    node = plan.nodes[0]
    assert node.output_shapes["out"] == ("B", 256, 8, 12)
    expected = {"kernel_size": (4, 4), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1),
                "output_padding": (0, 0), "groups": 1}
    for name, value in expected.items():
        assert node.args[name] == value
        assert node.provenance[name] == "policy"
    assert node.source["policy"] == "spatial.up2_transpose@1"


def test_up2_known_output_fixes_the_input():
    plan = hndl.resolve(
        'linear()\nreshape(512)\ndeconv(256, policy="up2")', input_shape=("B", 16), output_shape=("B", 256, 6, 10)
    )
    assert plan.nodes[1].output_shapes["out"] == ("B", 512, 3, 5)
    assert plan.nodes[0].args["out_features"] == 512 * 15


def test_up2_output_mismatch_fails():
    error = _fails('deconv(256, policy="up2")', ("B", 512, 4, 4), ("B", 256, 8, 9))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize(
    "target, seed, width",
    [((32, 32), (4, 4), 8192), ((64, 64), (8, 8), 32768), ((32, 64), (4, 8), 16384)],
)
def test_generator_targets(target, seed, width):
    plan = hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, *target))
    assert plan.nodes[0].args["out_features"] == width
    assert plan.nodes[0].provenance["out_features"] == "inferred"
    assert plan.nodes[2].output_shapes["out"] == ("B", 512, *seed)
    assert plan.nodes[2].args["shape"] == (512,)
    assert plan.nodes[9].output_shapes["out"] == ("B", 3, *target)


def test_generator_target_30_is_a_contradiction_mentioning_3_75():
    error = _fails(GENERATOR, ("B", 128), ("B", 3, 30, 30))
    assert error.code == "E_CONSTRAINT"
    assert "3.75" in str(error)


def test_generator_literal_projection_width_is_kept():
    error = _fails(GENERATOR.replace("linear()", "linear(128)", 1), ("B", 128), ("B", 3, 32, 32))
    assert error.code == "E_RESHAPE"
    assert "128" in str(error) and "8192" in str(error)
    assert error.location.node == "n2"
    assert "node n0 (linear) out_features=128 (explicit)" in error.chain


def test_generator_builds_runs_and_prints_the_spec_table():
    torch.manual_seed(0)
    model = network(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32), device="cpu")
    assert [line.rstrip() for line in str(model).splitlines()] == GENERATOR_TABLE.splitlines()
    assert repr(model) == str(model)
    z = torch.randn(2, 128, requires_grad=True)
    image = model(z)
    assert image.shape == (2, 3, 32, 32)
    assert image.abs().max() <= 1
    image.sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
    for name in ("n0", "n3", "n5", "n7", "n9"):
        assert getattr(model.nodes, f"n_{name}").weight.grad is not None
    assert model.nodes.n_n0.weight.shape == (8192, 128)
    assert model.nodes.n_n3.weight.shape == (512, 256, 4, 4)


@pytest.mark.parametrize(
    "size, k, s, p, d, op",
    [
        ((4, 5), (3, 3), (1, 1), (0, 0), (1, 1), (0, 0)),
        ((4, 3), (3, 4), (2, 3), (1, 0), (1, 1), (1, 2)),
        ((3, 3), (3, 2), (1, 2), (0, 1), (2, 3), (1, 1)),
    ],
)
def test_spec_equation_per_axis_matches_torch(size, k, s, p, d, op):
    expected = tuple(_equation(size[j], k[j], s[j], p[j], d[j], op[j]) for j in range(2))
    source = f"deconv(2, kernel_size={k}, stride={s}, padding={p}, dilation={d}, output_padding={op})"
    plan = hndl.resolve(source, input_shape=("B", 4, *size), output_shape=("B", 2, *expected))
    assert plan.nodes[0].output_shapes["out"] == ("B", 2, *expected)
    model = network(source, input_shape=("B", 4, *size), output_shape=("B", 2, *expected), device="cpu")
    assert model(torch.randn(1, 4, *size)).shape == (1, 2, *expected)
    # Backward: the same output fixes an omitted input exactly.
    plan = hndl.resolve(f"linear()\nreshape(4)\n{source}", input_shape=("B", 3), output_shape=("B", 2, *expected))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, *size)


def test_exact_inverse_without_a_policy():
    plan = hndl.resolve("linear()\nreshape(4)\ndeconv(2, kernel_size=3, stride=2)", input_shape=("B", 4), output_shape=("B", 2, 9, 9))
    assert plan.nodes[1].output_shapes["out"] == ("B", 4, 4, 4)


def test_non_exact_inverse_is_a_contradiction():
    # O = 2I - 1 with kernel 3, stride 2, padding 1: an output of 8 needs 4.5.
    error = _fails("linear()\nreshape(4)\ndeconv(2, kernel_size=3, stride=2, padding=1)", ("B", 4), ("B", 2, 8, 8))
    assert error.code == "E_CONSTRAINT"
    assert "4.5" in str(error)


def test_non_positive_output_is_a_contradiction():
    error = _fails("deconv(2, kernel_size=1, padding=3)", ("B", 4, 2, 2), ("B", 2, 2, 2))
    assert error.code == "E_CONSTRAINT"


@pytest.mark.parametrize("args", ["stride=2, output_padding=2", "stride=2, dilation=2, output_padding=2",
                                  "output_padding=1", "stride=(2, 1), output_padding=(1, 1)"])
def test_output_padding_at_least_stride_and_dilation_is_an_argument_error(args):
    error = _fails(f"deconv(2, kernel_size=3, {args})", ("B", 4, 4, 4), ("B", 2, 11, 11))
    assert error.code == "E_ARGUMENT"
    assert error.location.field == "output_padding"


def test_output_padding_below_dilation_is_allowed():
    plan = hndl.resolve(
        "deconv(2, kernel_size=3, dilation=2, output_padding=1)", input_shape=("B", 4, 4, 4), output_shape=("B", 2, 9, 9)
    )
    assert plan.nodes[0].args["output_padding"] == (1, 1)
    model = network(
        "deconv(2, kernel_size=3, dilation=2, output_padding=1)", input_shape=("B", 4, 4, 4), output_shape=("B", 2, 9, 9),
        device="cpu",
    )
    assert model(torch.randn(1, 4, 4, 4)).shape == (1, 2, 9, 9)


@pytest.mark.parametrize("extra", ["kernel_size=3", "stride=1", "padding=0", "output_padding=1", "groups=2"])
def test_explicit_value_contradicting_up2_conflicts(extra):
    error = _fails(f'deconv(256, policy="up2", {extra})', ("B", 512, 4, 4), ("B", 256, 8, 8))
    assert error.code == "E_POLICY_CONFLICT"


def test_undeclared_policy_conflicts():
    error = _fails('deconv(256, policy="down2")', ("B", 512, 4, 4), ("B", 256, 8, 8))
    assert error.code == "E_POLICY_CONFLICT"


def test_missing_kernel_size_without_policy_is_an_argument_error():
    error = _fails("deconv(2)", ("B", 4, 4, 4), ("B", 2, 4, 4))
    assert error.code == "E_ARGUMENT"


def test_no_activation_shorthand():
    error = _fails('deconv(2, kernel_size=3, activation="relu")', ("B", 4, 4, 4), ("B", 2, 6, 6))
    assert error.code == "E_ARGUMENT"


def test_group_divisibility():
    error = _fails("deconv(3, kernel_size=3, groups=2)", ("B", 4, 5, 5), ("B", 3, 7, 7))
    assert error.code == "E_CONSTRAINT"
    error = _fails("deconv(4, kernel_size=3, groups=2)", ("B", 3, 5, 5), ("B", 4, 7, 7))
    assert error.code == "E_CONSTRAINT"


def test_rank_two_is_a_constraint_error():
    error = _fails("deconv(2, kernel_size=3)", ("B", 4), ("B", 4))
    assert error.code == "E_CONSTRAINT"


def test_out_channels_inferred_backward():
    plan = hndl.resolve("deconv(kernel_size=3)", input_shape=("B", 4, 5, 5), output_shape=("B", 2, 7, 7))
    node = plan.nodes[0]
    assert node.args["out_channels"] == 2 and node.provenance["out_channels"] == "inferred"
    assert node.args["in_channels"] == 4


@pytest.mark.parametrize(
    "source, in_shape, out_shape, kwargs",
    [
        ('deconv(6, policy="up2")', (4, 3, 5), (6, 6, 10), dict(kernel_size=4, stride=2, padding=1)),
        ("deconv(6, kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, bias=False)",
         (4, 3, 3), (6, 6, 10),
         dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, bias=False)),
        ("deconv(3, kernel_size=3, dilation=2)", (2, 4, 4), (3, 8, 8), dict(kernel_size=3, dilation=2)),
    ],
)
def test_numerics_against_a_handwritten_conv_transpose2d(source, in_shape, out_shape, kwargs):
    model = network(source, input_shape=("B", *in_shape), output_shape=("B", *out_shape), device="cpu")
    layer = model.nodes.n_n0
    reference = nn.ConvTranspose2d(in_shape[0], out_shape[0], **kwargs)
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
        out,
        F.conv_transpose2d(x, layer.weight, layer.bias, layer.stride, layer.padding, layer.output_padding,
                           layer.groups, layer.dilation),
    )
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.weight.grad, reference.weight.grad)
    if reference.bias is not None:
        torch.testing.assert_close(layer.bias.grad, reference.bias.grad)


def test_integer_input_is_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("deconv(3, kernel_size=1)", input_shape=("B", 2, 4, 4), output_shape=("B", 3, 4, 4), input_dtype="int64")
    assert error.value.code == "E_DTYPE"


# -- issue 30: deconv takes no padding strings (torch's ConvTranspose2d has none) -------------------
@pytest.mark.parametrize("padding", ['"same"', '"valid"', '"full"'])
def test_a_padding_string_is_an_argument_error_with_the_reason(padding):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(f"deconv(kernel_size=3, padding={padding})", input_shape=("B", 4, 5, 5),
                     output_shape=("B", 2, 5, 5))
    assert error.value.code == "E_ARGUMENT" and error.value.location.field == "padding"
    assert "torch's ConvTranspose2d has no padding strings" in error.value.message
    assert "kernel_size=4, stride=2, padding=1" in error.value.remedies[0]
    assert hndl.resolve("deconv(kernel_size=3, padding=1)", input_shape=("B", 4, 5, 5), output_shape=("B", 2, 5, 5))


def test_torch_positional_order_is_refused_not_read_another_way():
    """Issue 30 item 1's audit: torch's ConvTranspose2d(3, 8, 2, 2) is deconv(8, kernel_size=2, stride=2)."""
    with pytest.raises(HNDLError) as error:
        hndl.resolve("deconv(3, 8, 2, 2)", input_shape=("B", 3, 4, 4), output_shape=("B", 8, 8, 8))
    assert error.value.code == "E_ARGUMENT" and any("kernel_size=" in remedy for remedy in error.value.remedies)
    plan = hndl.resolve("deconv(in_channels=3, out_channels=8, kernel_size=2, stride=2)", input_shape=("B", 3, 4, 4),
                        output_shape=("B", 8, 8, 8))
    assert plan.nodes[0].output_shapes["out"] == ("B", 8, 8, 8)


def test_the_public_harness_passes():
    check_operator(Deconv)
