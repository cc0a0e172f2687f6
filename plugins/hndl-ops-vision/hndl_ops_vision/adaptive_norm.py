"""adaptive_norm@1: instance normalization with a per-example learned scale and bias."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling


def _reference(module):
    def forward(x, params):
        channels = x.shape[1]
        mean = x.mean(dim=(2, 3), keepdim=True)
        variance = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
        normalized = (x - mean) / torch.sqrt(variance + module.eps)
        delta_gamma, beta = params[:, :channels], params[:, channels:]
        return (1 + delta_gamma)[:, :, None, None] * normalized + beta[:, :, None, None]

    return forward


@operator(
    "adaptive_norm",
    torch=TorchSpelling(
        signature="diffusers AdaGroupNorm(embedding_dim, out_dim, num_groups, eps=1e-05)",
        hint="adaptive_norm reads its widths from its inputs: write adaptive_norm(); give eps as a "
             "float or by keyword: adaptive_norm(eps=1e-05).",
        width_first=True,
    ),
    summary="Instance-normalize features, then apply a per-example learned scale and bias.",
    shape="x[B, C, H, W], params[B, 2*C] -> out[B, C, H, W]",
    args={"eps": Arg(float, 1e-5, min=0, exclusive_min=True, help="Added to the variance for stability.")},
    category="normalization",
    examples=(
        Example(
            "z1, z2 = split(64)\nlinear(z1)\nfeatures = reshape(32, 4, 4)\nadaptive_norm(features, z2)",
            ("B", 128), ("B", 32, 4, 4),
            note="Projection width 512 and style width 2 * 32 = 64 are both inferred.",
        ),
    ),
    reference=_reference,
)
class AdaptiveNorm(nn.Module):
    """AdaIN-style normalization. Each example's features are normalized over the spatial
    axes with population variance, then scaled by `1 + delta_gamma` and shifted by `beta`,
    where `params` holds `[delta_gamma, beta]` split at C. No running statistics; identical in
    train and eval mode; both the feature and the style path are differentiable."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x, params):
        channels = x.shape[1]
        mean = x.mean(dim=(2, 3), keepdim=True)
        variance = (x - mean).square().mean(dim=(2, 3), keepdim=True)
        normalized = (x - mean) * torch.rsqrt(variance + self.eps)
        delta_gamma, beta = params.split(channels, dim=1)
        return torch.addcmul(beta[:, :, None, None], 1 + delta_gamma[:, :, None, None], normalized)

    def extra_repr(self) -> str:
        return f"eps={self.eps}"
