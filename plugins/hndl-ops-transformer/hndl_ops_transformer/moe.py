"""moe@1: a mixture-of-experts feed-forward layer with deterministic top-k routing."""

from __future__ import annotations

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator
from hndl.arg import MAX_EXTENT
from hndl.declaration import spec_of

from .feed_forward import FeedForward


def _check_top_k(experts: int, top_k: int) -> None:
    if top_k > experts:
        raise HNDLError(
            "E_ARGUMENT",
            f"moe routes each token to top_k={top_k} experts, but only experts={experts} exist",
            field="top_k",
            remedies=(f"Give 1 <= top_k <= {experts}, or more experts.",),
        )


def _validate(args) -> None:
    _check_top_k(args["experts"], args["top_k"])


def _reference(module):
    """Dense form: every expert on every token, weighted by a gate that is zero off the top k."""
    expert_forward = [spec_of(FeedForward).reference(expert) for expert in module.experts]

    def forward(x):
        logits = x @ module.router.weight.t()  # [B, T, E]
        top_logits, top_index = torch.topk(logits, module.top_k, dim=-1)
        weights = torch.exp(top_logits - top_logits.amax(dim=-1, keepdim=True))
        weights = weights / weights.sum(dim=-1, keepdim=True)
        gate = torch.zeros_like(logits).scatter(-1, top_index, weights)  # [B, T, E]
        outputs = torch.stack([run(x) for run in expert_forward], dim=-2)  # [B, T, E, D]
        return (gate.unsqueeze(-1) * outputs).sum(dim=-2)

    return forward


@operator(
    "moe",
    summary="Mixture-of-experts feed-forward layer: each token is processed by its top_k experts, softmax-weighted.",
    shape="x[B, T, D] -> out[B, T, D]",
    validate=_validate,
    args={
        "experts": Arg(int, min=1, max=MAX_EXTENT, help="Number of expert feed-forward networks."),
        "top_k": Arg(int, min=1, max=MAX_EXTENT, help="Experts per token, 1 <= top_k <= experts."),
        "expansion": Arg(int, 4, min=1, max=MAX_EXTENT, positional=False,
                         help="Each expert's hidden width as a multiple of D (expansion * D units)."),
        "bias": Arg(bool, True, positional=False, help="Whether the experts' linear layers learn additive biases."),
    },
    category="feed-forward",
    examples=(
        Example("moe(4, 2)", ("B", 16, 32), ("B", 16, 32),
                note="Four experts, two per token; D is read from the input."),
        Example("linear(24)\nmoe(8, 1, expansion=2)\nlinear()", ("B", 10, 6), ("B", 10, 6),
                note="Switch-style routing to one of eight experts between two projections."),
    ),
    reference=_reference,
)
class MoE(nn.Module):
    """A sparse mixture of `experts` position-wise feed-forward networks on `[B, T, D]`.

    * **Router.** `router = Linear(D, experts, bias=False)` scores every token. The `top_k`
      highest logits are selected with `torch.topk` and a softmax over just those `top_k`
      logits gives the mixing weights (the Mixtral scheme).
    * **Experts.** `experts[i]` is a `feed_forward` module with its default activation:
      `Linear(D, expansion * D)`, exact GELU, `Linear(expansion * D, D)`.
    * **Output.** `out[t] = sum_j weight_j(t) * experts[index_j(t)](x[t])` over the selected
      experts. Each expert runs once per call, on exactly the tokens routed to it (gathered
      by index, scattered back with `index_add`); unselected experts contribute nothing.
    * **Deterministic.** No routing noise, no capacity limit or token dropping and no
      randomness in forward; train and eval mode agree. A token never selects one expert
      twice, so no output row receives two additions from one `index_add`.
    * **No auxiliary loss.** The operator has the one output port `out`; a load-balancing
      loss, if the host wants one, is computed by the host (for example from
      `module.router` applied to the layer's input, captured with a forward hook).
    * With `top_k=1` the softmax over one logit is always 1, so the router receives no
      gradient through the output: use `top_k >= 2` if the routing should be learned.
    """

    def __init__(self, *, experts: int, top_k: int, expansion: int = 4, bias: bool = True, D: int) -> None:
        super().__init__()
        _check_top_k(experts, top_k)
        self.top_k = top_k
        self.router = nn.Linear(D, experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(expansion=expansion, bias=bias, D=D) for _ in range(experts))

    def forward(self, x):
        batch, length, width = x.shape
        tokens = x.reshape(batch * length, width)
        top_logits, top_index = torch.topk(self.router(tokens), self.top_k, dim=-1)
        weights = torch.softmax(top_logits, dim=-1)
        out = torch.zeros_like(tokens)
        for number, expert in enumerate(self.experts):
            token, slot = torch.where(top_index == number)
            routed = expert(tokens[token]) * weights[token, slot].unsqueeze(-1)
            out.index_add_(0, token, routed)
        return out.view(batch, length, width)

    def extra_repr(self) -> str:
        return f"experts={len(self.experts)}, top_k={self.top_k}"
