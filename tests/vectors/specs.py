"""The specifications behind the golden plan vectors (§10 "Exact encoding and digest test vectors").

Each entry resolves to one vector file; ``make_vectors.py`` writes them and
``tests/test_vectors.py`` proves that every vector still restores, re-encodes to the same bytes
and keeps its digests, and that resolving the specification again reproduces it exactly.
"""

from torch import nn

from hndl import Registry


def custom_registry() -> Registry:
    """Registry.builtins() plus the example.silu@1 operator of §8."""
    registry = Registry.builtins()

    @registry.operator(
        "silu",
        identity="example.silu",
        version=1,
        summary="Sigmoid linear unit, x * sigmoid(x).",
        shape="x[B, ...] -> out[B, ...]",
    )
    class SiLU(nn.SiLU):
        """Out-of-place SiLU. No parameters, no buffers, identical in train and eval mode."""

    return registry


VECTORS = {
    "chain": dict(
        source="linear(64)\nrelu()\nlinear()\n",
        input_shape=("B", 128), output_shape=("B", 10),
    ),
    "branched": dict(
        source=(
            'z1, z2 = split(64, name="partition")\n'
            'linear(z1, 128, name="content")\n'
            'features = relu(name="features")\n'
            'style = linear(z2, 128, name="style")\n'
            'add(features, style, name="combined")\n'
        ),
        input_shape=("B", 128), output_shape=("B", 128),
    ),
    "named_ports": dict(
        source=(
            'plane = linear(y, 784, name="label_projection")\n'
            'label = reshape(plane, 1, 28, 28, name="label_plane")\n'
            'concat(x, label, name="conditioned")\n'
            'conv(64, policy="down2", name="stage1")\n'
            'leaky_relu(0.2)\n'
            'features = flatten(name="features")\n'
            'logits = linear(1, name="logits")\n'
        ),
        input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
        output_shape={"logits": ("B", 1), "features": ("B", 12544)},
    ),
    "batch_multiples": dict(
        source="both = concat(x, x, axis=0)\nthree = concat(both, x, axis=0)\na, b, c = chunk(three, 3, dim=0)\nadd(a, c)\n",
        input_shape=("B", 3, 8, 8), output_shape=("B", 3, 8, 8),
    ),
    "custom_operator": dict(
        source="linear(64)\nsilu()\nlinear()\n",
        input_shape=("B", 128), output_shape=("B", 10), registry="custom",
    ),
    "init_trainability": dict(
        source=(
            'linear(64, trainable=False)\n'
            'relu()\n'
            'linear(init={"weight": xavier_uniform(gain=1.0), "bias": 0.1}, trainable={"bias": False})\n'
        ),
        input_shape=("B", 128), output_shape=("B", 10),
    ),
    "generator": dict(
        source=(
            'linear()\nrelu()\nreshape(512)\ndeconv(256, policy="up2")\nrelu()\ndeconv(128, policy="up2")\n'
            'relu()\ndeconv(64, policy="up2")\nrelu()\nconv(3, kernel_size=3, stride=1, padding=1)\ntanh()\n'
        ),
        input_shape=("B", 128), output_shape=("B", 3, 32, 32),
    ),
}


def registry_for(name: str) -> Registry:
    return custom_registry() if VECTORS[name].get("registry") == "custom" else Registry.builtins()


def resolve_vector(name: str, *, recorded_versions: bool = True):
    """Resolve the vector's specification again. With ``recorded_versions`` each alias whose
    operator has since raised its version is spelled as the alias that keeps the version the
    vector records (``conv`` -> ``conv_v1`` once conv is conv2d@2), so the plan can be compared
    byte for byte; without it, the specification resolves to today's versions."""
    import hndl

    spec = dict(VECTORS[name])
    spec.pop("registry", None)
    source = spec.pop("source")
    registry = registry_for(name)
    if recorded_versions:
        source = _recorded_spelling(source, name, registry)
    return hndl.resolve(source, registry=registry, **spec)


def _recorded_spelling(source: str, name: str, registry: Registry) -> str:
    """``source`` with each call of an operator whose current version differs from the one the
    saved vector records replaced by the alias registered for the recorded version."""
    import json
    import re
    from pathlib import Path

    record = json.loads((Path(__file__).parent / f"{name}.json").read_text(encoding="utf-8"))
    recorded = {node["op"] for node in record["nodes"]}
    for alias in registry.aliases():
        current = registry.get(alias)
        for identity in recorded:
            base, _, version = identity.rpartition("@")
            if base == current.identity and int(version) != current.version:
                kept = registry.by_identity(identity).alias
                source = re.sub(rf"\b{re.escape(alias)}\(", f"{kept}(", source)
    return source
