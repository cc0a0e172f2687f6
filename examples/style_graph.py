"""The adaptive normalization style graph of §8 (AdaIN, not StyleGAN).

A latent `z: [B, 128]` goes through `linear(256)` and `relu` to `w`, which feeds two
width-free linears: `project`, reshaped to a `[B, 64, 4, 4]` seed (its width is solved as
64 * 4 * 4 = 1024), and `style`, whose width is solved as 128 through adaptive_norm's
`params[B, 2*C]` port. The style linear starts at zero (`init={"weight": 0, "bias": 0}`), so
the untrained graph is plain instance normalization: identity scaling, zero shift.

Run: python examples/style_graph.py
"""

import torch
import torch.nn.functional as F

import hndl
from hndl.torch import network

SOURCE = """
mapping = linear(z, 256, name="mapping")
w = relu(name="w")
project = linear(w, name="project")
seed = reshape(project, 64, 4, 4, name="seed")
style = linear(w, name="style", init={"weight": 0, "bias": 0})
features = adaptive_norm(seed, style, name="norm")
"""
CONTRACT = dict(input_shape={"z": ("B", 128)}, output_shape={"features": ("B", 64, 4, 4)})


def main() -> None:
    plan = hndl.resolve(SOURCE, **CONTRACT)
    print(plan)
    print()
    nodes = {node.id: node for node in plan.nodes}
    for name in ("project", "style"):
        node = nodes[name]
        print(f"{name}.out_features = {node.args['out_features']} ({node.provenance['out_features']})")
    print(f"norm.eps = {nodes['norm'].args['eps']} ({nodes['norm'].provenance['eps']})")
    print()

    torch.manual_seed(0)
    model = network(SOURCE, device="cpu", **CONTRACT)
    z = torch.randn(4, 128)
    features = model(z)
    print(f"forward: z {list(z.shape)} -> features {list(features.shape)}")
    mapping, project = model["mapping"], model["project"]
    seed = F.linear(torch.relu(F.linear(z, mapping.weight, mapping.bias)), project.weight, project.bias)
    plain = F.instance_norm(seed.reshape(4, 64, 4, 4), eps=1e-5)
    print(f"zero-initialized style equals plain instance norm: {torch.allclose(features, plain, atol=1e-5)}")
    features.square().mean().backward()
    print(f"style weight receives a gradient at zero init: {model['style'].weight.grad.abs().sum().item() > 0}")


if __name__ == "__main__":
    main()
