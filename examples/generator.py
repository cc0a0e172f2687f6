"""The worked generator of §7: every size comes from the 32x32 output contract.

Three doubling deconvolutions and a size-preserving conv make each output axis 8x the seed
axis, so the seed is [B, 512, 4, 4] and the first linear's width is inferred as 8192. The
same source resolves for other outputs (64x64, 32x64), and a 30x30 output is a contradiction
reported with its code, location, reasons and remedy, before anything is allocated; so is an
explicit linear(128), because a literal is never overridden.

Run: python examples/generator.py
"""

import torch

import hndl
from hndl import HNDLError
from hndl.torch import network

SOURCE = """
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


def main() -> None:
    torch.manual_seed(0)
    model = network(SOURCE, input_shape=("B", 128), output_shape=("B", 3, 32, 32), device="cpu")
    print(model)
    print()
    seed = torch.randn(4, 128)
    images = model(seed)
    print(f"forward: {list(seed.shape)} -> {list(images.shape)}, values in [{images.min().item():.3f}, "
          f"{images.max().item():.3f}]")
    print()

    print("The same source against other output contracts:")
    for output in [("B", 3, 32, 32), ("B", 3, 64, 64), ("B", 3, 32, 64)]:
        plan = hndl.resolve(SOURCE, input_shape=("B", 128), output_shape=output)
        nodes = {node.id: node for node in plan.nodes}
        seed_shape = nodes["n2"].output_shapes["out"]
        print(f"  output [{', '.join(map(str, output))}]: seed [{', '.join(map(str, seed_shape))}], "
              f"n0.out_features = {nodes['n0'].args['out_features']} ({nodes['n0'].provenance['out_features']})")
    print()

    print("A 30x30 output cannot be reached by three doublings:")
    try:
        hndl.resolve(SOURCE, input_shape=("B", 128), output_shape=("B", 3, 30, 30))
    except HNDLError as error:
        print(error)
    else:
        raise SystemExit("a 30x30 output unexpectedly resolved")
    print()

    print("An explicit first width stands, and contradicts the contract:")
    try:
        hndl.resolve(SOURCE.replace("linear()", "linear(128)", 1), input_shape=("B", 128),
                     output_shape=("B", 3, 32, 32))
    except HNDLError as error:
        print(error)
    else:
        raise SystemExit("linear(128) unexpectedly resolved")


if __name__ == "__main__":
    main()
