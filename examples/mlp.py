"""The first example of §7: a two-layer perceptron whose last width comes from the contract.

Run with `.venv/bin/python examples/mlp.py` (`make demo` runs examples/demo.py). It resolves the
configuration, prints the plan's shape table, builds the network on the CPU, and runs one forward
and backward pass on generated data.
"""

import torch

import hndl
from hndl.torch import network

SOURCE = """
linear(64)
relu()
linear()
"""


def main() -> None:
    plan = hndl.resolve(SOURCE, input_shape=("B", 128), output_shape=("B", 10))
    print("Resolved plan:")
    print(plan)
    print()
    for node in plan.nodes:
        origins = ", ".join(f"{name}={node.args[name]!r} ({origin})" for name, origin in node.provenance.items())
        print(f"  {node.id}: {node.op}  {origins or 'no arguments'}")
    print()

    torch.manual_seed(0)
    model = network(SOURCE, input_shape=("B", 128), output_shape=("B", 10), device="cpu")
    print("Built module:")
    print(model)
    print()

    x = torch.randn(32, 128)
    target = torch.randint(0, 10, (32,))
    scores = model(x)
    loss = torch.nn.functional.cross_entropy(scores, target)
    loss.backward()
    gradient = sum(p.grad.norm() ** 2 for p in model.parameters()) ** 0.5
    print(f"forward: scores {list(scores.shape)}, loss {loss.item():.4f}")
    print(f"backward: gradient norm {gradient.item():.4f} over {sum(p.numel() for p in model.parameters())} parameters")
    print(f"build receipt: {dict(model.build_receipt)}")


if __name__ == "__main__":
    main()
