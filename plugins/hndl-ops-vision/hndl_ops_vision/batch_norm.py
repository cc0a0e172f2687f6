"""batch_norm2d@1 (alias batch_norm): per-channel normalization over the batch and spatial axes."""

from __future__ import annotations

from torch import nn

from hndl import Arg, Example, operator

from .batch_statistics import batch_norm_reference, one_value_error


def _one_value_per_channel(module: nn.Module, shapes: dict) -> None:
    """E_RUNTIME for a training-mode call with one value per channel (``B * H * W == 1``)."""
    one_value_error("batch_norm", module, shapes["x"])


@operator(
    "batch_norm",
    torch=dict(
        signature="nn.BatchNorm2d(num_features, eps=1e-05, momentum=0.1, affine=True)",
        hint="batch_norm reads the channel count from its input: torch's BatchNorm2d(64) is "
             "batch_norm() here (batch_norm(num_features=64) checks it); eps=, momentum=, affine= "
             "go by keyword.",
        names=("batch_norm2d", "batchnorm2d", "batchnorm"),
        call="batch_norm()",
    ),
    identity="batch_norm2d",
    summary="Normalize each channel of [B, C, H, W] over the batch and spatial axes, with running statistics.",
    shape="x[B, C, H, W] -> out[B, C, H, W]",
    args={
        "eps": Arg(float, 1e-5, min=0, exclusive_min=True, positional=False,
                   help="Added to the variance for stability."),
        "momentum": Arg(float, 0.1, min=0, max=1, positional=False,
                        help="Weight of the newest batch in the running mean and variance."),
        "affine": Arg(bool, True, positional=False,
                      help="Whether to learn a per-channel scale (weight) and shift (bias)."),
        "num_features": Arg(int, min=1, inferable=True, dim="C", positional=False,
                            help="Channels C; normally inferred from the producer."),
    },
    category="normalization",
    examples=(
        Example("conv(8, kernel_size=3, padding=1, bias=False)\nbatch_norm()\nrelu()", ("B", 3, 8, 8),
                ("B", 8, 8, 8), note="num_features 8 is inferred from the convolution."),
        Example("batch_norm(momentum=0.01, affine=False)", ("B", 4, 5, 5), ("B", 4, 5, 5),
                note="No learned affine; the running statistics move slowly."),
    ),
    reference=batch_norm_reference,
    runtime_check=_one_value_per_channel,
)
class BatchNorm(nn.BatchNorm2d):
    """Batch normalization (torch.nn.BatchNorm2d) of a `[B, C, H, W]` tensor.

    In training mode each channel is normalized with the mean and the biased (population)
    variance of its `B * H * W` values, and the running mean and unbiased running variance
    move by `momentum` towards them (`running = (1 - momentum) * running + momentum * batch`).
    In evaluation mode the running statistics are used instead, so train and eval differ:
    the host selects the mode with `model.train()` / `model.eval()`.

    `affine=True` (the default) learns `weight` (initialized to 1) and `bias` (initialized to
    0). The running statistics are persistent buffers (`running_mean`, `running_var`,
    `num_batches_tracked`) that belong to the state dictionary. `eps > 0` keeps a constant
    channel finite forward and backward. A training-mode call whose channels hold a single
    value (`B * H * W == 1`) has no variance to normalize with and fails with `E_RUNTIME`
    before the node runs (the declaration's runtime check, once per input signature).

    **Torch's own class.** The built node *is* an `nn.BatchNorm2d` (`type(node) is
    nn.BatchNorm2d`), so tools that look layers up by type treat it as a handwritten one:
    conv-bn fusion (`torch.ao.quantization.fuse_modules`, `torch.fx.experimental.optimization.fuse`),
    `nn.SyncBatchNorm.convert_sync_batchnorm`, opacus' validator, and
    `torch.optim.swa_utils.update_bn`, which sets `momentum=None`: the running statistics are
    then torch's cumulative average of every batch since they were reset.

    **Torch spelling.** torch's `nn.BatchNorm2d(64)` is `batch_norm()` (or
    `batch_norm(num_features=64)`, which checks the width); a positional value is refused with
    E_ARGUMENT naming that spelling."""

    def __init__(self, *, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True) -> None:
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine, track_running_stats=True)
