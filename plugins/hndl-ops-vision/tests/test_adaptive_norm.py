"""adaptive_norm@1: the §8 declaration and style graph, the §7 split variant, numerics
against the spec formula and the declared reference, numerical validity at zero variance,
gradcheck in float64, and the batch/channel/eps error codes."""

import pytest
import torch
import torch.nn.functional as F

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.torch import build, network
from hndl_ops_vision.adaptive_norm import AdaptiveNorm

STYLE_GRAPH = """
mapping = linear(z, 256, name="mapping")
w = relu(name="w")
project = linear(w, name="project")
seed = reshape(project, 64, 4, 4, name="seed")
style = linear(w, name="style", init={"weight": 0, "bias": 0})
features = adaptive_norm(seed, style, name="norm")
"""
STYLE_CONTRACTS = dict(input_shape={"z": ("B", 128)}, output_shape={"features": ("B", 64, 4, 4)})

SPLIT_GRAPH = """
z1, z2 = split(64)
linear(z1)
features = reshape(32, 4, 4)
adaptive_norm(features, z2)
"""


def _formula(x, params, eps=1e-5):
    """§8, written out: population variance over the spatial axes, then (1 + dg) * n + beta."""
    channels = x.shape[1]
    mean = x.mean(dim=(2, 3), keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
    normalized = (x - mean) / torch.sqrt(variance + eps)
    delta_gamma, beta = params[:, :channels], params[:, channels:]
    return (1 + delta_gamma)[:, :, None, None] * normalized + beta[:, :, None, None]


def _fails(source, input_shape, output_shape):
    with pytest.raises(HNDLError) as error:
        hndl.resolve(source, input_shape=input_shape, output_shape=output_shape)
    return error.value


def test_declaration_is_the_section_8_contract():
    spec = spec_of(AdaptiveNorm)
    assert spec.alias == "adaptive_norm" and spec.qualified == "adaptive_norm@1"
    assert str(spec.shape) == "x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]"
    assert spec.summary == "Instance-normalize features, then apply a per-example learned scale and bias."
    eps = spec.args["eps"]
    assert eps.type is float and eps.default == 1e-5
    assert eps.min == 0 and eps.exclusive_min
    assert eps.help == "Added to the variance for stability."
    assert spec.category == "normalization"
    assert spec.input_ports() == ("x", "params")
    assert spec.relation is None  # the DSL alone carries 2*C and the shared axes
    assert spec.reference is not None


def test_style_graph_resolves_both_omitted_widths():
    plan = hndl.resolve(STYLE_GRAPH, **STYLE_CONTRACTS)
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["project"].args["out_features"] == 1024
    assert nodes["project"].provenance["out_features"] == "inferred"
    assert nodes["style"].args["out_features"] == 128
    assert nodes["style"].provenance["out_features"] == "inferred"
    assert nodes["seed"].output_shapes["out"] == ("B", 64, 4, 4)
    assert nodes["norm"].input_shapes == {"x": ("B", 64, 4, 4), "params": ("B", 128)}
    assert nodes["norm"].output_shapes["out"] == ("B", 64, 4, 4)
    assert nodes["norm"].args["eps"] == 1e-5 and nodes["norm"].provenance["eps"] == "default"
    assert dict(nodes["norm"].inputs) == {"x": "node:seed/out", "params": "node:style/out"}
    assert dict(nodes["project"].inputs) == dict(nodes["style"].inputs) == {"x": "node:w/out"}
    assert nodes["style"].initialization["kind"] == "torch_default@1"
    assert dict(nodes["style"].initialization["overrides"]) == {"weight": 0.0, "bias": 0.0}
    assert dict(nodes["project"].initialization["overrides"]) == {}


def test_style_graph_fans_out_once_and_starts_as_plain_instance_norm():
    model = network(STYLE_GRAPH, device="cpu", **STYLE_CONTRACTS)
    calls = {"mapping": 0, "w": 0, "project": 0, "style": 0, "norm": 0}
    for name in calls:
        getattr(model.nodes, f"n_{name}").register_forward_hook(
            lambda module, args, output, name=name: calls.__setitem__(name, calls[name] + 1)
        )
    style = model.nodes.n_style
    assert torch.count_nonzero(style.weight) == 0 and torch.count_nonzero(style.bias) == 0
    z = torch.randn(3, 128, requires_grad=True)
    out = model(z)
    assert calls == {"mapping": 1, "w": 1, "project": 1, "style": 1, "norm": 1}
    mapping, project = model.nodes.n_mapping, model.nodes.n_project
    w = torch.relu(F.linear(z, mapping.weight, mapping.bias))
    seed = F.linear(w, project.weight, project.bias).reshape(3, 64, 4, 4)
    torch.testing.assert_close(out, F.instance_norm(seed, eps=1e-5))
    # Both paths are differentiable: the style affine receives gradients even at zero init.
    out.pow(2).sum().backward()
    assert style.weight.grad is not None and style.weight.grad.abs().sum() > 0
    assert mapping.weight.grad is not None and z.grad is not None


def test_style_graph_feature_and_style_gradients_match_a_handwritten_model():
    model = network(STYLE_GRAPH, device="cpu", **STYLE_CONTRACTS)
    with torch.no_grad():
        model.nodes.n_style.weight.normal_(0, 0.05)
        model.nodes.n_style.bias.normal_(0, 0.05)
    layers = {name: getattr(model.nodes, f"n_{name}") for name in ("mapping", "project", "style")}
    clones = {name: torch.nn.Linear(layer.in_features, layer.out_features) for name, layer in layers.items()}
    for name, clone in clones.items():
        clone.load_state_dict(layers[name].state_dict())
    z = torch.randn(2, 128)

    def handwritten(z):
        w = torch.relu(clones["mapping"](z))
        seed = clones["project"](w).reshape(-1, 64, 4, 4)
        return _formula(seed, clones["style"](w))

    upstream = torch.randn(2, 64, 4, 4)
    out = model(z)
    expected = handwritten(z)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for name in clones:
        torch.testing.assert_close(layers[name].weight.grad, clones[name].weight.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(layers[name].bias.grad, clones[name].bias.grad, rtol=1e-4, atol=1e-5)


def test_split_variant_infers_the_projection_width():
    plan = hndl.resolve(SPLIT_GRAPH, input_shape=("B", 128), output_shape=("B", 32, 4, 4))
    split, linear, reshape, norm = plan.nodes
    assert split.output_shapes == {"first": ("B", 64), "rest": ("B", 64)}
    assert linear.args["out_features"] == 512
    assert reshape.output_shapes["out"] == ("B", 32, 4, 4)
    assert norm.input_shapes["params"] == ("B", 64)


def test_split_variant_runs_against_the_formula():
    model = network(SPLIT_GRAPH, input_shape=("B", 128), output_shape=("B", 32, 4, 4), device="cpu")
    layer = model.nodes.n_n1
    x = torch.randn(2, 128, requires_grad=True)
    out = model(x)
    z1, z2 = x[:, :64], x[:, 64:]
    torch.testing.assert_close(out, _formula(F.linear(z1, layer.weight, layer.bias).reshape(2, 32, 4, 4), z2))
    out.sum().backward()
    assert x.grad[:, 64:].abs().sum() > 0 and x.grad[:, :64].abs().sum() > 0


def test_channels_inferred_backward_from_the_params_width():
    plan = hndl.resolve(
        "f = conv(x, kernel_size=1)\nadaptive_norm(f, y)\nflatten()",
        input_shape={"x": ("B", 3, 4, 4), "y": ("B", 64)},
        output_shape=("B", 512),
    )
    assert plan.nodes[0].args["out_channels"] == 32


def test_params_width_is_inferred_forward_as_twice_the_channels():
    plan = hndl.resolve("p = linear(y)\nadaptive_norm(x, p)", input_shape={"x": ("B", 4, 3, 3), "y": ("B", 5)},
                        output_shape=("B", 4, 3, 3))
    assert plan.nodes[0].args["out_features"] == 8


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_numerics_against_the_formula_and_the_declared_reference(eps):
    module = AdaptiveNorm(eps=eps)
    reference = spec_of(AdaptiveNorm).reference(module)
    x = torch.randn(3, 4, 5, 6, requires_grad=True)
    params = torch.randn(3, 8, requires_grad=True)
    out = module(x, params)
    torch.testing.assert_close(out, _formula(x, params, eps))
    torch.testing.assert_close(out, reference(x, params))
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad((out * upstream).sum(), (x, params))
    expected = torch.autograd.grad((_formula(x, params, eps) * upstream).sum(), (x, params))
    torch.testing.assert_close(grads, expected)


def test_built_node_matches_the_formula_with_explicit_eps():
    model = network("adaptive_norm(x, y, eps=0.1)", input_shape={"x": ("B", 4, 3, 3), "y": ("B", 8)},
                    output_shape=("B", 4, 3, 3), device="cpu")
    assert model.plan.nodes[0].args["eps"] == 0.1 and model.plan.nodes[0].provenance["eps"] == "explicit"
    x, params = torch.randn(2, 4, 3, 3), torch.randn(2, 8)
    torch.testing.assert_close(model(x, params), _formula(x, params, 0.1))
    torch.testing.assert_close(model(x=x, y=params), _formula(x, params, 0.1))
    model.eval()
    torch.testing.assert_close(model(x, params), _formula(x, params, 0.1))  # identical in eval mode
    assert list(model.buffers()) == [] and list(model.parameters()) == []


def test_variance_is_the_population_variance():
    module = AdaptiveNorm(eps=1e-12)
    x = torch.tensor([1.0, 3.0, 1.0, 3.0], dtype=torch.float64).reshape(1, 1, 2, 2)
    params = torch.zeros(1, 2, dtype=torch.float64)
    # mean 2, population variance 1: normalized values are exactly -1 and +1.
    torch.testing.assert_close(module(x, params), torch.tensor([-1.0, 1.0, -1.0, 1.0], dtype=torch.float64).reshape(1, 1, 2, 2))


def test_constant_input_is_finite_forward_and_backward():
    module = AdaptiveNorm()
    x = torch.full((2, 3, 4, 4), 5.0, requires_grad=True)
    params = torch.randn(2, 6, requires_grad=True)
    out = module(x, params)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, params[:, 3:, None, None].expand(2, 3, 4, 4))  # normalized is zero
    gx, gp = torch.autograd.grad((out * torch.randn_like(out)).sum(), (x, params))
    assert torch.isfinite(gx).all() and torch.isfinite(gp).all()


def test_non_constant_input_is_finite_forward_and_backward():
    module = AdaptiveNorm()
    x = (torch.randn(2, 3, 4, 4) * 1e3).requires_grad_(True)
    params = torch.randn(2, 6, requires_grad=True)
    out = module(x, params)
    assert torch.isfinite(out).all()
    gx, gp = torch.autograd.grad(out.pow(2).sum(), (x, params))
    assert torch.isfinite(gx).all() and torch.isfinite(gp).all()


def test_gradcheck_and_gradgradcheck_in_float64():
    module = AdaptiveNorm(eps=1e-3)
    x = torch.randn(2, 3, 3, 2, dtype=torch.float64, requires_grad=True)
    params = torch.randn(2, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(module, (x, params))
    assert torch.autograd.gradgradcheck(module, (x, params))


def test_gradcheck_on_the_built_submodule():
    model = network("adaptive_norm(x, y)", input_shape={"x": ("B", 2, 3, 3), "y": ("B", 4)},
                    output_shape=("B", 2, 3, 3), device="cpu")
    node = model.nodes.n_n0.double()
    x = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    params = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(node, (x, params))


def test_wrong_params_width_is_a_constraint_error():
    error = _fails("adaptive_norm(x, y)", {"x": ("B", 4, 3, 3), "y": ("B", 10)}, ("B", 4, 3, 3))
    assert error.code == "E_CONSTRAINT"


def test_odd_params_width_cannot_satisfy_twice_the_channels():
    error = _fails(
        "f = conv(x, kernel_size=1)\nadaptive_norm(f, y)\nflatten()",
        {"x": ("B", 3, 4, 4), "y": ("B", 65)},
        ("B", 512),
    )
    assert error.code == "E_CONSTRAINT"


def test_wrong_batch_contract_is_a_constraint_error():
    error = _fails("p = concat(y, y, axis=0)\nadaptive_norm(x, p)", {"x": ("B", 4, 3, 3), "y": ("B", 8)}, ("B", 4, 3, 3))
    assert error.code == "E_CONSTRAINT"


def test_spatial_and_channel_shapes_are_shared_with_the_output():
    error = _fails("adaptive_norm(x, y)", {"x": ("B", 4, 3, 3), "y": ("B", 8)}, ("B", 4, 3, 2))
    assert error.code == "E_CONSTRAINT"
    error = _fails("adaptive_norm(x, y)", {"x": ("B", 4, 3, 3), "y": ("B", 8)}, ("B", 3, 3, 3))
    assert error.code == "E_CONSTRAINT"


def test_non_image_features_are_a_constraint_error():
    error = _fails("adaptive_norm(x, y)", {"x": ("B", 4, 3), "y": ("B", 8)}, ("B", 4, 3))
    assert error.code == "E_CONSTRAINT"


def test_missing_params_is_a_binding_error():
    error = _fails("adaptive_norm(x)", {"x": ("B", 4, 3, 3), "y": ("B", 8)}, ("B", 4, 3, 3))
    assert error.code == "E_BINDING"


@pytest.mark.parametrize("eps", ["0", "0.0", "-1e-5", "True", '"small"'])
def test_non_positive_or_invalid_eps_is_an_argument_error(eps):
    error = _fails(f"adaptive_norm(x, y, eps={eps})", {"x": ("B", 4, 3, 3), "y": ("B", 8)}, ("B", 4, 3, 3))
    assert error.code == "E_ARGUMENT"


def test_integer_params_are_a_dtype_error():
    with pytest.raises(HNDLError) as error:
        hndl.resolve("adaptive_norm(x, y)", input_shape={"x": ("B", 2, 2, 2), "y": ("B", 4)},
                     output_shape=("B", 2, 2, 2), input_dtype={"y": "int64"})
    assert error.value.code == "E_DTYPE"
