"""The details of the resolver issue that are easy to miss, each pinned by a test."""

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.torch import build

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


def fails(source, code, input_shape=("B", 8), output_shape=("B", 4), **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)
    assert error.value.code == code, str(error.value)
    assert error.value.remedies and all(remedy.strip() for remedy in error.value.remedies)
    return error.value


@pytest.mark.parametrize("source", [
    'linear(4, tie="n0")',
    'linear(4, weight="n0")',
    'linear(4, shared_with="n0")',
    'linear(4, tied_to="n0")',
])
def test_weight_tying_requested_as_an_argument_fails(source):
    fails(source, "E_ARGUMENT")


def test_weight_tying_by_reusing_a_node_name_fails():
    fails('linear(8, name="shared")\nlinear(4, name="shared")', "E_NAME")


def test_weight_tying_by_sharing_a_module_or_storage_across_nodes_fails_at_build():
    registry = Registry.builtins()
    shared = nn.Parameter(torch.ones(4, 4))

    @registry.operator("tied", identity="test.tied", summary="Multiply by one shared matrix.",
                       shape="x[B, 4] -> out[B, 4]")
    class Tied(nn.Module):
        """Reuses one global parameter: exactly what HNDL must refuse between nodes."""

        def __init__(self):
            super().__init__()
            self.weight = shared

        def forward(self, x):
            return x @ self.weight

    plan = hndl.resolve("tied()\ntied()", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=registry)
    assert error.value.code == "E_REGISTRY"


@pytest.mark.parametrize("alias", ["linear", "conv", "deconv"])
def test_no_activation_shorthand_on_linear_conv_or_deconv(alias):
    extra = "" if alias == "linear" else ", kernel_size=3"
    shapes = {"input_shape": ("B", 8)} if alias == "linear" else {"input_shape": ("B", 2, 8, 8)}
    fails(f'{alias}(4{extra}, activation="relu")', "E_ARGUMENT", output_shape=("B", 4), **shapes)


def test_the_resolver_never_inserts_removes_or_moves_an_activation():
    plan = hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32))
    authored = [line.split("(")[0] for line in GENERATOR.strip().splitlines()]
    assert [node.alias for node in plan.nodes] == authored
    # no tanh is implied by an image-shaped output either
    plan = hndl.resolve("linear()\nreshape(3, 4, 4)", input_shape=("B", 8), output_shape=("B", 3, 4, 4))
    assert [node.alias for node in plan.nodes] == ["linear", "reshape"]


def test_versioned_defaults_and_a_kernel_size_only_a_policy_may_supply():
    fails("conv(4)", "E_ARGUMENT", input_shape=("B", 2, 8, 8), output_shape=("B", 4, 6, 6))
    plan = hndl.resolve("conv(4, kernel_size=3)", input_shape=("B", 2, 8, 8), output_shape=("B", 4, 6, 6))
    node = plan.nodes[0]
    assert node.args["stride"] == (1, 1) and node.provenance["stride"] == "default"
    assert node.args["padding"] == (0, 0) and node.args["dilation"] == (1, 1)
    assert node.args["groups"] == 1 and node.args["bias"] is True
    plan = hndl.resolve('conv(4, policy="down2")', input_shape=("B", 2, 8, 8), output_shape=("B", 4, 4, 4))
    assert plan.nodes[0].args["kernel_size"] == (4, 4) and plan.nodes[0].provenance["kernel_size"] == "policy"
    assert plan.nodes[0].source["policy"] == "spatial.down2_conv@1"


@pytest.mark.parametrize("source", [
    "linear(None)", "linear(-1)", "linear(0)", "linear(out_features=None)", "linear(out_features=-1)",
    "linear(out_features=0)",
])
def test_placeholders_never_stand_for_an_omitted_dimension(source):
    fails(source, "E_ARGUMENT")


@pytest.mark.parametrize("source", ["linear(...)", "linear(out_features=...)", "linear(out_features=auto)"])
def test_ellipsis_and_names_are_not_placeholders_either(source):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=("B", 8), output_shape=("B", 4))
    assert error.value.code in ("E_SYNTAX", "E_NAME")


def test_concat_rejects_a_negative_axis():
    fails("concat(x, x, axis=-1)", "E_ARGUMENT", output_shape=("B", 16))


def test_each_inferred_value_names_the_relations_and_facts_it_came_from():
    plan = hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32))
    derivation = plan.nodes[0].source["derivations"]["out_features"]
    text = "\n".join(derivation)
    assert "output contract 'output'" in text
    assert "deconv" in text and "= 2 * x[2]" in text  # the doubling stages
    assert "reshape" in text and "8192" in text
    assert plan.nodes[0].provenance["out_features"] == "inferred"


def test_a_contradiction_reports_the_chain_of_facts_behind_it():
    error = fails(GENERATOR, "E_CONSTRAINT", input_shape=("B", 128), output_shape=("B", 3, 30, 30))
    assert "3.75" in error.message
    assert sum("= 2 * x[2]" in fact for fact in error.chain) == 3  # three exact doubling stages
    assert error.location.node is not None


def test_an_ambiguous_inverse_reports_its_interval():
    error = fails('linear()\nreshape(3)\nconv(4, policy="down2")', "E_AMBIGUOUS",
                  output_shape=("B", 4, 8, 8))
    assert "16..17" in error.message


def test_limits_reach_the_resolver_through_every_entry_point(tmp_path):
    path = tmp_path / "g.hndl"
    path.write_text(GENERATOR, encoding="utf-8")
    contract = {"input_shape": ("B", 128), "output_shape": ("B", 3, 32, 32), "limits": {"max_nodes": 5}}
    for call in (lambda: hndl.resolve(GENERATOR, **contract), lambda: hndl.resolve_file(path, **contract)):
        with pytest.raises(HNDLError) as error:
            call()
        assert error.value.code == "E_RESOURCE"
    with pytest.raises(HNDLError) as error:
        hndl.resolve(GENERATOR, input_shape=("B", 128), output_shape=("B", 3, 32, 32),
                     limits={"max_elements": 4096})
    assert error.value.code == "E_RESOURCE"


def test_a_batch_relation_operator_shares_batches_only_where_its_relation_says():
    registry = Registry.builtins()
    seen = {}

    def stack_relation(s):
        s.share_batch("x", "y")  # the two inputs carry the same batch entry
        for port in ("x", "y", "out"):
            s.rank(port, 2)
        s.scale("out", 1, "x", 1)
        s.scale("y", 1, "x", 1)
        left, right = s.batch("x"), s.batch("y")
        seen["inputs"] = (left, right)
        if left is not None:
            multiple = 1 if left == "B" else int(left.split("*")[0])
            s.axis("out", 0, f"{2 * multiple}*B")

    @registry.operator("stack2", identity="test.stack2", summary="Stack two batches of one width.",
                       shape="x, y -> out", relation=stack_relation, batch="relation")
    class Stack2(nn.Module):
        """Concatenates two equally sized batches along axis 0."""

        def forward(self, x, y):
            return torch.cat((x, y))

    plan = hndl.resolve(
        "both = stack2(x, x)\na, b = chunk(both, 2, dim=0)\nadd(a, b)",
        input_shape=("B", 3), output_shape=("B", 3), registry=registry,
    )
    assert seen["inputs"] == ("B", "B")
    assert plan.nodes[0].output_shapes["out"] == ("2*B", 3)
    with pytest.raises(HNDLError) as error:  # y carries 2*B while share_batch demands x's B
        hndl.resolve(
            "both = stack2(x, x)\nstack2(x, both)", input_shape=("B", 3), output_shape=("B", 3),
            registry=registry,
        )
    assert error.value.code == "E_CONSTRAINT"
