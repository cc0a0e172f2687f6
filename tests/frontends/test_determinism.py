"""Configuration and trusted capture build identical semantic plans (§14 "Determinism").

For every declared operator example and every example of the specification, the same
architecture written as configuration and as a Python callable must resolve to the same
concrete nodes, arguments, ports, shapes and construction records; only frontend provenance
and source locations may differ.
"""

import pytest

import hndl
from hndl import Registry
from hndl.frontends.config.grammar import parse_config
from hndl.frontends.config.ir import Assign, Call, Literal, Name, Pack, SchemeCall
from hndl.frontends.config.source import load_text
from hndl.construction import make_scheme


def semantic(plan):
    """Everything the semantic identity covers: no frontend provenance, no source locations."""
    return {
        "dtype": plan.dtype,
        "batch": plan.batch,
        "inputs": [dict(port) for port in plan.inputs],
        "outputs": [dict(port) for port in plan.outputs],
        "nodes": [
            (node.id, node.op, dict(node.args), dict(node.inputs), node.outputs, dict(node.input_shapes),
             dict(node.output_shapes), _plain(node.initialization), _plain(node.trainability),
             dict(node.provenance), node.source["policy"])
            for node in plan.nodes
        ],
    }


def _plain(value):
    if hasattr(value, "items"):
        return {key: _plain(item) for key, item in value.items()}
    return value


def callable_from(source, registry, input_names, output_names):
    """The same program as trusted Python: every statement becomes registry.ops calls."""
    program = parse_config(load_text(source), aliases=registry.aliases(), inputs=input_names)

    def evaluate(expr, local):
        if isinstance(expr, Name):
            return local[expr.name]
        if isinstance(expr, Pack):
            return tuple(local[item.name] for item in expr.items)
        if isinstance(expr, Literal):
            return literal(expr.value)
        args = [evaluate(arg, local) for arg in expr.args]
        kwargs = {key: evaluate(value, local) for key, value in expr.kwargs}
        return getattr(registry.ops, expr.alias)(*args, **kwargs)

    def literal(value):
        if isinstance(value, SchemeCall):
            return make_scheme(value.scheme, dict(value.kwargs))
        if isinstance(value, dict):
            return {key: literal(item) for key, item in value.items()}
        return value

    def network(*positional, **named):
        local = dict(zip(input_names, positional)) | named
        for statement in program.statements:
            value = evaluate(statement.value if isinstance(statement, Assign) else statement.call, local)
            if isinstance(statement, Assign):
                if statement.unpack:
                    local.update(zip(statement.targets, value, strict=True))
                else:
                    local[statement.targets[0]] = value
        if output_names == ("output",):
            return local.get("out")
        return {name: local[name] for name in output_names}

    return network


def _names(contract, default):
    return tuple(contract) if isinstance(contract, dict) else (default,)


def _both(source, input_shape, output_shape, registry, **kwargs):
    config = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry, **kwargs)
    fn = callable_from(source, registry, _names(input_shape, "x"), _names(output_shape, "output"))
    captured = hndl.resolve_callable(fn, input_shape=input_shape, output_shape=output_shape, registry=registry, **kwargs)
    return config, captured


def _operator_examples():
    registry = Registry.builtins()
    return [
        pytest.param(example, id=f"{spec.alias}-{index}")
        for spec in registry
        for index, example in enumerate(spec.examples)
        if not example.network
    ]


@pytest.mark.parametrize("example", _operator_examples())
def test_every_operator_example_gives_identical_semantic_plans(example):
    registry = Registry.builtins()
    config, captured = _both(example.source, example.input_shape, example.output_shape, registry,
                             input_dtype=example.input_dtype)
    assert semantic(config) == semantic(captured)
    assert config.frontend["kind"] == "python_config@1"
    assert captured.frontend["kind"] == "python_callable@1"


SPEC_EXAMPLES = {
    "mlp": ("linear(64)\nrelu()\nlinear()", ("B", 128), ("B", 10)),
    "branches": (
        '# Split clears current; explicitly choose the next branch.\n'
        'z1, z2 = split(64, name="partition")\n'
        'linear(z1, 128, name="content")\n'
        'features = relu(name="features")\n'
        'style = linear(z2, 128, name="style")\n'
        'add(features, style, name="combined")\n',
        ("B", 128), ("B", 128),
    ),
    "adaptive_norm_split": (
        "z1, z2 = split(64)\nlinear(z1)\nfeatures = reshape(32, 4, 4)\nadaptive_norm(features, z2)",
        ("B", 128), ("B", 32, 4, 4),
    ),
    "generator": (
        'linear()\nrelu()\nreshape(512)\ndeconv(256, policy="up2")\nrelu()\ndeconv(128, policy="up2")\n'
        'relu()\ndeconv(64, policy="up2")\nrelu()\nconv(3, kernel_size=3, stride=1, padding=1)\ntanh()',
        ("B", 128), ("B", 3, 32, 32),
    ),
    "discriminator": (
        'plane = linear(y, 784, name="label_projection")\n'
        'label = reshape(plane, 1, 28, 28, name="label_plane")\n'
        'concat(x, label, name="conditioned")\n'
        'conv(64, policy="down2", name="stage1")\n'
        'leaky_relu(0.2)\n'
        'features = flatten(name="features")\n'
        'logits = linear(1, name="logits")\n',
        {"x": ("B", 1, 28, 28), "y": ("B", 10)}, {"logits": ("B", 1), "features": ("B", 12544)},
    ),
    "init_and_trainable": (
        'linear(64, trainable=False)\nrelu()\n'
        'linear(init={"weight": xavier_uniform(gain=1.0), "bias": 0}, trainable={"bias": False})',
        ("B", 128), ("B", 10),
    ),
}


@pytest.mark.parametrize("name", sorted(SPEC_EXAMPLES))
def test_every_spec_example_gives_identical_semantic_plans(name):
    source, input_shape, output_shape = SPEC_EXAMPLES[name]
    config, captured = _both(source, input_shape, output_shape, Registry.builtins())
    assert semantic(config) == semantic(captured)


def test_the_handwritten_discriminator_callable_matches_its_configuration():
    from hndl import ops

    def discriminator(*, x, y):
        label = ops.reshape(ops.linear(y, 784), 1, 28, 28)
        ops.concat(x, label)
        ops.conv(64, policy="down2")
        ops.leaky_relu(0.2)
        features = ops.flatten()
        return {"logits": ops.linear(1), "features": features}

    source = (
        "label = reshape(linear(y, 784), 1, 28, 28)\nconcat(x, label)\nconv(64, policy=\"down2\")\n"
        "leaky_relu(0.2)\nfeatures = flatten()\nlogits = linear(1)\n"
    )
    contract = {"input_shape": {"x": ("B", 1, 28, 28), "y": ("B", 10)},
                "output_shape": {"logits": ("B", 1), "features": ("B", 12544)}}
    assert semantic(hndl.resolve(source, **contract)) == semantic(hndl.resolve_callable(discriminator, **contract))


def test_the_handwritten_classifier_callable_matches_its_configuration():
    from hndl import ops

    def classifier(x):
        ops.linear(64)
        ops.relu()
        ops.linear()

    contract = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
    assert semantic(hndl.resolve("linear(64)\nrelu()\nlinear()", **contract)) == semantic(
        hndl.resolve_callable(classifier, **contract))
