"""The shared rule for operators that act on the last axis of rank-2 and rank-3 tensors (§6)."""

from __future__ import annotations

from hndl.registry import active_registry

FEATURE_RANKS = (2, 3)

#: For an operator of the last axis met with an image ``[B, C, H, W]``: the declared operator that
#: does the per-position channel operation the author most likely meant, as a call to suggest.
CHANNEL_COUNTERPARTS = {
    "layer_norm": ("channel_layer_norm", "channel_layer_norm()",
                   "normalizes the C channels at each position of [B, C, H, W], like ConvNeXt's LayerNorm2d"),
    "linear": ("conv", "conv({width}kernel_size=1)",
               "applies one learned C_in -> C_out map at each position of [B, C, H, W] (a 1x1 convolution)"),
}


def feature_axis_only(s) -> None:
    """Reject rank-4 inputs instead of flattening them implicitly; for an image the remedies
    name the per-channel operator meant (channel_layer_norm, a 1x1 conv) and flatten()."""
    for port in (*s.inputs, *s.outputs):
        shape = s.shape(port)
        if shape is not None and len(shape) not in FEATURE_RANKS:
            s.error(
                "E_CONSTRAINT",
                f"{s.spec.alias} acts on the last axis of [B, F] or [B, T, D] tensors, but port "
                f"{port!r} has rank {len(shape)}; HNDL never flattens implicitly",
                remedies=_image_remedies(s, len(shape)),
            )


def _image_remedies(s, rank: int) -> tuple[str, ...]:
    """What to write instead for a rank-4 [B, C, H, W] tensor, naming only registered operators."""
    if rank != 4:
        return ()
    registry = active_registry()
    remedies = []
    counterpart = CHANNEL_COUNTERPARTS.get(s.spec.alias)
    if counterpart is not None and (registry is None or counterpart[0] in registry):
        alias, call, what = counterpart
        width = s.args.get("out_features")
        call = call.format(width="" if width is None else f"{width}, ")
        remedies.append(f"To act on the channels of [B, C, H, W] at every position, write {call} instead of "
                        f"{s.spec.alias}: it {what}.")
    if registry is None or "flatten" in registry:
        remedies.append(f"To act on all C*H*W features of each example, insert flatten() before {s.spec.alias}.")
    return tuple(remedies)
