"""The pretrained pack on CUDA, as one standalone command (not collected by pytest).

Builds tiny GPT-2, ViT, CLIP, timm ResNet and provider checkpoints in a temporary directory,
resolves each (on the meta device, as always), builds it on ``cuda`` in float32, float16 and
bfloat16, and compares the forward values with the CPU float32 build; it also checks that
gradients reach the graph input (second derivatives too, through ``layers=``) on CUDA and that
the frozen checkpoint stays in eval mode under ``model.train()``. It exits 2 where no GPU is
visible, 1 on any failure, and 0 only when every check passed::

    HF_HUB_OFFLINE=1 python plugins/hndl-pretrained/tests/cuda_check.py
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hndl  # noqa: E402
from hndl import Registry  # noqa: E402
from hndl.torch import build  # noqa: E402

TOLERANCE = {"float32": 1e-4, "float16": 3e-2, "bfloat16": 6e-2}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.act2 = nn.Tanh()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        return self.fc(self.flatten(self.pool(self.act2(self.conv2(self.act1(self.conv1(x)))))))


def checkpoints(root: Path) -> dict:
    import timm
    from timm.models._hub import save_for_hf
    from transformers import CLIPConfig, CLIPModel, GPT2Config, GPT2LMHeadModel, ViTConfig, ViTModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(root / "gpt2")
    ViTModel(ViTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=37,
                       image_size=16, patch_size=8)).save_pretrained(root / "vit")
    tower = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    CLIPModel(CLIPConfig(text_config=dict(tower, vocab_size=64, max_position_embeddings=16),
                         vision_config=dict(tower, image_size=16, patch_size=8),
                         projection_dim=24)).save_pretrained(root / "clip")
    resnet = timm.create_model("resnet18", num_classes=5, pretrained_cfg_overlay=dict(input_size=(3, 64, 64)))
    save_for_hf(resnet, str(root / "resnet"), safe_serialization=True)
    torch.save(Net().state_dict(), root / "net.pth")
    sha = hashlib.sha256((root / "net.pth").read_bytes()).hexdigest()
    return {
        "gpt2 logits": (f'pretrained("{root / "gpt2"}", output="logits")', ("B", 8), ("B", 8, 64), "int64"),
        "vit pooled": (f'pretrained("{root / "vit"}", output="pooled")', ("B", 3, 16, 16), ("B", 32), None),
        "clip vision embeds": (f'pretrained("{root / "clip"}", component="vision", output="embeds")',
                               ("B", 3, 16, 16), ("B", 24), None),
        "timm resnet logits": (f'pretrained("{root / "resnet"}", output="logits")', ("B", 3, 64, 64), ("B", 5), None),
        "provider layers": (f'a, b = pretrained("{root / "net.pth"}", provider="net", sha256="{sha}", '
                            'layers=("act1", "conv2"))\nout = b', ("B", 3, 8, 8), ("B", 6, 4, 4), None),
    }


def inputs(shape, dtype, device, compute):
    generator = torch.Generator().manual_seed(5)
    extents = [3 if entry == "B" else entry for entry in shape]
    if dtype == "int64":
        return torch.randint(0, 64, extents, generator=generator).to(device)
    return torch.randn(extents, generator=generator).to(device=device, dtype=getattr(torch, compute))


def main() -> int:
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device is visible", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name()}")
    registry = Registry.builtins()
    registry.pretrained_provider("net", Net)
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, (source, input_shape, output_shape, input_dtype) in checkpoints(Path(scratch)).items():
            reference = None
            for compute in ("float32", "float16", "bfloat16"):
                try:
                    plan = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, dtype=compute,
                                        input_dtype=input_dtype, registry=registry)
                    if reference is None:
                        cpu = build(hndl.resolve(source, input_shape=input_shape, output_shape=output_shape,
                                                 input_dtype=input_dtype, registry=registry),
                                    device="cpu", registry=registry)
                        reference = cpu(x=inputs(input_shape, input_dtype, "cpu", "float32"))["output"]
                    model = build(plan, device="cuda", registry=registry)
                    model.train()
                    frozen = [m for m in model.modules() if hasattr(m, "adapter")]
                    assert frozen and not any(m.model.training for m in frozen), "the checkpoint left eval mode"
                    x = inputs(input_shape, input_dtype, "cuda", compute)
                    if x.is_floating_point():
                        x.requires_grad_()
                    out = model(x=x)["output"]
                    assert out.is_cuda and out.dtype == getattr(torch, compute), (out.device, out.dtype)
                    error = (out.float().cpu() - reference).abs().max().item()
                    assert error <= TOLERANCE[compute] * max(1.0, reference.abs().max().item()), f"max error {error}"
                    if x.is_floating_point():
                        # Second derivatives are checked through layers= (fused attention kernels have none).
                        second_order = name == "provider layers"
                        (grad,) = torch.autograd.grad(out.float().pow(2).sum(), x, create_graph=second_order)
                        assert torch.isfinite(grad).all() and grad.abs().sum() > 0, "no gradient reached the input"
                        if second_order:
                            (second,) = torch.autograd.grad(grad.float().pow(2).sum(), x)
                            assert torch.isfinite(second).all() and second.abs().sum() > 0, "no second derivative"
                    print(f"ok   {name:22s} {compute:9s} max error {error:.2e}")
                except Exception as failure:  # report every case, then fail the command
                    failures.append(name)
                    print(f"FAIL {name:22s} {compute:9s} {type(failure).__name__}: {failure}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
