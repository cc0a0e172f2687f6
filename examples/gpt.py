"""A GPT-style text model from the basic and transformer packs, trained for a few steps.

    embedding -> positional_embedding -> transformer_block x 2 (causal) -> layer_norm -> linear

The registry opts in exactly the two packs the source uses. Only the vocabulary, the model
width and the head count are written; the positional table's length comes from the `[B, 16]`
token contract, and the head's width (the vocabulary again) from the `[B, 16, 64]` output
contract. The model then learns to predict the next token of a repeating sequence.

Run: python examples/gpt.py
"""

import torch
import torch.nn.functional as F

import hndl
from hndl import Registry
from hndl.torch import network

VOCAB, LENGTH, WIDTH, HEADS = 64, 16, 32, 4
SOURCE = f"""
embedding({VOCAB}, {WIDTH}, name="tokens")
positional_embedding(name="positions")
transformer_block({HEADS}, causal=True, name="block1")
transformer_block({HEADS}, causal=True, name="block2")
layer_norm(name="final_norm")
linear(name="head")
"""
CONTRACT = dict(input_shape=("B", LENGTH), output_shape=("B", LENGTH, VOCAB), input_dtype="int64")


def main() -> None:
    registry = Registry.from_packs("basic", "transformer")
    plan = hndl.resolve(SOURCE, registry=registry, **CONTRACT)
    print(plan)
    print()
    nodes = {node.id: node for node in plan.nodes}
    print(f"positions: length={nodes['positions'].args['length']}, "
          f"embedding_dim={nodes['positions'].args['embedding_dim']}")
    print(f"head.out_features = {nodes['head'].args['out_features']} ({nodes['head'].provenance['out_features']})")
    print()

    model = network(SOURCE, registry=registry, device="cpu", initialization_seed=0, **CONTRACT)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    generator = torch.Generator().manual_seed(0)
    starts = torch.randint(0, VOCAB, (8, 1), generator=generator)
    stream = (starts + torch.arange(LENGTH + 1)) % VOCAB  # each token is the previous one plus one
    ids, targets = stream[:, :-1], stream[:, 1:]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"logits: {list(logits.shape)}")
    print(f"training loss: {losses[0]:.3f} -> {losses[-1]:.3f}")
    if not losses[-1] < losses[0]:
        raise SystemExit("the loss did not decrease")


if __name__ == "__main__":
    main()
