"""A custom operator (§8): the SiLU example, registered on Registry.builtins().

The declaration block below is the specification's example, verbatim: one decorator on the
nn.Module class declares the alias, identity, summary and shape relation, and registers the
class on this registry only. The `x[B, ...] -> out[B, ...]` pattern propagates facts both
ways, so the last linear's width still comes from the output contract. The saved plan names
`example.silu@1` and no Python: a registry without that registration refuses to restore it
(E_STATE_VERSION), and one with it restores the same plan.

Run: python examples/custom_operator.py
"""

import torch
from torch import nn

from hndl import HNDLError, Registry, ResolvedPlan
from hndl.torch import network

# -- the specification's example, verbatim ---------------------------------------------------------------
registry = Registry.builtins()


@registry.operator(
    "silu",
    identity="example.silu",
    version=1,
    summary="Sigmoid linear unit, x * sigmoid(x).",
    shape="x[B, ...] -> out[B, ...]",
)
class SiLU(nn.SiLU):
    """Out-of-place SiLU. No parameters, no buffers, identical in train and
    eval mode."""


model = network(
    """
linear(64)
silu()
linear()
""",
    input_shape=("B", 128),
    output_shape=("B", 10),
    registry=registry,
    device="cpu",
)
# -- end of the specification's example -----------------------------------------------------------------


def main() -> None:
    print(model)
    print()
    spec = registry.get("silu")
    assert registry.by_identity("example.silu@1") is spec
    print(f"registered: alias {spec.alias!r} -> {spec.qualified} (class {spec.cls.__name__})")
    nodes = model.plan.nodes
    print(f"plan operators: {', '.join(node.op for node in nodes)}")
    print(f"n2.out_features = {nodes[2].args['out_features']} ({nodes[2].provenance['out_features']})")

    x = torch.randn(5, 128)
    hidden = model["n0"](x)
    torch.testing.assert_close(model["n1"](hidden), hidden * torch.sigmoid(hidden))
    print(f"forward: {list(model(x).shape)}; silu equals x * sigmoid(x): True")
    print()

    saved = model.plan.to_json()
    try:
        ResolvedPlan.from_json(saved, registry=Registry.builtins())
    except HNDLError as error:
        print(f"restored without the registration: {error.code}")
        print(f"  {error.message}")
    else:
        raise SystemExit("a plan naming example.silu@1 restored without its registration")
    restored = ResolvedPlan.from_json(saved, registry=registry)
    print(f"restored with it: same semantic digest = {restored.semantic_digest == model.plan.semantic_digest}")


if __name__ == "__main__":
    main()
