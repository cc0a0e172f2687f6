"""batch_norm1d@1: per-channel normalization of a [B, C, L] signal over the batch and length axes."""

from __future__ import annotations

from torch import nn

from hndl import Arg, Example, operator

from .batch_statistics import batch_norm_reference, one_value_error


def _one_value_per_channel(module: nn.Module, shapes: dict) -> None:
    """E_RUNTIME for a training-mode call with one value per channel (``B * L == 1``)."""
    one_value_error("batch_norm1d", module, shapes["x"])


@operator(
    "batch_norm1d",
    torch=dict(
        signature="nn.BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True)",
        hint="batch_norm1d reads the channel count from its input: torch's BatchNorm1d(64) is "
             "batch_norm1d() here (batch_norm1d(num_features=64) checks it); eps=, momentum=, "
             "affine= go by keyword.",
        names=("batchnorm1d",),
        call="batch_norm1d()",
    ),
    summary="Normalize each channel of a [B, C, L] signal over the batch and length axes, with running statistics.",
    shape="x[B, C, L] -> out[B, C, L]",
    shape_text="Rank 3 read as [B, C, L]; out has the shape of x; num_features is C, inferred both ways.",
    args={
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance for stability."),
        "momentum": Arg(float, 0.1, min=0, max=1, positional=False,
                        help="Weight of the newest batch in the running mean and variance."),
        "affine": Arg(bool, True, positional=False,
                      help="Whether to learn a per-channel scale (weight) and shift (bias)."),
        "num_features": Arg(int, min=1, inferable=True, dim="C", positional=False,
                            help="Channels C; normally inferred from the producer (or, backward, the consumer)."),
    },
    category="normalization",
    examples=(
        Example("conv1d(8, kernel_size=3, padding=1, bias=False)\nbatch_norm1d()\nrelu()", ("B", 2, 16),
                ("B", 8, 16), note="num_features 8 is inferred from the convolution."),
        Example("conv1d(kernel_size=1)\nbatch_norm1d(momentum=0.01, affine=False)", ("B", 3, 10), ("B", 5, 10),
                note="num_features and the convolution's out_channels 5 are inferred backward from the contract."),
    ),
    reference=batch_norm_reference,
    runtime_check=_one_value_per_channel,
)
class BatchNorm1d(nn.BatchNorm1d):
    """Batch normalization (torch.nn.BatchNorm1d) of a `[B, C, L]` signal.

    **Axis order.** batch_norm1d reads a rank-3 tensor as a one-dimensional signal
    `[B, C, L]`: batch, channels, then length, as conv1d produces it, and normalizes each
    channel (axis 1). This is *not* the `[B, T, D]` sequence layout that linear, layer_norm and
    the activations use (there the features are last); rank alone does not name the axes.
    Rank 2 is rejected rather than read as `[B, C]`.

    In training mode each channel is normalized with the mean and the biased (population)
    variance of its `B * L` values, and the running mean and unbiased running variance move
    by `momentum` towards them (`running = (1 - momentum) * running + momentum * batch`). In
    evaluation mode the running statistics are used instead, so train and eval differ: the
    host selects the mode with `model.train()` / `model.eval()`. This is batch_norm on a
    signal instead of an image; the arguments, defaults and state layout are the same.

    `affine=True` (the default) learns `weight` (initialized to 1) and `bias` (initialized to
    0). The running statistics are persistent buffers (`running_mean`, `running_var`,
    `num_batches_tracked`) that belong to the state dictionary. `eps > 0` keeps a constant
    channel finite forward and backward. A training-mode call whose channels hold a single
    value (`B * L == 1`) has no variance to normalize with and fails with `E_RUNTIME`
    before the node runs (the declaration's runtime check, once per input signature).

    **Torch's own class.** The built node *is* an `nn.BatchNorm1d` (`type(node) is
    nn.BatchNorm1d`), so type-keyed tools (conv-bn fusion, `convert_sync_batchnorm`, opacus'
    validator, `torch.optim.swa_utils.update_bn` with its `momentum=None` cumulative average)
    treat it as a handwritten one.

    **Torch spelling.** torch's `nn.BatchNorm1d(64)` is `batch_norm1d()` (or
    `batch_norm1d(num_features=64)`, which checks the width); a positional value is refused with
    E_ARGUMENT naming that spelling."""

    def __init__(self, *, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine, track_running_stats=True)
