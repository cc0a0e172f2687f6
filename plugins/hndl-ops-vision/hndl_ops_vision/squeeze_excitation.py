"""squeeze_excitation@1: channel attention of SENet, MobileNetV3 and EfficientNet, one node."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .block_parts import ACTIVATIONS, GATES


def squeeze_width(channels: int, reduction: int) -> int:
    """The squeeze width a reduction gives: ``max(1, channels // reduction)``."""
    return max(1, channels // reduction)


def _validate(args) -> None:
    """At least one of reduction and squeeze_channels says how wide the squeeze is."""
    if args.get("reduction") is None and "squeeze_channels" not in args:
        raise HNDLError(
            "E_ARGUMENT",
            "squeeze_excitation needs reduction= or squeeze_channels= to know how wide its squeeze is",
            field="reduction",
            remedies=("Give reduction=16 (SENet) or reduction=4, or an explicit squeeze_channels=.",),
        )


def _relation(s) -> None:
    """squeeze_channels = max(1, C // reduction) once C is known; a written squeeze_channels
    that disagrees fails (E_CONSTRAINT)."""
    reduction = s.args.get("reduction")
    if reduction is None:
        return
    x = s.shape("x")
    if x is not None and x[1] is not None:
        s.arg("squeeze_channels", squeeze_width(x[1], reduction))


def _reference(module):
    """The block written out with torch.nn.functional over the module's parameters."""
    activation, gate = ACTIVATIONS[module.activation], GATES[module.gate]

    def forward(x):
        scale = x.mean(dim=(2, 3), keepdim=True)
        scale = activation(F.conv2d(scale, module.fc1.weight, module.fc1.bias))
        scale = gate(F.conv2d(scale, module.fc2.weight, module.fc2.bias))
        return x * scale

    return forward


@operator(
    "squeeze_excitation",
    torch=TorchSpelling(
        signature="torchvision SqueezeExcitation(input_channels, squeeze_channels, activation=ReLU, "
                  "scale_activation=Sigmoid)",
        hint="squeeze_excitation reads the input channels from its input: torchvision's "
             "SqueezeExcitation(64, 8) is squeeze_excitation(squeeze_channels=8) here (or "
             "reduction=8 for a squeeze width of C // 8).",
        names=("squeeze_and_excitation", "squeeze_excite", "se"),
        call="squeeze_excitation(squeeze_channels=...)",
    ),
    summary="Squeeze-and-excitation: rescale every channel of [B, C, H, W] by a gate computed from its global average.",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    relation=_relation,
    validate=_validate,
    shape_text="out has the shape of x; squeeze_channels = max(1, C // reduction) when reduction is given.",
    args={
        "reduction": Arg(int, None, min=1, max=MAX_EXTENT, positional=False,
                         help="Squeeze ratio r: squeeze_channels = max(1, C // r) (SENet uses 16). Give this, "
                              "squeeze_channels, or both when they agree."),
        "squeeze_channels": Arg(int, min=1, max=MAX_EXTENT, inferable=True, positional=False,
                                help="Width S of the squeeze (the hidden 1x1 convolution). Give it explicitly, or "
                                     "give reduction and it is inferred from the channels."),
        "activation": Arg(str, "relu", choices=tuple(ACTIVATIONS), positional=False,
                          help="Activation between the two 1x1 convolutions: relu (SENet, MobileNetV3) or silu "
                               "(EfficientNet); relu6 and hardswish are accepted too."),
        "gate": Arg(str, "sigmoid", choices=tuple(GATES), positional=False,
                    help="The gate applied to the excitation: sigmoid (SENet, EfficientNet) or hardsigmoid "
                         "(MobileNetV3)."),
    },
    category="block",
    examples=(
        Example("conv(16, kernel_size=3, padding=1)\nsqueeze_excitation(reduction=4)", ("B", 3, 8, 8),
                ("B", 16, 8, 8), note="squeeze_channels = 16 // 4 = 4 is inferred."),
        Example('squeeze_excitation(squeeze_channels=8, gate="hardsigmoid")', ("B", 32, 4, 4), ("B", 32, 4, 4),
                note="MobileNetV3's form: an explicit squeeze width and a hard-sigmoid gate."),
        Example('squeeze_excitation(reduction=4, activation="silu")\nconv(kernel_size=1)', ("B", 8, 5, 5),
                ("B", 4, 5, 5), note="EfficientNet's form: SiLU inside."),
    ),
    reference=_reference,
)
class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation (Hu et al. 2018; `torchvision.ops.SqueezeExcitation`), one node
    with one module. For every example and channel:

        s     = mean over H, W of x                  # [B, C, 1, 1], the squeeze
        s     = activation(fc1(s))                   # 1x1 conv C -> S, with bias
        scale = gate(fc2(s))                         # 1x1 conv S -> C, with bias
        out   = x * scale                            # broadcast over H and W

    The multiply by a per-channel gate is part of the operator: HNDL joins never broadcast, so
    a `[B, C, 1, 1]` gate could not be multiplied onto the input by `mul`. The squeeze width
    `S` is `squeeze_channels`, or `max(1, C // reduction)` when `reduction` is given; one of
    the two is required (E_ARGUMENT), and both must agree when both are written
    (E_CONSTRAINT). `activation` defaults to ReLU (SiLU for EfficientNet),
    `gate` to the sigmoid (hard sigmoid for MobileNetV3). The submodules are named as in
    torchvision (`fc1`, `fc2`), so a torchvision `SqueezeExcitation` state dictionary loads
    unchanged. Parameters use PyTorch's default initialization. No running statistics, so
    train and eval mode agree; no randomness; out-of-place. Channels pass through, so `C` is
    read from the producer or, backward, from whatever fixes the output.

    **Torch spelling.** torchvision's `SqueezeExcitation(64, 8)` is
    `squeeze_excitation(squeeze_channels=8)`; every argument is a keyword, and a positional
    value is refused with E_ARGUMENT naming `squeeze_channels=` (or `reduction=`)."""

    def __init__(self, *, C: int, squeeze_channels: int, reduction: int | None = None, activation: str = "relu",
                 gate: str = "sigmoid") -> None:
        super().__init__()
        self.reduction = reduction
        self.activation = activation
        self.gate = gate
        self.fc1 = nn.Conv2d(C, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, C, 1)
        self._activation = ACTIVATIONS[activation]
        self._gate = GATES[gate]

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}, gate={self.gate!r}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = F.adaptive_avg_pool2d(x, 1)
        scale = self._gate(self.fc2(self._activation(self.fc1(scale))))
        return x * scale
