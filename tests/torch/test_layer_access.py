"""§7 "Layer access" on the Network facade: lookup, len, iteration, slices, fixed architecture."""

import pytest
import torch
from torch import nn

from hndl import HNDLError, ops
from hndl.torch import network, network_from_callable

MLP = """
linear(64)
relu()
linear()
"""
CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
BRANCHED = """
z1, z2 = split(64)
a = linear(z1, 128)
b = linear(z2, 128)
add(a, b)
"""
BRANCHED_CONTRACT = {"input_shape": ("B", 128), "output_shape": ("B", 128)}
NAMED_PORTS = """
hidden = linear(x, 32, name="hidden")
left = relu(hidden, name="left")
right = tanh(hidden, name="right")
"""
NAMED_CONTRACT = {"input_shape": ("B", 8), "output_shape": {"left": ("B", 32), "right": ("B", 32)}}


@pytest.fixture
def model():
    return network(MLP, device="cpu", **CONTRACT)


def test_spec_example_on_a_unary_chain(model):
    first = model[0]
    last = model[-1]
    first_by_name = model["n0"]
    assert first is first_by_name
    assert len(model) == 3
    layers = list(model)
    features = model[:2]
    assert layers == [model.nodes.n_n0, model.nodes.n_n1, model.nodes.n_n2]
    assert all(a is b for a, b in zip(layers, model.nodes.values()))
    assert last is model.nodes.n_n2 is model[2] is model["n2"]
    assert isinstance(features, nn.Sequential) and type(features) is nn.Sequential
    assert features[0] is first and features[1] is model[1]
    assert list(reversed(model)) == layers[::-1]
    assert "n1" in model and first in model and "n9" not in model and nn.ReLU() not in model


def test_lookup_errors(model):
    with pytest.raises(IndexError, match="out of range"):
        model[3]
    with pytest.raises(IndexError):
        model[-4]
    with pytest.raises(KeyError, match="'x'"):
        model["x"]  # a local-looking name is not a node ID
    with pytest.raises(KeyError):
        model["n_n0"]  # the registration key is not a node ID either
    with pytest.raises(TypeError, match="node IDs"):
        model[1.0]


def test_lookup_uses_explicit_node_ids_not_locals():
    def body(x):
        h = ops.linear(64, name="encoder")
        ops.relu(h)
        ops.linear()

    model = network_from_callable(body, device="cpu", **CONTRACT)
    assert model["encoder"] is model[0] is model.nodes.n_encoder
    with pytest.raises(KeyError):
        model["h"]


def test_slice_output_equals_running_the_first_layers(model):
    x = torch.randn(4, 128)
    features = model[:2]
    torch.testing.assert_close(features(x), model[1](model[0](x)))
    torch.testing.assert_close(model[2:](features(x)), model(x))
    torch.testing.assert_close(model[:](x), model(x))
    assert len(model[3:]) == 0
    with pytest.raises(ValueError, match="step"):
        model[::2]


def test_slices_share_parameters_mode_and_device_moves(model):
    keys = list(model.state_dict())
    features = model[:2]
    assert list(model.state_dict()) == keys == ["nodes.n_n0.weight", "nodes.n_n0.bias", "nodes.n_n2.weight", "nodes.n_n2.bias"]
    assert features[0].weight is model.nodes.n_n0.weight
    assert features.state_dict()["0.weight"].data_ptr() == model.state_dict()["nodes.n_n0.weight"].data_ptr()
    with torch.no_grad():
        model.nodes.n_n0.weight.add_(1.0)
    assert torch.equal(features[0].weight, model.nodes.n_n0.weight)

    model.eval()
    assert not model[0].training and not features[0].training and not model[:1].training
    model.train()
    assert features[0].training and features[1].training

    model.to(torch.float64)
    assert features[0].weight.dtype == torch.float64 and features[0].weight is model.nodes.n_n0.weight
    features.to(torch.float32)  # moving the slice moves the shared modules of the model
    assert model.nodes.n_n0.weight.dtype == torch.float32
    assert list(model.state_dict()) == keys


def test_slices_of_chains_need_tensor_in_tensor_out_adapters():
    model = network("(a,) = chunk(1)\nlinear(a, 10)", input_shape=("B", 8), output_shape=("B", 10), device="cpu")
    assert len(model) == 2 and model[0] is model["n0"]
    x = torch.randn(2, 8)
    torch.testing.assert_close(model[1:](x), model(x))  # the chunk is not part of this slice
    with pytest.raises(TypeError, match="'n0' .*chunk.*tensor-in/tensor-out"):
        model[:1]
    with pytest.raises(TypeError, match="chunk"):
        model[:]


@pytest.mark.parametrize("source, contract", [(BRANCHED, BRANCHED_CONTRACT), (NAMED_PORTS, NAMED_CONTRACT)])
def test_branched_and_named_port_graphs_support_name_lookup_only(source, contract):
    model = network(source, device="cpu", **contract)
    first = model.plan.nodes[0].id
    assert model[first] is getattr(model.nodes, f"n_{first}")
    assert all(model[node.id] is model.nodes[f"n_{node.id}"] for node in model.plan.nodes)
    with pytest.raises(KeyError):
        model["missing"]
    for attempt in (lambda: model[0], lambda: model[-1], lambda: len(model), lambda: list(model),
                    lambda: iter(model), lambda: model[:2]):
        with pytest.raises(TypeError, match="consecutive unary chain") as error:
            attempt()
        assert f"model[{first!r}]" in str(error.value)
    assert bool(model)  # __len__ failing does not make the model unusable in a condition


def test_branched_error_names_the_reason():
    model = network(BRANCHED, device="cpu", **BRANCHED_CONTRACT)
    with pytest.raises(TypeError, match="'n0' \\(split\\) has 2 outputs"):
        len(model)
    fan_out = network("h = linear(64)\nr = relu(h)\nadd(h, r)", device="cpu",
                      input_shape=("B", 128), output_shape=("B", 64))
    with pytest.raises(TypeError, match="has 2 inputs"):
        fan_out[0]
    named = network(NAMED_PORTS, device="cpu", **NAMED_CONTRACT)
    with pytest.raises(TypeError, match="2 public outputs \\(left, right\\)"):
        list(named)


def test_structural_changes_are_rejected(model):
    keys, layers = list(model.state_dict()), list(model)
    forbidden = [
        lambda: model.__setitem__(0, nn.Linear(128, 64)),
        lambda: model.__setitem__("n0", nn.Linear(128, 64)),
        lambda: model.__setitem__(slice(0, 1), [nn.Linear(128, 64)]),
        lambda: model.__delitem__(0),
        lambda: model.__delitem__("n0"),
        lambda: model.insert(0, nn.Linear(128, 128)),
        lambda: model.append(nn.Linear(10, 10)),
        lambda: model.extend([nn.Linear(10, 10)]),
        lambda: model.pop(0),
        lambda: setattr(model, "extra", nn.Linear(2, 2)),
        lambda: setattr(model, "scale", nn.Parameter(torch.ones(1))),
        lambda: setattr(model, "nodes", nn.ModuleDict()),
        lambda: setattr(model, "plan", None),
        lambda: delattr(model, "nodes"),
        lambda: model.add_module("extra", nn.Linear(2, 2)),
        lambda: model.register_module("extra", nn.Linear(2, 2)),
        lambda: model.register_parameter("scale", nn.Parameter(torch.ones(1))),
        lambda: model.register_buffer("count", torch.zeros(1)),
        lambda: model.nodes.__setitem__("n_n0", nn.Linear(128, 64)),
        lambda: setattr(model.nodes, "n_n0", nn.Linear(128, 64)),
        lambda: setattr(model.nodes, "n_extra", nn.Linear(2, 2)),
        lambda: model.nodes.__delitem__("n_n1"),
        lambda: delattr(model.nodes, "n_n1"),
        lambda: model.nodes.update({"n_extra": nn.Linear(2, 2)}),
        lambda: model.nodes.pop("n_n1"),
        lambda: model.nodes.clear(),
        lambda: model.nodes.add_module("n_extra", nn.Linear(2, 2)),
    ]
    for attempt in forbidden:
        with pytest.raises(TypeError, match="resolve/build a new network"):
            attempt()
    assert list(model.state_dict()) == keys
    assert all(a is b for a, b in zip(model, layers)) and len(model) == 3
    assert model(torch.randn(2, 128)).shape == (2, 10)


def test_ordinary_attribute_state_and_parameter_updates_still_work(model):
    model.eval()
    assert not model.training and not model[0].training
    model.train()
    assert model.training
    model.note = "plain attributes are fine"
    assert model.note == "plain attributes are fine"
    del model.note

    x = torch.randn(4, 128)
    before = model(x).detach()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x).square().sum().backward()
    optimizer.step()
    assert not torch.equal(model(x), before)

    state = {key: torch.zeros_like(value) for key, value in model.state_dict().items()}
    model.load_state_dict(state)
    assert torch.count_nonzero(model[0].weight) == 0
    with torch.no_grad():
        model[0].weight.data.copy_(torch.ones_like(model[0].weight))
        model[-1].bias.fill_(2.0)
    assert torch.equal(model(x), torch.full((4, 10), 2.0))
    model.zero_grad()
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def test_printing_and_registration_are_unchanged_by_layer_access(model):
    text, keys = repr(model), list(model.state_dict())
    modules = [name for name, _ in model.named_modules()]
    _ = model[0], model["n1"], model[-1], list(model), len(model), model[:2], model[1:]
    assert repr(model) == str(model) == text
    assert text.splitlines()[1].split()[:2] == ["index", "name"]
    assert list(model.state_dict()) == keys
    assert [name for name, _ in model.named_modules()] == modules == ["", "nodes", "nodes.n_n0", "nodes.n_n1", "nodes.n_n2"]
    assert repr(model.nodes).startswith("ModuleDict(")


def test_torch_compile_still_traces_the_sealed_network(model):
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    x = torch.randn(3, 128)
    torch.testing.assert_close(compiled(x), model(x))


def test_forward_interface_is_unchanged(model):
    x = torch.randn(2, 128)
    assert torch.equal(model(x), model(x=x))
    with pytest.raises(HNDLError) as error:
        model(x, x=x)
    assert error.value.code == "E_BINDING"


NAMED_OUTPUT_CHAIN = "linear(64)\nrelu()\nout1 = linear()"


@pytest.mark.parametrize("source, contract, named", [
    (NAMED_OUTPUT_CHAIN, {"input_shape": ("B", 128), "output_shape": {"out1": ("B", 10)}}, "output 'out1'"),
    (MLP, {"input_shape": {"z": ("B", 128)}, "output_shape": ("B", 10)}, "input 'z'"),
    (NAMED_OUTPUT_CHAIN, {"input_shape": {"z": ("B", 128)}, "output_shape": {"out1": ("B", 10)}},
     "input 'z' and output 'out1'"),
], ids=["named output", "named input", "both named"])
def test_a_chain_between_named_ports_supports_name_lookup_only(source, contract, named):
    """§7: "a graph with named ports on either side supports node-name lookup only", even when
    its nodes form a unary chain."""
    model = network(source, device="cpu", **contract)
    assert model["n0"] is model.nodes.n_n0 and "n2" in model
    for attempt in (lambda: model[0], lambda: model[-1], lambda: len(model), lambda: list(model), lambda: model[:2]):
        with pytest.raises(TypeError) as error:
            attempt()
        message = str(error.value)
        assert f"the graph names its {named}, and a graph with named ports supports node-name lookup only" in message
        assert "model['n0']" in message


def test_a_mapping_naming_exactly_x_and_output_is_still_a_chain():
    """§3: such a mapping is identical to the tuple contract, so the sequence protocol stays."""
    model = network(MLP, device="cpu", input_shape={"x": ("B", 128)}, output_shape={"output": ("B", 10)})
    assert len(model) == 3 and model[0] is model["n0"] and isinstance(model[:2], nn.Sequential)
