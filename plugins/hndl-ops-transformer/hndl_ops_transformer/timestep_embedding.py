"""timestep_embedding@1: the sinusoidal embedding of a diffusion timestep (DDPM, diffusers' Timesteps)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.declaration import TorchSpelling
from hndl.arg import MAX_EXTENT

from .rotary import apply_keeping_float32


def _degenerate(dims: int, shift: float) -> str:
    return (f"timestep_embedding divides by dims // 2 - downscale_freq_shift = {dims // 2} - {shift} = 0 "
            f"(dims={dims}), which leaves the frequencies undefined")


_REMEDY = "Give more dimensions, or another downscale_freq_shift (diffusers uses 0 or 1)."


def degenerate(dims: int, downscale_freq_shift: float) -> bool:
    """Whether the frequencies divide by zero: ``dims // 2 - downscale_freq_shift = 0`` with at least
    one frequency (a width of 1 has none and is a single zero)."""
    return dims >= 2 and dims // 2 - downscale_freq_shift == 0


def _validate(args) -> None:
    dims = args.get("dims")
    if dims is not None and degenerate(dims, args["downscale_freq_shift"]):
        raise HNDLError("E_ARGUMENT", _degenerate(dims, args["downscale_freq_shift"]), field="downscale_freq_shift",
                        remedies=(_REMEDY,))


def _relation(s) -> None:
    shape = s.shape("out")
    dims = shape[1] if shape else None
    if dims is not None and degenerate(dims, s.args["downscale_freq_shift"]):
        s.error("E_CONSTRAINT", f"{_degenerate(dims, s.args['downscale_freq_shift'])}. {_REMEDY}")


def timestep_frequencies(dims: int, downscale_freq_shift: float = 1.0, max_period: int = 10000) -> torch.Tensor:
    """The ``dims // 2`` float32 frequencies ``exp(-ln(max_period) * i / (dims // 2 - shift))``,
    computed exactly as diffusers' ``get_timestep_embedding`` computes them."""
    half = dims // 2
    exponent = -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32)
    return torch.exp(exponent / (half - downscale_freq_shift))


def _reference(module):
    """diffusers' get_timestep_embedding, written out."""

    def forward(t):
        half = module.dims // 2
        exponent = -math.log(module.max_period) * torch.arange(0, half, dtype=torch.float32, device=t.device)
        exponent = exponent / (half - module.downscale_freq_shift)
        wide = torch.promote_types(t.dtype, torch.float32)  # float64 stays float64; ids and halves go to float32
        angles = t.reshape(-1)[:, None].to(wide) * torch.exp(exponent)[None, :].to(wide)
        angles = module.scale * angles
        emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        if module.flip_sin_to_cos:
            emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
        if module.dims % 2:
            emb = F.pad(emb, (0, 1, 0, 0))
        return emb.to(module.out_dtype)

    return forward


@operator(
    "timestep_embedding",
    torch=TorchSpelling(signature="diffusers Timesteps(num_channels, flip_sin_to_cos, downscale_freq_shift)"),
    summary="Sinusoidal embedding of a diffusion timestep t[B, 1] into [B, dims] (DDPM; diffusers' Timesteps).",
    shape="t[B, 1]:any -> out[B, D]",
    relation=_relation,
    validate=_validate,
    shape_text="t is [B, 1], one timestep per example, of any numeric dtype; out is [B, D] with D = dims.",
    args={
        "dims": Arg(int, inferable=True, min=1, max=MAX_EXTENT, dim="D",
                    help="Embedding width D (diffusers' num_channels); an odd width ends in one zero. Normally "
                         "given, or inferred from the output contract."),
        "flip_sin_to_cos": Arg(bool, False, positional=False,
                               help="Order the halves cos, sin instead of sin, cos (diffusers' UNet2DModel "
                                    "uses True)."),
        "downscale_freq_shift": Arg(float, 1.0, positional=False,
                                    help="The exponent's denominator is dims // 2 - downscale_freq_shift "
                                         "(diffusers' freq_shift; DDPM uses 1, UNet2DModel 0)."),
        "scale": Arg(float, 1.0, positional=False, help="Multiplies the angles t * frequency."),
        "max_period": Arg(int, 10000, min=1, max=MAX_EXTENT, positional=False,
                          help="The slowest wavelength: frequencies run from 1 down to about 1/max_period."),
    },
    category="embedding",
    examples=(
        Example("timestep_embedding(32, flip_sin_to_cos=True, downscale_freq_shift=0.0)\nlinear(128)\nswish()\n"
                "linear(128)", ("B", 1), ("B", 128), input_dtype="int64",
                note="diffusers' UNet2DModel time embedding: Timesteps(32, True, 0) then its two-layer SiLU MLP; "
                     "integer timesteps."),
        Example("timestep_embedding(9)", ("B", 1), ("B", 9),
                note="An odd width: 4 sines, 4 cosines and a zero."),
    ),
    reference=_reference,
)
class TimestepEmbedding(nn.Module):
    """The sinusoidal timestep embedding of DDPM (Ho et al.), as diffusers'
    `get_timestep_embedding` and `Timesteps` compute it. For each example's timestep `t`
    (one value per row of `t[B, 1]`, integer or fractional, any numeric dtype) and
    `h = dims // 2` frequencies

        freq[i] = exp(-ln(max_period) * i / (h - downscale_freq_shift))
        out     = [sin(scale * t * freq), cos(scale * t * freq)]

    with the halves swapped when `flip_sin_to_cos` is set and one zero appended for an odd
    `dims`. It is what a diffusion UNet feeds its time-embedding MLP (`linear`, `swish`,
    `linear`), whose output then conditions every residual block (`channel_add`).

    * **Frequencies** are a **non-persistent buffer** computed at construction (diffusers
      recomputes them per call and stores nothing, so state dicts carry no entry). They stay
      float32 under `.to(dtype)`: the embedding is computed in float32, whatever the compute
      dtype, and only the result is cast to it, as diffusers' `UNet2DModel` casts it.
    * `dims // 2 - downscale_freq_shift = 0` would divide by zero and is refused
      (E_ARGUMENT, or E_CONSTRAINT for an inferred `dims`).
    * Differentiable in a floating `t` (an integer `t` has no gradient); float64 timesteps
      are embedded in float64 (for `gradcheck`), every other dtype in float32. No
      parameters, no randomness; identical in train and eval mode.
    """

    def __init__(self, dims: int, flip_sin_to_cos: bool = False, downscale_freq_shift: float = 1.0,
                 scale: float = 1.0, max_period: int = 10000) -> None:
        super().__init__()
        if degenerate(dims, downscale_freq_shift):
            raise HNDLError("E_ARGUMENT", _degenerate(dims, downscale_freq_shift), field="downscale_freq_shift",
                            remedies=(_REMEDY,))
        self.dims = dims
        self.flip_sin_to_cos = flip_sin_to_cos
        self.downscale_freq_shift = downscale_freq_shift
        self.scale = scale
        self.max_period = max_period
        #: The dtype of the output: float32 until a floating cast (``.to(dtype)``) moves the module.
        self.out_dtype = torch.float32
        self.register_buffer("frequencies", timestep_frequencies(dims, downscale_freq_shift, max_period),
                             persistent=False)

    def _apply(self, fn, recurse: bool = True):
        # Where ``fn`` sends the output dtype (a cast moves it, a device move keeps it); the
        # frequencies themselves stay float32, as rotary_embedding's do.
        probe = fn(torch.empty(0, dtype=self.out_dtype, device=self.frequencies.device))
        result = apply_keeping_float32(self, "frequencies", super()._apply, fn, recurse)
        if probe.is_floating_point():
            self.out_dtype = probe.dtype
        return result

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        wide = torch.promote_types(t.dtype, torch.float32)  # float64 stays float64; ids and halves go to float32
        angles = t.reshape(-1, 1).to(wide) * self.frequencies[None, :].to(wide)
        if self.scale != 1.0:
            angles = self.scale * angles
        emb = torch.cat((angles.sin(), angles.cos()), dim=-1)
        if self.flip_sin_to_cos:
            half = self.dims // 2
            emb = torch.cat((emb[:, half:], emb[:, :half]), dim=-1)
        if self.dims % 2:
            emb = F.pad(emb, (0, 1, 0, 0))
        return emb.to(self.out_dtype)

    def extra_repr(self) -> str:
        return (f"dims={self.dims}, flip_sin_to_cos={self.flip_sin_to_cos}, downscale_freq_shift="
                f"{self.downscale_freq_shift}, scale={self.scale}, max_period={self.max_period}")
