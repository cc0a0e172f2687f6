"""Tests for hndl.declaration: Arg normalization, Policy, OperatorSpec and every E_REGISTRY rule (§8)."""

from __future__ import annotations

import pickle
from types import MappingProxyType

import pytest
from torch import nn

from hndl.declaration import (
    ARG_TYPES,
    INITIALIZER_NAMES,
    MISSING,
    RESERVED_METADATA,
    Arg,
    Example,
    OperatorSpec,
    Policy,
    TorchSpelling,
    operator,
    spec_of,
)
from hndl.errors import HNDLError

SUMMARY = "A test operator."
UNARY = "x[B, ...] -> out[B, ...]"


def declare(alias="op", cls=None, **fields):
    """Declare a fresh class (a plain nn.Module accepting anything by keyword by default)."""
    fields.setdefault("summary", SUMMARY)
    fields.setdefault("shape", UNARY)
    if cls is None:

        class Op(nn.Module):
            def __init__(self, **kwargs):
                super().__init__()

        cls = Op
    return operator(alias, **fields)(cls)


def registry_error(**fields) -> HNDLError:
    with pytest.raises(HNDLError) as info:
        declare(**fields)
    assert info.value.code == "E_REGISTRY", info.value
    return info.value


def argument_error(arg: Arg, value, name="a", node=None) -> HNDLError:
    with pytest.raises(HNDLError) as info:
        arg.normalize(value, name=name, node=node)
    assert info.value.code == "E_ARGUMENT", info.value
    assert info.value.location.field == name
    return info.value


def arg_registry_error(*a, **kw) -> HNDLError:
    with pytest.raises(HNDLError) as info:
        Arg(*a, **kw)
    assert info.value.code == "E_REGISTRY", info.value
    return info.value


# ---------------------------------------------------------------------------------------
# The §8 examples
# ---------------------------------------------------------------------------------------


def test_silu_example_registers_without_category_or_examples():
    @operator(
        "silu",
        identity="example.silu",
        version=1,
        summary="Sigmoid linear unit, x * sigmoid(x).",
        shape="x[B, ...] -> out[B, ...]",
    )
    class SiLU(nn.SiLU):
        """Out-of-place SiLU. No parameters, no buffers, identical in train and
        eval mode."""

    spec = spec_of(SiLU)
    assert isinstance(spec, OperatorSpec)
    assert spec.cls is SiLU
    assert spec.alias == "silu"
    assert spec.identity == "example.silu"
    assert spec.version == 1
    assert spec.qualified == "example.silu@1"
    assert spec.summary == "Sigmoid linear unit, x * sigmoid(x)."
    assert spec.docstring == (
        "Out-of-place SiLU. No parameters, no buffers, identical in train and\neval mode."
    )
    assert spec.category is None and spec.examples == ()
    assert spec.args == {} and spec.policies == {}
    assert spec.batch == "shared" and spec.relation is None
    assert spec.input_ports() == ("x",) and spec.output_ports({}) == ("out",)
    assert SiLU.__dict__["__hndl_operator__"] is spec


def test_adaptive_norm_declaration_verbatim():
    @operator(
        "adaptive_norm",
        summary="Instance-normalize features, then apply a per-example learned scale and bias.",
        shape="x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]",
        args={"eps": Arg(float, 1e-5, min=0, exclusive_min=True,
                         help="Added to the variance for stability.")},
        category="normalization",
    )
    class AdaptiveNorm(nn.Module):
        def __init__(self, eps=1e-5):
            super().__init__()
            self.eps = eps

    spec = spec_of(AdaptiveNorm)
    assert spec.qualified == "adaptive_norm@1"
    assert spec.docstring == ""
    assert spec.category == "normalization"
    assert spec.input_ports() == ("x", "params")
    assert spec.output_ports({"eps": 1e-5}) == ("out",)
    assert list(spec.args) == ["eps"] and spec.positional_args == ("eps",)
    eps = spec.args["eps"]
    assert eps.default == 1e-5 and not eps.required
    assert eps.normalize(1, name="eps") == 1.0
    with pytest.raises(HNDLError) as info:
        eps.normalize(0, name="eps", node="norm")
    assert info.value.code == "E_ARGUMENT" and info.value.location.node == "norm"


def test_deconv_up2_policy():
    pair = dict(help="h")

    @operator(
        "deconv",
        identity="conv_transpose2d",
        summary="Transposed 2-D convolution.",
        shape="x[B, C_in, H, W] -> out[B, C_out, H_out, W_out]",
        relation=lambda s: None,
        args={
            "out_channels": Arg(int, min=1, dim="C_out", inferable=True, help="Output channels."),
            "kernel_size": Arg("pair", min=1, **pair),
            "stride": Arg("pair", 1, min=1, **pair),
            "padding": Arg("pair", 0, min=0, **pair),
            "output_padding": Arg("pair", 0, min=0, **pair),
            "groups": Arg(int, 1, min=1, help="Groups."),
            "bias": Arg(bool, True, help="Add a bias."),
            "dilation": Arg("pair", 1, min=1, **pair),
        },
        policies={
            "up2": Policy(
                "spatial.up2_transpose@1",
                {"kernel_size": 4, "stride": 2, "padding": 1, "dilation": 1,
                 "output_padding": 0, "groups": 1},
            )
        },
    )
    class Deconv(nn.Module):
        def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                     groups=1, bias=True, dilation=1, *, C_in):
            super().__init__()

    spec = spec_of(Deconv)
    assert spec.qualified == "conv_transpose2d@1"
    up2 = spec.policy("up2")
    assert up2.identity == "spatial.up2_transpose@1"
    assert isinstance(up2.requires, MappingProxyType)
    assert dict(up2.requires) == {
        "kernel_size": (4, 4), "stride": (2, 2), "padding": (1, 1),
        "dilation": (1, 1), "output_padding": (0, 0), "groups": 1,
    }
    assert isinstance(spec.policies, MappingProxyType)
    with pytest.raises(HNDLError) as info:
        spec.policy("up3")
    assert info.value.code == "E_POLICY_CONFLICT"
    assert spec.args["out_channels"].required is False  # inferable
    assert spec.args["kernel_size"].required is True


# ---------------------------------------------------------------------------------------
# Arg construction, immutability, equality
# ---------------------------------------------------------------------------------------


def test_arg_attributes_and_immutability():
    arg = Arg(int, 3, min=1, max=8, help="Width.", positional=False)
    assert (arg.type, arg.default, arg.min, arg.max) == (int, 3, 1, 8)
    assert arg.exclusive_min is False and arg.exclusive_max is False
    assert arg.help == "Width." and arg.inferable is False and arg.dim is None
    assert arg.positional is False and arg.choices is None and arg.required is False
    with pytest.raises(AttributeError):
        arg.default = 4
    with pytest.raises(AttributeError):
        arg.new = 1
    assert Arg(int, help="h").required and Arg(int, help="h").default is MISSING
    assert not Arg(int, inferable=True, help="h").required


def test_arg_equality_hash_repr_pickle():
    a = Arg("pair", 3, min=1, help="Kernel.")
    b = Arg("pair", (3, 3), min=1, help="Kernel.")
    assert a == b and hash(a) == hash(b)
    assert a != Arg("pair", 3, min=2, help="Kernel.")
    assert repr(a) == "Arg('pair', (3, 3), min=1, help='Kernel.')"
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(MISSING) == "MISSING" and pickle.loads(pickle.dumps(MISSING)) is MISSING


def test_arg_types_constant():
    assert ARG_TYPES == (int, float, bool, str, "pair", "ints", "strs")
    for t in ARG_TYPES:
        Arg(t, help="fine")


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((list,), {"help": "h"}),                                  # unsupported type
        (("tuple",), {"help": "h"}),
        ((int,), {}),                                              # missing help
        ((int,), {"help": "   "}),
        ((int, 1), {"inferable": True, "help": "h"}),              # inferable + default
        ((bool,), {"min": 0, "help": "h"}),                        # bounds on bool
        ((str,), {"max": 3, "help": "h"}),
        (("strs",), {"min": 0, "help": "h"}),
        ((int,), {"min": 5, "max": 4, "help": "h"}),               # min > max
        ((float,), {"min": 1.0, "max": 1.0, "exclusive_max": True, "help": "h"}),
        ((int,), {"min": 1, "max": 2, "exclusive_min": True, "exclusive_max": True, "help": "h"}),
        ((int,), {"min": 1.2, "max": 1.8, "help": "h"}),           # no integer inside
        (("ints",), {"min": 0, "max": 1, "exclusive_min": True, "exclusive_max": True, "help": "h"}),
        ((int,), {"exclusive_min": True, "help": "h"}),            # flag without bound
        ((int,), {"min": float("nan"), "help": "h"}),
        ((int,), {"choices": ("a",), "help": "h"}),                # choices on int
        ((str,), {"choices": (), "help": "h"}),                    # empty choices
        ((str,), {"choices": "abc", "help": "h"}),                 # a bare string
        ((str,), {"choices": ("a", 1), "help": "h"}),
        ((float,), {"dim": "C", "help": "h"}),                     # dim on non-int
        ((int, 0), {"min": 1, "help": "h"}),                       # default out of bounds
        ((str, "c"), {"choices": ("a", "b"), "help": "h"}),        # default not a choice
        ((int, True), {"help": "h"}),                              # default bool for int
        ((int,), {"positional": "yes", "help": "h"}),
    ],
)
def test_arg_level_declaration_errors(args, kwargs):
    arg_registry_error(*args, **kwargs)


def test_arg_bounds_that_admit_values():
    Arg(float, min=0.0, max=1.0, exclusive_min=True, exclusive_max=True, help="h")
    Arg(int, min=1, max=1, help="h")
    Arg(int, min=0.5, max=1.5, help="h")  # admits 1
    Arg(float, min=2.0, max=2.0, help="h")


# ---------------------------------------------------------------------------------------
# Arg.normalize, every type
# ---------------------------------------------------------------------------------------


def test_normalize_int():
    arg = Arg(int, help="h")
    assert arg.normalize(5, name="a") == 5 and type(arg.normalize(5, name="a")) is int
    assert arg.normalize(2**63 - 1, name="a") == 2**63 - 1
    assert arg.normalize(-(2**63 - 1), name="a") == -(2**63 - 1)
    argument_error(arg, True)
    argument_error(arg, False)
    argument_error(arg, 1.0)
    argument_error(arg, "3")
    argument_error(arg, 2**63)
    argument_error(arg, -(2**63))
    argument_error(arg, None)


def test_normalize_int_bounds_with_exclusive_flags():
    inclusive = Arg(int, min=1, max=4, help="h")
    assert inclusive.normalize(1, name="a") == 1 and inclusive.normalize(4, name="a") == 4
    argument_error(inclusive, 0)
    argument_error(inclusive, 5)
    exclusive = Arg(int, min=1, max=4, exclusive_min=True, exclusive_max=True, help="h")
    argument_error(exclusive, 1)
    argument_error(exclusive, 4)
    assert exclusive.normalize(2, name="a") == 2


def test_normalize_float():
    arg = Arg(float, min=0, exclusive_min=True, max=1, help="h")
    value = arg.normalize(1, name="a")
    assert value == 1.0 and type(value) is float
    assert arg.normalize(0.5, name="a") == 0.5
    argument_error(arg, 0)
    argument_error(arg, 0.0)
    argument_error(arg, 1.5)
    argument_error(arg, True)
    argument_error(arg, float("nan"))
    free = Arg(float, help="h")
    argument_error(free, float("inf"))
    argument_error(free, 10**400)
    argument_error(free, "1.0")


def test_normalize_bool():
    arg = Arg(bool, True, help="h")
    assert arg.normalize(False, name="a") is False
    argument_error(arg, 0)
    argument_error(arg, 1)
    argument_error(arg, "True")


def test_normalize_str_choices_and_length():
    arg = Arg(str, "mean", choices=("mean", "sum"), help="h")
    assert arg.choices == ("mean", "sum")
    assert arg.normalize("sum", name="a") == "sum"
    argument_error(arg, "max")
    argument_error(arg, 3)
    free = Arg(str, help="h")
    assert free.normalize("é" * 8192, name="a") == "é" * 8192  # exactly 16384 bytes
    argument_error(free, "é" * 8192 + "a")
    argument_error(free, "a" * 16385)
    argument_error(free, b"bytes")
    argument_error(free, "\ud800")  # lone surrogate is not UTF-8


def test_normalize_pair():
    arg = Arg("pair", min=1, max=7, exclusive_max=True, help="h")
    assert arg.normalize(3, name="a") == (3, 3)
    assert arg.normalize([2, 5], name="a") == (2, 5)
    assert arg.normalize((2, 5), name="a") == (2, 5)
    argument_error(arg, (1, 2, 3))
    argument_error(arg, (1,))
    argument_error(arg, (1, True))
    argument_error(arg, 0)
    argument_error(arg, (1, 7))
    argument_error(arg, 2.0)


def test_normalize_ints():
    arg = Arg("ints", min=1, help="h")
    assert arg.normalize([512, 4, 4], name="shape") == (512, 4, 4)
    assert arg.normalize((), name="shape") == ()
    assert arg.normalize([1] * 64, name="shape") == (1,) * 64
    argument_error(arg, [1] * 65, name="shape")
    argument_error(arg, [1, 0], name="shape")
    argument_error(arg, [1, False], name="shape")
    argument_error(arg, [1, 2**63], name="shape")
    argument_error(arg, 3, name="shape")
    argument_error(arg, "123", name="shape")


def test_normalize_strs():
    arg = Arg("strs", choices=("a", "b"), help="h")
    assert arg.normalize(["a", "b", "a"], name="names") == ("a", "b", "a")
    argument_error(arg, ("a", "c"), name="names")
    argument_error(arg, ("a", 1), name="names")
    argument_error(arg, "ab", name="names")
    free = Arg("strs", help="h")
    argument_error(free, ["x"] * 65, name="names")
    argument_error(free, ["x" * 16385], name="names")


def test_none_accepted_only_when_default_is_none():
    optional = Arg(int, None, min=1, help="h")
    assert optional.default is None and not optional.required
    assert optional.normalize(None, name="a") is None
    assert optional.normalize(3, name="a") == 3
    argument_error(Arg(int, 1, help="h"), None)
    argument_error(Arg(str, help="h"), None)


def test_normalize_error_carries_node_and_field():
    err = argument_error(Arg(int, help="h"), "x", name="width", node="n1")
    assert err.location.node == "n1" and err.location.field == "width"
    assert "width" in err.message


# ---------------------------------------------------------------------------------------
# Example and Policy
# ---------------------------------------------------------------------------------------


def test_example_is_frozen():
    ex = Example("silu()", ("B", 8), ("B", 8))
    assert ex.note == "" and ex.input_dtype is None and ex.network is False
    with pytest.raises(AttributeError):
        ex.source = "x"
    spec = spec_of(declare(examples=[ex]))
    assert spec.examples == (ex,)


def test_policy_is_immutable_and_validated():
    policy = Policy("spatial.up2_transpose@1", {"stride": 2})
    assert isinstance(policy.requires, MappingProxyType)
    with pytest.raises(TypeError):
        policy.requires["stride"] = 3
    with pytest.raises(AttributeError):
        policy.identity = "x@2"
    assert policy == Policy("spatial.up2_transpose@1", {"stride": 2})
    for bad in ("spatial.up2", "Spatial.up2@1", "up2@0", "up2@x", "up2@1@2"):
        with pytest.raises(HNDLError) as info:
            Policy(bad, {"stride": 2})
        assert info.value.code == "E_REGISTRY"
    with pytest.raises(HNDLError) as info:
        Policy("a.b@1", {})
    assert info.value.code == "E_REGISTRY"


# ---------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------


def test_variadic_input_ports_expand():
    spec = spec_of(declare(
        "join", shape="x* -> out", relation=lambda s: None,
        args={"input_count": Arg(int, inferable=True, min=1, help="Inputs.")},
    ))
    assert spec.input_ports(3) == ("x0", "x1", "x2")
    assert spec.input_ports(0) == ()
    with pytest.raises(HNDLError):
        spec.input_ports()


def test_variadic_output_ports_from_ints_and_int():
    spec = spec_of(declare(
        "split", shape="x[B, C] -> out*", relation=lambda s: None,
        args={"sizes": Arg("ints", (), help="Sizes.")}, outputs_from="sizes",
    ))
    assert spec.output_ports({"sizes": (2, 3)}) == ("out0", "out1")
    assert spec.output_ports({"sizes": ()}) == ("out",)
    assert spec.output_ports({}) == ("out",)
    with pytest.raises(HNDLError):
        spec.output_ports({"sizes": (1,) * 33})

    spec = spec_of(declare(
        "chunk", shape="x[B, C] -> out*", relation=lambda s: None,
        args={"chunks": Arg(int, 0, min=0, max=32, help="Count.")}, outputs_from="chunks",
    ))
    assert spec.output_ports({"chunks": 0}) == ("out",)
    assert spec.output_ports({"chunks": 3}) == ("out0", "out1", "out2")

    spec = spec_of(declare(
        "heads", shape="x[B, C] -> out*", relation=lambda s: None,
        args={"names": Arg("strs", help="Names.")}, outputs_from="names",
    ))
    assert spec.output_ports({"names": ("a", "b")}) == ("out0", "out1")


def test_positional_args_follow_declaration_order():
    spec = spec_of(declare(args={
        "b": Arg(int, 1, help="h"),
        "a": Arg(int, 1, help="h", positional=False),
        "c": Arg(int, 1, help="h"),
    }))
    assert list(spec.args) == ["b", "a", "c"]
    assert spec.positional_args == ("b", "c")
    assert isinstance(spec.args, MappingProxyType)


def test_positional_rest_names_ints_arg():
    spec = spec_of(declare("reshape", shape="x -> out", relation=lambda s: None,
                           args={"shape": Arg("ints", help="Target shape.")},
                           positional_rest="shape"))
    assert spec.positional_rest == "shape"


# ---------------------------------------------------------------------------------------
# One test per E_REGISTRY rule
# ---------------------------------------------------------------------------------------


def test_class_must_be_module_subclass():
    with pytest.raises(HNDLError) as info:
        operator("op", summary=SUMMARY, shape=UNARY)(object)
    assert info.value.code == "E_REGISTRY" and info.value.location.field == "cls"
    with pytest.raises(HNDLError) as info:
        operator("op", summary=SUMMARY, shape=UNARY)(lambda: None)
    assert info.value.code == "E_REGISTRY"


def test_class_is_decorated_once():
    cls = declare("first")
    with pytest.raises(HNDLError) as info:
        operator("second", summary=SUMMARY, shape=UNARY)(cls)
    assert info.value.code == "E_REGISTRY"


def test_subclass_of_declared_class_is_not_declared():
    base = declare("base")

    class Child(base):
        pass

    with pytest.raises(HNDLError) as info:
        spec_of(Child)
    assert info.value.code == "E_REGISTRY"
    child_spec = spec_of(operator("child", summary=SUMMARY, shape=UNARY)(Child))
    assert child_spec.alias == "child" and spec_of(base).alias == "base"


def test_spec_of_undeclared():
    with pytest.raises(HNDLError) as info:
        spec_of(nn.ReLU)
    assert info.value.code == "E_REGISTRY"
    with pytest.raises(HNDLError):
        spec_of(3)


@pytest.mark.parametrize(
    "alias",
    [3, "", "1abc", "my-op", "class", "lambda", "_private", "__dunder__", "a" * 65, "x", "out",
     "café", *RESERVED_METADATA, *INITIALIZER_NAMES],
)
def test_alias_rules(alias):
    err = registry_error(alias=alias)
    assert err.location.field == "alias"


def test_alias_of_64_chars_is_fine():
    assert spec_of(declare("a" * 64, identity="long")).alias == "a" * 64


@pytest.mark.parametrize("identity", ["Linear", "example.silu@1", "example..silu", ".silu", "9op", "a-b", 7])
def test_identity_rules(identity):
    err = registry_error(identity=identity)
    assert err.location.field == "identity"


def test_identity_defaults_to_alias_and_must_be_lowercase():
    assert spec_of(declare("linear")).identity == "linear"
    assert registry_error(alias="Linear").location.field == "identity"


@pytest.mark.parametrize("version", [0, -1, True, 1.0, "1"])
def test_version_rules(version):
    assert registry_error(version=version).location.field == "version"


@pytest.mark.parametrize("summary", [None, "", "   ", 5])
def test_summary_required(summary):
    assert registry_error(summary=summary).location.field == "summary"


@pytest.mark.parametrize("category", ["Normalization", "a" * 33, "", "9x", 3])
def test_category_rules(category):
    assert registry_error(category=category).location.field == "category"


def test_examples_must_be_examples():
    assert registry_error(examples=["silu()"]).location.field == "examples"
    assert registry_error(examples="silu()").location.field == "examples"


def test_shape_required():
    assert registry_error(shape=None).location.field == "shape"


def test_malformed_shape_propagates_registry_error():
    err = registry_error(shape="x[B, C -> out")
    assert err.location.field == "shape" and "'op'" in err.message


def test_shape_text_must_be_text():
    assert registry_error(shape_text=3).location.field == "shape_text"


def test_args_must_be_mapping_of_arg():
    registry_error(args=[("width", Arg(int, help="h"))])
    registry_error(args={"width": int})


def test_at_most_64_args():
    declare(args={f"a{i}": Arg(int, 1, help="h") for i in range(64)})
    registry_error(args={f"a{i}": Arg(int, 1, help="h") for i in range(65)})


@pytest.mark.parametrize("name", ["Width", "1w", "w-x", "in", "a" * 65, 3])
def test_arg_name_rules(name):
    registry_error(args={name: Arg(int, 1, help="h")})


@pytest.mark.parametrize("name", ["x", "out", "params"])
def test_arg_collides_with_port(name):
    err = registry_error(shape="x[B, C], params[B, C] -> out[B, C]", args={name: Arg(int, 1, help="h")})
    assert "port" in err.message


@pytest.mark.parametrize("name", ["x", "x0", "x12"])
def test_arg_collides_with_variadic_port_expansion(name):
    registry_error(
        shape="x* -> out", relation=lambda s: None,
        args={"input_count": Arg(int, 2, help="h"), name: Arg(int, 1, help="h")},
    )


@pytest.mark.parametrize("name", RESERVED_METADATA)
def test_arg_collides_with_reserved_metadata(name):
    err = registry_error(args={name: Arg(int, 1, help="h")})
    assert "reserved" in err.message


def test_port_named_reserved_metadata():
    registry_error(shape="x[B, C], init[B, C] -> out[B, C]")


def test_arg_missing_help_fails_registration():
    with pytest.raises(HNDLError) as info:
        declare(args={"width": Arg(int, 1)})
    assert info.value.code == "E_REGISTRY"


def test_dim_must_name_a_shape_symbol():
    ok = spec_of(declare(shape="x[B, C] -> out[B, D]", relation=lambda s: None,
                         args={"d": Arg(int, inferable=True, dim="D", help="h")}))
    assert ok.args["d"].dim == "D"
    registry_error(shape="x[B, C] -> out[B, C]", args={"d": Arg(int, 1, dim="D", help="h")})
    registry_error(shape="x[B, C] -> out[B, C]", args={"d": Arg(int, 1, dim="B", help="h")})


def test_two_args_cannot_bind_one_symbol():
    registry_error(
        shape="x[B, C] -> out[B, C]",
        args={"a": Arg(int, 1, dim="C", help="h"), "b": Arg(int, 1, dim="C", help="h")},
    )


@pytest.mark.parametrize("rest", ["missing", "width"])
def test_positional_rest_must_name_ints_arg(rest):
    err = registry_error(args={"width": Arg(int, 1, help="h")}, positional_rest=rest)
    assert err.location.field == "positional_rest"


def test_policies_must_be_mapping_of_policy():
    registry_error(args={"k": Arg(int, 1, help="h")}, policies=[Policy("a.b@1", {"k": 1})])
    registry_error(args={"k": Arg(int, 1, help="h")}, policies={"p": {"k": 1}})


def test_policy_alias_must_be_identifier():
    registry_error(args={"k": Arg(int, 1, help="h")}, policies={"up-2": Policy("a.b@1", {"k": 1})})


def test_policy_may_only_require_own_args():
    err = registry_error(args={"k": Arg(int, 1, help="h")}, policies={"p": Policy("a.b@1", {"q": 1})})
    assert err.location.field == "policies"


def test_policy_requirement_values_must_validate():
    registry_error(args={"k": Arg(int, 1, min=1, help="h")}, policies={"p": Policy("a.b@1", {"k": 0})})
    registry_error(args={"k": Arg(int, 1, help="h")}, policies={"p": Policy("a.b@1", {"k": "1"})})


@pytest.mark.parametrize("hook", ["validate", "finalize", "relation", "reference"])
def test_hooks_must_be_callable(hook):
    assert registry_error(**{hook: "not callable"}).location.field == hook


def test_batch_values():
    assert registry_error(batch="per-example").location.field == "batch"
    assert registry_error(batch="relation").location.field == "batch"
    spec = spec_of(declare(batch="relation", relation=lambda s: None))
    assert spec.batch == "relation"


def test_port_without_pattern_requires_relation():
    registry_error(shape="x -> out[B, C]")
    registry_error(shape="x[B, C] -> out")
    spec_of(declare(shape="x -> out", relation=lambda s: None))


def test_variadic_output_requires_relation():
    registry_error(shape="x[B, C] -> out*", args={"sizes": Arg("ints", help="h")}, outputs_from="sizes")


def test_variadic_input_requires_int_input_count():
    registry_error(shape="x* -> out", relation=lambda s: None)
    registry_error(shape="x* -> out", relation=lambda s: None,
                   args={"input_count": Arg(float, 2.0, help="h")})


def test_variadic_output_requires_outputs_from():
    registry_error(shape="x[B, C] -> out*", relation=lambda s: None)
    registry_error(shape="x[B, C] -> out*", relation=lambda s: None, outputs_from="missing")


@pytest.mark.parametrize(
    "arg",
    [
        Arg(int, 1, help="h"),                         # unbounded
        Arg(int, 1, min=0, help="h"),                  # no max
        Arg(int, 1, min=0, max=33, help="h"),          # beyond 32
        Arg(int, 1, min=-1, max=4, help="h"),          # below 0
        Arg(bool, True, help="h"),
        Arg("pair", 1, help="h"),
    ],
)
def test_outputs_from_argument_kind(arg):
    err = registry_error(shape="x[B, C] -> out*", relation=lambda s: None,
                         args={"n": arg}, outputs_from="n")
    assert err.location.field == "outputs_from"


def test_outputs_from_int_bounded_exclusively_is_fine():
    declare(shape="x[B, C] -> out*", relation=lambda s: None,
            args={"n": Arg(int, 1, min=-1, max=33, exclusive_min=True, exclusive_max=True, help="h")},
            outputs_from="n")


def test_outputs_from_without_variadic_output():
    err = registry_error(args={"sizes": Arg("ints", help="h")}, outputs_from="sizes")
    assert err.location.field == "outputs_from"


def test_port_count_bounds():
    inputs = ", ".join(f"p{i}[B, C]" for i in range(32))
    declare(shape=f"{inputs} -> out[B, C]")
    with pytest.raises(HNDLError) as info:
        declare(shape=", ".join(f"p{i}[B, C]" for i in range(33)) + " -> out[B, C]")
    assert info.value.code == "E_REGISTRY"


def test_symbol_count_bound():
    def shape(n):
        ports = ", ".join(f"p{i}[B, S{i}]" for i in range(n // 2))
        outs = ", ".join(f"q{i}[B, T{i}]" for i in range(n - n // 2))
        return f"{ports} -> {outs}"

    declare(shape=shape(64))
    with pytest.raises(HNDLError) as info:
        declare(shape=shape(66))
    assert info.value.code == "E_REGISTRY"


# -- constructor --------------------------------------------------------------------------


def test_constructor_accepts_args_symbols_and_shape_mappings():
    class Good(nn.Module):
        def __init__(self, width, *, depth=2, D, input_shapes, output_shapes):
            super().__init__()

    spec_of(declare(cls=Good, shape="x[B, D] -> out[B, D]",
                    args={"width": Arg(int, help="h"), "depth": Arg(int, 2, help="h")}))


def test_constructor_with_var_keyword_accepts_any_arg():
    class Loose(nn.Module):
        def __init__(self, **kwargs):
            super().__init__()

    spec_of(declare(cls=Loose, args={"width": Arg(int, help="h")}))


def test_constructor_missing_declared_arg():
    class Narrow(nn.Module):
        def __init__(self, width):
            super().__init__()

    err = registry_error(cls=Narrow, args={"width": Arg(int, help="h"), "depth": Arg(int, 1, help="h")})
    assert "constructor cannot accept the declared arguments" in err.message


def test_constructor_positional_only_arg_is_rejected():
    class PosOnly(nn.Module):
        def __init__(self, width, /):
            super().__init__()

    registry_error(cls=PosOnly, args={"width": Arg(int, help="h")})


def test_constructor_required_parameter_not_declared():
    class Needy(nn.Module):
        def __init__(self, width, secret):
            super().__init__()

    err = registry_error(cls=Needy, args={"width": Arg(int, help="h")})
    assert "constructor cannot accept the declared arguments" in err.message


def test_constructor_batch_symbol_cannot_be_required():
    class WantsBatch(nn.Module):
        def __init__(self, *, B):
            super().__init__()

    registry_error(cls=WantsBatch)


def test_plain_module_init_accepts_no_declared_args():
    class Bare(nn.Module):
        pass

    spec_of(declare(cls=Bare))
    registry_error(cls=type("Bare2", (nn.Module,), {}), args={"width": Arg(int, 1, help="h")})


def test_error_messages_name_alias_and_field():
    err = registry_error(alias="myop", version=0)
    assert "'myop'" in err.message and err.location.field == "version"


# --------------------------------------------------------------------------------------
# torch=TorchSpelling(...): how torch writes an operator, declared on the operator itself
# --------------------------------------------------------------------------------------

FLOAT_FIRST = {"eps": Arg(float, 1e-5, help="Epsilon.")}


def test_torch_spelling_defaults_and_normalizes_its_tables():
    spelling = TorchSpelling(signature="nn.SiLU()", names=("silu", "SiLU"), call="swish()",
                             keywords={"inplace2": "Drop it."})
    assert isinstance(spelling.names, MappingProxyType) and dict(spelling.names) == {"silu": "swish()",
                                                                                     "SiLU": "swish()"}
    assert isinstance(spelling.keywords, MappingProxyType) and spelling.keywords["inplace2"] == "Drop it."
    assert spelling.call_for("SILU", "swish") == "swish()" and spelling.call_for("relu", "swish") is None
    mapped = TorchSpelling(names={"mlp": "feed_forward()", "gelu_mlp": ""})
    assert mapped.call_for("gelu_mlp", "feed_forward") == "feed_forward(...)"  # no call: the alias
    empty = TorchSpelling()
    assert (empty.signature, empty.hint, empty.width_first, dict(empty.names), dict(empty.keywords),
            empty.unpack, empty.habit) == ("", "", False, {}, {}, "", None)
    with pytest.raises(Exception):
        spelling.hint = "other"  # frozen
    with pytest.raises(TypeError):
        spelling.names["x"] = "y"  # read-only
    assert hash(spelling) == hash(TorchSpelling(signature="nn.SiLU()", names=("silu", "SiLU"), call="swish()",
                                                keywords={"inplace2": "Drop it."}))
    assert pickle.loads(pickle.dumps(spelling)) == spelling


def test_an_operator_carries_its_torch_spelling_and_none_by_default():
    spelling = TorchSpelling(signature="mylib.Norm(width, eps=1e-5)", hint="Write op().", width_first=True)
    assert spec_of(declare(args=FLOAT_FIRST, torch=spelling)).torch is spelling
    assert spec_of(declare()).torch is None
    as_mapping = spec_of(declare(args=FLOAT_FIRST, torch={"signature": "mylib.Norm(width)", "width_first": True}))
    assert as_mapping.torch == TorchSpelling(signature="mylib.Norm(width)", width_first=True)


@pytest.mark.parametrize("fields, field", [
    ({"signature": 3}, "torch.signature"),
    ({"hint": None}, "torch.hint"),
    ({"hint": "x" * 501}, "torch.hint"),
    ({"call": b"swish()"}, "torch.call"),
    ({"unpack": ["a"]}, "torch.unpack"),
    ({"width_first": 1}, "torch.width_first"),
    ({"habit": "reshape"}, "torch.habit"),
    ({"names": "silu"}, "torch.names"),
    ({"names": 3}, "torch.names"),
    ({"names": ("not a name",)}, "torch.names"),
    ({"names": ("x" * 65,)}, "torch.names"),
    ({"names": (3,)}, "torch.names"),
    ({"names": {"silu": 3}}, "torch.names"),
    ({"names": tuple(f"n{i}" for i in range(33))}, "torch.names"),
    ({"keywords": ("size",)}, "torch.keywords"),
    ({"keywords": {"size": None}}, "torch.keywords"),
    ({"keywords": {"size": "y" * 501}}, "torch.keywords"),
    ({"keywords": {"": "empty"}}, "torch.keywords"),
])
def test_a_bad_torch_spelling_is_a_registry_error(fields, field):
    with pytest.raises(HNDLError) as info:
        TorchSpelling(**fields)
    assert info.value.code == "E_REGISTRY" and info.value.location.field == field, info.value
    with pytest.raises(HNDLError) as info:  # the mapping form is checked the same way, at declaration
        declare(torch=fields)
    assert info.value.code == "E_REGISTRY" and info.value.location.field == field, info.value


def test_operator_refuses_what_is_not_a_torch_spelling():
    assert registry_error(torch="nn.LayerNorm(64)").location.field == "torch"
    assert registry_error(torch={"signature": "x", "spelling": "y"}).location.field == "torch"
    # width_first refuses a transcribed integer width landing on a float: the first positional
    # argument must be a float for that to mean anything.
    error = registry_error(args={"width": Arg(int, 1, help="A width.")}, torch=TorchSpelling(width_first=True))
    assert error.location.field == "torch.width_first"
    assert registry_error(torch=TorchSpelling(width_first=True)).location.field == "torch.width_first"
