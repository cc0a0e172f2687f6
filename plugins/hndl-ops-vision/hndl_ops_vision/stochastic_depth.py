"""stochastic_depth@1: drop whole examples (or the whole batch) of a residual branch in training.

The second forward-time random operator after dropout, with the same documented treatment (§6
"Randomness in dropout"): one Bernoulli draw from the host's torch RNG per call in training
mode, nothing in eval mode, and no effect on resolution.
"""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, operator
from hndl.declaration import TorchSpelling

MODES = ("row", "batch")


def drop_paths(x: torch.Tensor, p: float, mode: str, training: bool) -> torch.Tensor:
    """Stochastic depth as torchvision.ops.stochastic_depth computes it, with the same draw.

    In training with p > 0 the keep-mask has shape [B, 1, ...] ("row") or [1, 1, ...]
    ("batch"), is drawn with ``Tensor.bernoulli_(1 - p)`` on an empty tensor of the input's
    dtype and device (so it advances the generator of that device exactly as torchvision
    does), and is divided by 1 - p unless that is 0. Otherwise the input is returned as it is.
    """
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    if mode == "row":
        size = (x.shape[0],) + (1,) * (x.dim() - 1)
    else:
        size = (1,) * x.dim()
    keep = x.new_empty(size).bernoulli_(survival)
    if survival > 0.0:
        keep = keep / survival
    return x * keep


@operator(
    "stochastic_depth",
    torch=TorchSpelling(
        signature="torchvision StochasticDepth(p, mode)",
        names=("drop_path", "droppath"),
        call="stochastic_depth(p)",
    ),
    summary="Stochastic depth: in training, zero whole examples (or the whole batch) with probability p and "
            "rescale the rest; identity in eval.",
    shape="x[B, ...] -> out[B, ...]",
    args={
        "p": Arg(float, min=0, max=1,
                 help="Probability of dropping, 0 <= p <= 1; survivors are scaled by 1 / (1 - p). p = 1 drops "
                      "everything (zeros, no rescaling)."),
        "mode": Arg(str, "row", choices=MODES,
                    help='"row" drops each example of the batch independently; "batch" keeps or drops the whole '
                         "batch at once."),
    },
    category="regularization",
    examples=(
        Example("stochastic_depth(0.1)", ("B", 8, 4, 4), ("B", 8, 4, 4),
                note="On the residual branch of a block, before the skip is added."),
        Example('h = conv(x, 4, kernel_size=3, padding=1)\nd = stochastic_depth(h, 0.2, "batch")\nadd(x, d)',
                ("B", 4, 6, 6), ("B", 4, 6, 6), note="A whole residual branch kept or dropped for the batch."),
        Example("linear()\nstochastic_depth(0.25)", ("B", 5, 8), ("B", 5, 16),
                note="Any rank: on [B, T, D] a dropped example loses its whole sequence."),
    ),
    reference=lambda module: (lambda x: drop_paths(x, module.p, module.mode, module.training)),
)
class StochasticDepth(nn.Module):
    """Stochastic depth (Huang et al. 2016; `torchvision.ops.StochasticDepth`), also called
    drop path: a residual branch is dropped for whole examples during training, so the block
    reduces to its skip for them. Place it on the branch, before the `add` of the skip.

    **A forward-time random operator, treated exactly like dropout (§6, invariant 6).** In
    training mode with `p > 0`, every forward draws one Bernoulli(1 - p) keep decision per
    example (`mode="row"`, a `[B, 1, ...]` mask) or one for the whole batch (`mode="batch"`)
    from torch's *global* RNG (the generator of the input's device), zeroes the dropped
    examples and multiplies the survivors by `1 / (1 - p)`, so the expected value is
    unchanged. The draw is the one `torchvision.ops.stochastic_depth` makes (`bernoulli_` on
    an empty tensor of that shape, in the input's dtype), so the same `torch.manual_seed`
    gives the same mask. `p = 1` drops everything: the output is zero and nothing is rescaled.
    In eval mode (`model.eval()`), and at `p = 0` in either mode, it is the identity and draws
    nothing.

    Consequences the host must own, as for dropout:

    * Two training-mode forward passes on the same input differ; a network containing
      `stochastic_depth(p > 0)` is reproducible only under the host's own `torch.manual_seed`
      control (HNDL never seeds or restores the RNG here).
    * Each training-mode forward advances the global RNG stream, shifting every later random
      draw of the host.
    * The mask never affects resolution: shapes, arguments, provenance, the plan JSON and both
      digests are the same whatever the RNG state. Building, printing, resolving and
      inspecting draw nothing.

    Batch stays on axis 0 and examples are never mixed: a row mask scales each example by its
    own factor. Out-of-place: the input is never modified. No parameters, no buffers."""

    def __init__(self, p: float, mode: str = "row") -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_paths(x, self.p, self.mode, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode!r}"
