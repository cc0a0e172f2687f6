"""The conditional GAN discriminator of §7: two named inputs, two named outputs.

The discriminator reads an image `x` and a one-hot label `y`, projects the label to a 28x28
plane, stacks it with the image, downsamples once and publishes both the flattened
`features` and the `logits`. The same graph is written twice, as configuration and as a
trusted callable over `hndl.ops`; both resolve to the same semantic digest. The network takes
its inputs by position or keyword and returns a dict keyed by output name.

Run: python examples/discriminator.py
"""

import torch
import torch.nn.functional as F

import hndl
from hndl import ops
from hndl.torch import network

SOURCE = """
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""
CONTRACT = dict(
    input_shape={"x": ("B", 1, 28, 28), "y": ("B", 10)},
    output_shape={"logits": ("B", 1), "features": ("B", 12544)},
)


def discriminator(*, x, y):
    """The same graph as a trusted callable: inputs by keyword, outputs as a mapping."""
    label = ops.reshape(ops.linear(y, 784, name="label_projection"), 1, 28, 28, name="label_plane")
    ops.concat(x, label, name="conditioned")
    ops.conv(64, policy="down2", name="stage1")
    ops.leaky_relu(0.2)
    features = ops.flatten(name="features")
    return {"logits": ops.linear(1, name="logits"), "features": features}


def main() -> None:
    torch.manual_seed(0)
    model = network(SOURCE, device="cpu", **CONTRACT)
    print(model)
    print()

    from_callable = hndl.resolve_callable(discriminator, **CONTRACT)
    same = from_callable.semantic_digest == model.plan.semantic_digest
    print(f"configuration digest: {model.plan.semantic_digest}")
    print(f"callable digest matches: {same}")
    if not same:
        raise SystemExit("the two frontends disagree")
    print()

    image = torch.randn(8, 1, 28, 28)
    label = F.one_hot(torch.arange(8) % 10, 10).float()
    scores = model(image, y=label)  # positional and keyword binding mix freely
    for name, value in scores.items():
        print(f"output {name}: {list(value.shape)}")
    real = torch.ones(8, 1)
    loss = F.binary_cross_entropy_with_logits(scores["logits"], real)
    loss.backward()
    print(f"loss {loss.item():.4f}; label projection gradient norm "
          f"{model['label_projection'].weight.grad.norm().item():.4f}")


if __name__ == "__main__":
    main()
