"""dropout@1: inverted dropout, the one built-in that draws randomness in forward (§6)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from hndl import Arg, Example, operator


@operator(
    "dropout",
    torch=dict(signature="nn.Dropout(p=0.5, inplace=False)"),
    summary="Inverted dropout: zero each element with probability p in training mode, identity in eval.",
    shape="x[B, ...] -> out[B, ...]",
    args={
        "p": Arg(float, 0.5, min=0, max=1, exclusive_max=True,
                 help="Probability of zeroing each element in training mode, 0 <= p < 1; "
                      "survivors are scaled by 1 / (1 - p)."),
    },
    category="regularization",
    examples=(
        Example("linear(64)\nrelu()\ndropout(0.1)\nlinear()", ("B", 32), ("B", 10),
                note="Between the hidden layer and the head of a classifier."),
        Example("dropout(0.25)", ("B", 3, 8, 8), ("B", 3, 8, 8),
                note="Any rank: every element is dropped independently."),
    ),
    reference=lambda module: (lambda x: F.dropout(x, module.p, module.training)),
)
class Dropout(nn.Dropout):
    """Randomly zeroes elements during training and rescales the survivors, so that the
    expected value of every element is unchanged. Out-of-place: the input is never modified,
    so a shared branch stays intact. No parameters, no buffers.

    **The one forward-time random operator (§6, invariant 6).** Every other built-in is a
    deterministic function of its input and state. In training mode this operator draws an
    elementwise Bernoulli(1 - p) keep-mask from torch's *global* RNG (the generator of the
    input's device, exactly as ``torch.nn.functional.dropout`` does), zeroes the dropped
    elements and multiplies the survivors by ``1 / (1 - p)``. In eval mode (``model.eval()``)
    it is the identity and draws nothing; ``p = 0`` is the identity in both modes.

    Consequences the host must own:

    * Two training-mode forward passes on the same input differ. A network containing
      ``dropout(p > 0)`` is reproducible only under the host's own ``torch.manual_seed``
      control (seed before the forward pass; HNDL never seeds or restores the RNG here).
    * Each training-mode forward advances the global RNG stream, which shifts every later
      random draw of the host (data shuffling, further initialization).
    * The mask never affects resolution: shapes, arguments, provenance, the plan JSON and
      both digests are the same whatever the RNG state. Building, printing, resolving,
      ``dry_run`` (meta tensors) and ``preflight`` (an isolated, restored RNG scope) draw
      nothing from the caller's stream.

    ``p`` must satisfy 0 <= p < 1: ``p = 1`` would zero everything and divide by zero, so it
    is rejected with E_ARGUMENT like any other out-of-bounds value."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p=p, inplace=False)
