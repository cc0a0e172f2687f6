"""What HNDL is for, in a few seconds (`make demo` runs this after installing).

1. Sketch a classifier with only the widths you care about; HNDL infers the rest forward from
   the input contract and backward from the output contract, and says where each value came from.
2. Ask for something that cannot fit: the error names the node, the chain of facts and a remedy.
3. Train the built network (an ordinary nn.Module) on a toy three-spiral problem: the loss falls.
4. Save the plan and the weights, restore them without the source, get the same predictions.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch

import hndl
from hndl.torch import network, restore

#: Only the hidden width is written; the first layer's input width and the last layer's output
#: width are left out (`linear()`), and so is the middle layer's input width.
SKETCH = """
linear(64, name="hidden1")
relu()
linear(64, name="hidden2")
relu()
linear(name="classes")
"""
CONTRACT = dict(input_shape=("B", 2), output_shape=("B", 3))


def spirals(points_per_class: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three interleaved spiral arms of one and a half turns in the plane, one class each, with noise."""
    generator = torch.Generator().manual_seed(seed)
    radius = torch.linspace(0.1, 1.0, points_per_class)
    features, labels = [], []
    for label in range(3):
        angle = (radius * 3 * math.pi + label * 2 * math.pi / 3
                 + 0.3 * torch.randn(points_per_class, generator=generator))
        features.append(torch.stack((radius * torch.sin(angle), radius * torch.cos(angle)), dim=1))
        labels.append(torch.full((points_per_class,), label))
    return torch.cat(features), torch.cat(labels)


def main() -> None:
    print("1. A sketch and two contracts; HNDL infers the missing widths both ways")
    plan = hndl.resolve(SKETCH, **CONTRACT)
    print(plan)
    for node_id, argument, direction in (("hidden1", "in_features", "forward, from the input contract [B, 2]"),
                                         ("hidden2", "in_features", "forward, from hidden1's 64"),
                                         ("classes", "out_features", "backward, from the output contract [B, 3]")):
        node = plan.node(node_id)
        print(f"  {node_id}.{argument} = {node.args[argument]} ({node.provenance[argument]}: {direction})")
    print()

    print("2. A sketch that cannot fit: a literal 4 classes against the 3-class contract")
    try:
        hndl.resolve(SKETCH.replace('linear(name="classes")', 'linear(4, name="classes")'), **CONTRACT)
    except hndl.HNDLError as error:
        print(f"  caught {type(error).__name__} {error.code}; print(error) shows:")
        print("  " + str(error).replace("\n", "\n  "))
    print()

    print("3. The built network is an ordinary nn.Module: train it on three interleaved spirals")
    torch.set_num_threads(1)  # a network this small runs fastest on one CPU thread
    torch.manual_seed(0)
    model = network(SKETCH, **CONTRACT, device="cpu")
    x, labels = spirals(200, seed=0)
    held_out, held_out_labels = spirals(200, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for step in range(301):
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        if step % 50 == 0:
            print(f"  step {step:3d}  loss {loss.item():.4f}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(held_out).argmax(dim=1) == held_out_labels).float().mean().item()
    print(f"  accuracy on {len(held_out_labels)} held-out points: {accuracy:.1%}")
    print()

    print("4. Save the plan and the weights; restore them without the source")
    with tempfile.TemporaryDirectory() as folder:
        plan_file, weights_file = Path(folder) / "classifier.json", Path(folder) / "classifier.pt"
        plan_file.write_text(model.plan.to_json(), encoding="utf-8")
        torch.save(model.state_dict(), weights_file)
        print(f"  saved {plan_file.name} ({plan_file.stat().st_size} bytes) and {weights_file.name}")
        rebuilt = restore(plan_file, torch.load(weights_file), device="cpu").eval()
    with torch.no_grad():
        same = torch.equal(rebuilt(x), model(x))  # called like the model that was saved
    print(f"  semantic digest: {rebuilt.plan.semantic_digest}")
    print(f"  restored model gives the same outputs: {same}")


if __name__ == "__main__":
    main()
