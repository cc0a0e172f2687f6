"""A pretrained backbone from a local checkpoint (§9), fully offline.

The example first writes a tiny ViT checkpoint (config.json plus safetensors weights) into a
temporary directory, as `save_pretrained` would for any transformers model; a real project
points `pretrained(...)` at its own checkpoint directory or at `hf://owner/repo@revision`.
The checkpoint's config.json defines the architecture: resolution reads only that file and
traces the model on the meta device to learn its pooled width (32), which the classifier head
then reads. Weights load at build time; the backbone is frozen and stays in eval mode while
the head trains. The plan pins the checkpoint's content digest as the node's `revision`.

Needs the `hndl[pretrained]` extra (transformers, safetensors). Run with HF_HUB_OFFLINE=1:
    HF_HUB_OFFLINE=1 python examples/pretrained_backbone.py
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hndl  # noqa: E402
from hndl import Registry  # noqa: E402
from hndl.torch import network  # noqa: E402

CLASSES = 5


def write_checkpoint(directory: Path) -> Path:
    """A one-layer ViT for 16x16 images (patches of 8), built from a config object: nothing is downloaded."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                       image_size=16, patch_size=8)
    from transformers.utils import logging

    logging.disable_progress_bar()
    ViTModel(config).save_pretrained(directory)
    return directory


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        checkpoint = write_checkpoint(Path(temporary) / "tiny-vit")
        print(f"checkpoint files: {', '.join(sorted(path.name for path in checkpoint.iterdir()))}")
        source = f"""
backbone = pretrained("{checkpoint.as_posix()}", output="pooled", name="backbone")
linear(name="head")
"""
        contract = dict(input_shape=("B", 3, 16, 16), output_shape=("B", CLASSES))
        registry = Registry.from_packs("basic", "pretrained")
        plan = hndl.resolve(source, registry=registry, **contract)
        print(plan)
        backbone = plan.nodes[0]
        print(f"backbone revision: {backbone.args['revision'][:19]}... ({backbone.provenance['revision']})")
        width = plan.nodes[1].input_shapes["x"][1]
        print(f"head input width read from the checkpoint: {width}")
        print()

        model = network(source, registry=registry, device="cpu", initialization_seed=0, **contract)
        frozen = sum(p.numel() for p in model["backbone"].parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(f"parameters: {frozen} frozen in the backbone, {trainable} trainable in the head")

        generator = torch.Generator().manual_seed(1)
        images = torch.randn(16, 3, 16, 16, generator=generator)
        labels = torch.randint(0, CLASSES, (16,), generator=generator)
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.05)
        model.train()
        before = {name: value.clone() for name, value in model["backbone"].state_dict().items()}
        losses = []
        for _ in range(30):
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        unchanged = all(torch.equal(before[name], value) for name, value in model["backbone"].state_dict().items())
        print(f"backbone in eval mode while training: {not model['backbone'].model.training}")
        print(f"backbone weights unchanged: {unchanged}")
        print(f"head training loss: {losses[0]:.3f} -> {losses[-1]:.3f}")
        if not (unchanged and losses[-1] < losses[0]):
            raise SystemExit("the frozen backbone changed or the head did not learn")


if __name__ == "__main__":
    main()
