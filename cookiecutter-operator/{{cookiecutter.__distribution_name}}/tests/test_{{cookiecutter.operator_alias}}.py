"""{{ cookiecutter.__identity }}@1: the declaration, numerics against the handwritten formula forward
and backward, gradcheck in float64, shape inference through the node, and error codes."""

import pytest
import torch

import hndl
from hndl import HNDLError, Registry
from hndl.declaration import spec_of
from hndl.torch import network
from {{ cookiecutter.__module_name }}.{{ cookiecutter.operator_alias }} import {{ cookiecutter.__class_name }}

REGISTRY = Registry.from_packs("{{ cookiecutter.pack_name }}")


def _formula(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def _model(source, shape, output_shape=None, **kwargs):
    return network(source, input_shape=shape, output_shape=output_shape or shape, device="cpu",
                   registry=REGISTRY, **kwargs)


def _fails(source, shape, output_shape=None, **kwargs):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=shape, output_shape=output_shape or shape, registry=REGISTRY, **kwargs)
    return error.value


def test_declaration():
    spec = spec_of({{ cookiecutter.__class_name }})
    assert spec.alias == "{{ cookiecutter.operator_alias }}"
    assert spec.qualified == "{{ cookiecutter.__identity }}@1"
    assert REGISTRY.get("{{ cookiecutter.operator_alias }}") is REGISTRY.by_identity("{{ cookiecutter.__identity }}@1")
    assert str(spec.shape) == "x[B, ..., D] -> out[B, ..., D]"
    assert spec.category == "normalization" and spec.summary and spec.docstring
    assert spec.positional_args == ("alpha_init",)
    assert spec.args["alpha_init"].default == 0.5 and spec.args["alpha_init"].help
    assert spec.reference is not None and spec.examples


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_parameters_start_at_alpha_init_ones_and_zeros(shape):
    model = _model("{{ cookiecutter.operator_alias }}(0.25)", shape)
    module = model["n0"]
    node = model.plan.nodes[0]
    assert node.args == {"alpha_init": 0.25} and node.provenance["alpha_init"] == "explicit"
    assert node.input_shapes["x"] == shape and node.output_shapes["out"] == shape
    assert dict((name, tuple(p.shape)) for name, p in module.named_parameters()) == {
        "alpha": (1,), "weight": (8,), "bias": (8,)}
    assert torch.equal(module.alpha, torch.tensor([0.25]))
    assert torch.equal(module.weight, torch.ones(8)) and torch.equal(module.bias, torch.zeros(8))


@pytest.mark.parametrize("shape", [("B", 8), ("B", 5, 8)])
def test_numerics_forward_and_backward_against_the_formula(shape):
    model = _model("{{ cookiecutter.operator_alias }}()", shape)
    module = model["n0"]
    with torch.no_grad():
        module.alpha.fill_(0.7)
        module.weight.copy_(torch.randn(8))
        module.bias.copy_(torch.randn(8))
    x = torch.randn(3, *shape[1:], requires_grad=True)
    saved = x.detach().clone()
    out = model(x)
    assert torch.equal(x.detach(), saved)  # the input is never modified
    expected = _formula(saved, module.alpha, module.weight, module.bias)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, spec_of({{ cookiecutter.__class_name }}).reference(module)(saved))

    upstream = torch.randn_like(out)
    parameters = (module.alpha, module.weight, module.bias)
    got = torch.autograd.grad((out * upstream).sum(), (x, *parameters))
    by_hand = [t.detach().clone().requires_grad_(True) for t in (saved, *parameters)]
    want = torch.autograd.grad((_formula(*by_hand) * upstream).sum(), by_hand)
    for name, a, b in zip(("x", "alpha", "weight", "bias"), got, want):
        torch.testing.assert_close(a, b, msg=f"gradient of {name}")


def test_large_inputs_saturate_at_plus_or_minus_weight():
    model = _model("{{ cookiecutter.operator_alias }}()", ("B", 3))
    out = model(torch.tensor([[-1e4, 0.0, 1e4]]))
    torch.testing.assert_close(out, torch.tensor([[-1.0, 0.0, 1.0]]))


def test_gradcheck_in_float64():
    module = _model("{{ cookiecutter.operator_alias }}()", ("B", 3, 4))["n0"].double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x,))
    assert torch.autograd.gradgradcheck(module, (x,))


def test_train_and_eval_agree_and_draw_nothing():
    model = _model("{{ cookiecutter.operator_alias }}()", ("B", 6))
    x = torch.randn(4, 6)
    before = torch.get_rng_state()
    trained = model(x)
    model.eval()
    assert torch.equal(model(x), trained)
    assert torch.equal(torch.get_rng_state(), before)


def test_the_width_passes_through_the_node_both_ways():
    # Two calls in a row: the contract fixes both ends, and each node reads D from its neighbour.
    plan = hndl.resolve("{{ cookiecutter.operator_alias }}()\n{{ cookiecutter.operator_alias }}()",
                        input_shape=("B", 4, 16), output_shape=("B", 4, 16), registry=REGISTRY)
    assert [node.output_shapes["out"] for node in plan.nodes] == [("B", 4, 16), ("B", 4, 16)]


def test_the_plan_names_the_identity_and_restores():
    plan = hndl.resolve("{{ cookiecutter.operator_alias }}()", input_shape=("B", 8), output_shape=("B", 8),
                        registry=REGISTRY)
    assert plan.nodes[0].op == "{{ cookiecutter.__identity }}@1"
    restored = hndl.ResolvedPlan.from_json(plan.to_json(), registry=REGISTRY)
    assert restored.semantic_digest == plan.semantic_digest
    with pytest.raises(HNDLError) as error:
        hndl.ResolvedPlan.from_json(plan.to_json(), registry=Registry.from_packs())
    assert error.value.code == "E_STATE_VERSION"


@pytest.mark.parametrize("source", [
    "{{ cookiecutter.operator_alias }}(0)", "{{ cookiecutter.operator_alias }}(-0.5)",
    "{{ cookiecutter.operator_alias }}(True)", '{{ cookiecutter.operator_alias }}("0.5")',
    "{{ cookiecutter.operator_alias }}(0.5, 0.5)", "{{ cookiecutter.operator_alias }}(beta=1.0)",
])
def test_invalid_arguments_are_argument_errors(source):
    assert _fails(source, ("B", 8)).code == "E_ARGUMENT"


def test_rank_four_is_rejected():
    error = _fails("{{ cookiecutter.operator_alias }}()", ("B", 3, 4, 4))
    assert error.code == "E_CONSTRAINT" and error.location.node == "n0"


def test_a_width_change_is_a_constraint_error():
    assert _fails("{{ cookiecutter.operator_alias }}()", ("B", 8), ("B", 9)).code == "E_CONSTRAINT"


def test_an_integer_input_is_a_dtype_error():
    assert _fails("{{ cookiecutter.operator_alias }}()", ("B", 8), input_dtype="int64").code == "E_DTYPE"
