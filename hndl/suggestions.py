"""Remedies that name the fix for an unknown name: the closest spellings, and the installed pack
that provides an operator alias the registry in use lacks.

Everything here runs only on an error path, in the host process, on a name the configuration
chose. So it imports and runs nothing: which pack provides an alias is read from the aliases each
pack's distribution declares in its metadata (``hndl.packs.declared_aliases``), and a name too
long to resemble any candidate is not compared at all.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Iterable, Optional

from .packs import declared_aliases

#: How many close spellings a remedy offers.
MAX_SUGGESTIONS = 3
#: difflib's similarity ratio a spelling must reach to be offered (its own default).
SIMILARITY = 0.6


def closest(name: Any, candidates: Iterable[str], *, limit: int = MAX_SUGGESTIONS) -> tuple[str, ...]:
    """The registered names most like ``name``, best first; none for a name that is not text."""
    if not isinstance(name, str):
        return ()
    pool = [candidate for candidate in dict.fromkeys(candidates) if isinstance(candidate, str)]
    if not pool or len(name) > _longest_match(max(map(len, pool))):
        return ()  # difflib's time grows with the name; one this long can resemble nothing here
    return tuple(difflib.get_close_matches(name, pool, n=limit, cutoff=SIMILARITY))


def _longest_match(longest_candidate: int) -> int:
    """The longest name that can still reach ``SIMILARITY`` with a candidate of the given length.

    difflib's ratio is ``2 * matches / (len(a) + len(b))`` and matches never exceed the shorter
    length, so a name longer than ``(2 / SIMILARITY - 1)`` times every candidate is never close.
    """
    return int(longest_candidate * (2 / SIMILARITY - 1)) + 1


def did_you_mean(name: Any, candidates: Iterable[str]) -> Optional[str]:
    """``"Did you mean linear?"`` (or ``"... a, b or c?"``), or None when nothing is close."""
    matches = closest(name, candidates)
    if not matches:
        return None
    if len(matches) == 1:
        return f"Did you mean {matches[0]}?"
    return f"Did you mean {', '.join(matches[:-1])} or {matches[-1]}?"


def providing_packs(alias: Any, registry: Any) -> tuple[str, ...]:
    """Installed packs that ``registry`` was not built from and whose distributions declare ``alias``."""
    if not isinstance(alias, str):
        return ()
    held = set(registry.packs)
    return tuple(sorted(pack for pack, aliases in declared_aliases().items()
                        if pack not in held and alias in aliases))


def missing_pack_remedies(alias: Any, registry: Any) -> tuple[str, ...]:
    """One remedy per installed pack that provides ``alias``, spelling the registry that has it."""
    remedies = []
    for pack in providing_packs(alias, registry):
        names = (*registry.packs, pack)
        call = f"Registry.from_packs({', '.join(repr(name) for name in names)})"
        remedies.append(f"The installed pack {pack!r} provides {alias!r}: resolve with {call} "
                        f"(on the command line: --packs {','.join(names)}).")
    return tuple(remedies)


def operator_remedies(alias: Any, registry: Any, fallback: str) -> tuple[str, ...]:
    """Remedies for an alias ``registry`` lacks: the installed packs that provide it when there are
    any, else the HNDL name of a torch name (``silu`` -> ``swish``, see :data:`SYNONYMS`), the
    closest registered aliases (if any are close) and then ``fallback``."""
    providers = missing_pack_remedies(alias, registry)
    if providers:
        return providers
    synonym = synonym_remedy(alias, registry)
    close = did_you_mean(alias, registry.aliases())
    return tuple(remedy for remedy in (synonym, close, fallback) if remedy is not None)


# --------------------------------------------------------------------------------------
# Torch habits: names and positional values written the way torch spells them (§8 rule for
# torch-named operators). Everything below runs only at binding time or on an error path.
# --------------------------------------------------------------------------------------

#: Names researchers bring from torch, timm and papers -> (the HNDL alias that computes it, how to
#: call it). Offered only when the registry in use holds that alias (or an installed pack does).
SYNONYMS: dict[str, tuple[str, str]] = {
    "silu": ("swish", "swish()"),
    "sigmoid_linear_unit": ("swish", "swish()"),
    "drop_path": ("stochastic_depth", "stochastic_depth(p)"),
    "droppath": ("stochastic_depth", "stochastic_depth(p)"),
    "conv2d": ("conv", "conv(out_channels, kernel_size=3, padding=1)"),
    "conv_transpose2d": ("deconv", "deconv(out_channels, kernel_size=2, stride=2)"),
    "convtranspose2d": ("deconv", "deconv(out_channels, kernel_size=2, stride=2)"),
    "conv_transpose": ("deconv", "deconv(out_channels, kernel_size=2, stride=2)"),
    "batch_norm2d": ("batch_norm", "batch_norm()"),
    "batchnorm2d": ("batch_norm", "batch_norm()"),
    "batchnorm": ("batch_norm", "batch_norm()"),
    "batchnorm1d": ("batch_norm1d", "batch_norm1d()"),
    "instance_norm2d": ("instance_norm", "instance_norm()"),
    "layernorm": ("layer_norm", "layer_norm()"),
    "rmsnorm": ("rms_norm", "rms_norm()"),
    "groupnorm": ("group_norm", "group_norm(num_groups)"),
    "max_pool2d": ("max_pool", "max_pool(kernel_size, stride=...)"),
    "maxpool2d": ("max_pool", "max_pool(kernel_size, stride=...)"),
    "avg_pool2d": ("avg_pool", "avg_pool(kernel_size, stride=...)"),
    "avgpool2d": ("avg_pool", "avg_pool(kernel_size, stride=...)"),
    "adaptive_avg_pool2d": ("adaptive_avg_pool", "adaptive_avg_pool(output_size)"),
    "adaptiveavgpool2d": ("adaptive_avg_pool", "adaptive_avg_pool(output_size)"),
    "cat": ("concat", "concat(a, b, axis=1)"),
    "concatenate": ("concat", "concat(a, b, axis=1)"),
    "view": ("reshape", "reshape(...)"),
    "interpolate": ("upsample", "upsample(scale_factor=2)"),
    "multihead_attention": ("attention", "attention(heads)"),
    "multi_head_attention": ("attention", "attention(heads)"),
    "mha": ("attention", "attention(heads)"),
    "gelu_tanh": ("gelu", 'gelu(approximate="tanh")'),
    "gelu_new": ("gelu", 'gelu(approximate="tanh")'),
    "gelu_pytorch_tanh": ("gelu", 'gelu(approximate="tanh")'),
    "squeeze_and_excitation": ("squeeze_excitation", "squeeze_excitation(squeeze_channels=...)"),
    "squeeze_excite": ("squeeze_excitation", "squeeze_excitation(squeeze_channels=...)"),
    "se": ("squeeze_excitation", "squeeze_excitation(squeeze_channels=...)"),
    "mlp": ("feed_forward", "feed_forward()"),
    "swiglu": ("feed_forward", 'feed_forward(gated=True, activation="silu")'),
}


def _spellings(name: str) -> tuple[str, ...]:
    """``name``, lowercased, and snake-cased (``BatchNorm2d`` -> ``batch_norm2d``), without repeats."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return tuple(dict.fromkeys((name, name.lower(), snake)))


def synonym_remedy(name: Any, registry: Any) -> Optional[str]:
    """"HNDL calls silu swish: write swish()." for a torch (or paper) name of a registered operator;
    None when ``name`` is no such name or the registry lacks the operator it names."""
    if not isinstance(name, str) or len(name) > 64:
        return None
    for spelling in _spellings(name):
        if spelling in SYNONYMS:
            alias, call = SYNONYMS[spelling]
        elif spelling != name and spelling in registry:
            alias, call = spelling, f"{spelling}(...)"
        else:
            continue
        if alias in registry:
            return f"HNDL calls {name} {alias}: write {call}."
        packs = providing_packs(alias, registry)
        if packs:
            return (f"HNDL calls {name} {alias} ({call}), which the installed pack {packs[0]!r} provides: "
                    f"resolve with Registry.from_packs({', '.join(repr(p) for p in (*registry.packs, packs[0]))}).")
    return None


#: The modules of the first-party operator packs whose torch-named operators the hints describe.
FIRST_PARTY_MODULES = frozenset({"hndl_ops_basic", "hndl_ops_vision", "hndl_ops_transformer"})


def is_first_party(spec: Any) -> bool:
    """Whether ``spec`` is declared by a first-party operator pack: the torch-habit hints below
    describe those operators, never a user's operator (or a user's pack's) that shares an alias."""
    module = getattr(getattr(spec, "cls", None), "__module__", "") or ""
    return module.split(".")[0] in FIRST_PARTY_MODULES


class TorchSpelling:
    """How torch writes one first-party operator's layer, and the HNDL spelling of that call.

    ``torch`` is torch's (or torchvision's, timm's) signature; ``hint`` is the remedy naming the HNDL
    spelling; ``width_first`` marks an operator whose first positional HNDL argument is a float
    while torch's first positional argument is an integer width: an integer written there is a
    transcribed width (``layer_norm(64)``), refused instead of read as ``eps=64.0``.
    """

    __slots__ = ("torch", "hint", "width_first")

    def __init__(self, torch: str, hint: str, *, width_first: bool = False) -> None:
        self.torch = torch
        self.hint = hint
        self.width_first = width_first


#: The torch-named first-party operators whose positional values a torch user could write with
#: another meaning: each refusal names the HNDL spelling (the audit of issue 30 item 1).
TORCH_SPELLINGS: dict[str, TorchSpelling] = {
    "layer_norm": TorchSpelling(
        "nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True)",
        "layer_norm reads the normalized width from its input: torch's LayerNorm(64) is layer_norm() here; "
        "give eps as a float or by keyword: layer_norm(eps=1e-05).", width_first=True),
    "rms_norm": TorchSpelling(
        "nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)",
        "rms_norm reads the normalized width from its input: torch's RMSNorm(64) is rms_norm() here; "
        "give eps as a float or by keyword: rms_norm(eps=1e-06).", width_first=True),
    "channel_layer_norm": TorchSpelling(
        "timm LayerNorm2d(num_channels, eps=1e-06)",
        "channel_layer_norm reads the channel count from its input: timm's LayerNorm2d(64) is "
        "channel_layer_norm() here; give eps as a float or by keyword: channel_layer_norm(eps=1e-06).",
        width_first=True),
    "patch_merging": TorchSpelling(
        "torchvision PatchMerging(dim, norm_layer=nn.LayerNorm)",
        "patch_merging reads the channel count from its input: torchvision's PatchMerging(96) is "
        "patch_merging() here; give eps as a float or by keyword: patch_merging(eps=1e-05).", width_first=True),
    "layer_scale": TorchSpelling(
        "timm LayerScale(dim, init_values=1e-05)",
        "layer_scale reads the width from its input: timm's LayerScale(64) is layer_scale() here; give the "
        "starting scale as a float or by keyword: layer_scale(init_value=1e-05).", width_first=True),
    "adaptive_norm": TorchSpelling(
        "diffusers AdaGroupNorm(embedding_dim, out_dim, num_groups, eps=1e-05)",
        "adaptive_norm reads its widths from its inputs: write adaptive_norm(); give eps as a float or by "
        "keyword: adaptive_norm(eps=1e-05).", width_first=True),
    "batch_norm": TorchSpelling(
        "nn.BatchNorm2d(num_features, eps=1e-05, momentum=0.1, affine=True)",
        "batch_norm reads the channel count from its input: torch's BatchNorm2d(64) is batch_norm() here "
        "(batch_norm(num_features=64) checks it); eps=, momentum=, affine= go by keyword."),
    "batch_norm1d": TorchSpelling(
        "nn.BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True)",
        "batch_norm1d reads the channel count from its input: torch's BatchNorm1d(64) is batch_norm1d() here "
        "(batch_norm1d(num_features=64) checks it); eps=, momentum=, affine= go by keyword."),
    "instance_norm": TorchSpelling(
        "nn.InstanceNorm2d(num_features, eps=1e-05, momentum=0.1, affine=False)",
        "instance_norm reads the channel count from its input: torch's InstanceNorm2d(64) is instance_norm() "
        "here (instance_norm(num_features=64) checks it); eps= and affine= go by keyword."),
    "group_norm": TorchSpelling(
        "nn.GroupNorm(num_groups, num_channels, eps=1e-05, affine=True)",
        "group_norm reads the channel count from its input: torch's GroupNorm(32, 64) is group_norm(32) here "
        "(group_norm(32, num_channels=64) checks it); eps= and affine= go by keyword."),
    "embedding": TorchSpelling(
        "nn.Embedding(num_embeddings, embedding_dim, padding_idx=None)",
        "embedding takes torch's order: embedding(num_embeddings, embedding_dim, padding_idx=...); the "
        "padding index goes by keyword."),
    "flatten": TorchSpelling(
        "nn.Flatten(start_dim=1, end_dim=-1)",
        "flatten always flattens every non-batch axis (torch's Flatten() default): write flatten()."),
    "max_pool": TorchSpelling(
        "nn.MaxPool2d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False)",
        "torch's MaxPool2d(3, 2, 1) is max_pool(3, stride=2, padding=1) here: only the kernel size is positional."),
    "avg_pool": TorchSpelling(
        "nn.AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True)",
        "torch's AvgPool2d(3, 2, 1) is avg_pool(3, stride=2, padding=1) here: only the kernel size is positional."),
    "max_pool1d": TorchSpelling(
        "nn.MaxPool1d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False)",
        "torch's MaxPool1d(3, 2, 1) is max_pool1d(3, stride=2, padding=1) here: only the kernel size is "
        "positional."),
    "avg_pool1d": TorchSpelling(
        "nn.AvgPool1d(kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True)",
        "torch's AvgPool1d(3, 2, 1) is avg_pool1d(3, stride=2, padding=1) here: only the kernel size is "
        "positional."),
    "upsample": TorchSpelling(
        "nn.Upsample(size=None, scale_factor=None, mode='nearest')",
        "upsample takes an integer scale factor, upsample(scale_factor=2); the output size is never an "
        "argument: it follows from the scale (torch's Upsample(size=...) has no HNDL spelling)."),
    "concat": TorchSpelling(
        "torch.cat(tensors, dim=0)",
        "Pass the tensors as separate arguments and the axis by keyword: concat(a, b, axis=1)."),
    "squeeze_excitation": TorchSpelling(
        "torchvision SqueezeExcitation(input_channels, squeeze_channels, activation=ReLU, scale_activation=Sigmoid)",
        "squeeze_excitation reads the input channels from its input: torchvision's SqueezeExcitation(64, 8) is "
        "squeeze_excitation(squeeze_channels=8) here (or reduction=8 for a squeeze width of C // 8)."),
    "attention": TorchSpelling(
        "nn.MultiheadAttention(embed_dim, num_heads, dropout=0.0, bias=True)",
        "attention reads the width from its input: torch's MultiheadAttention(512, 8) is attention(8) here."),
    "transformer_block": TorchSpelling(
        "nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=relu)",
        "transformer_block reads the width from its input: torch's TransformerEncoderLayer(512, 8, 2048) is "
        "transformer_block(8, hidden=2048) here."),
    "swin_block": TorchSpelling(
        "torchvision SwinTransformerBlock(dim, num_heads, window_size, shift_size, mlp_ratio=4.0)",
        "swin_block reads the width from its input: torchvision's SwinTransformerBlock(96, 3, [7, 7], [3, 3]) "
        "is swin_block(3, 7, 3) here."),
    "window_attention": TorchSpelling(
        "torchvision ShiftedWindowAttention(dim, window_size, shift_size, num_heads)",
        "window_attention reads the width from its input: torchvision's ShiftedWindowAttention(96, [7, 7], "
        "[3, 3], 3) is window_attention(3, 7, 3) here (heads, window, shift)."),
}

#: Keyword names torch spells differently -> the HNDL argument (used when the operator has it).
KEYWORD_SYNONYMS: dict[str, str] = {
    "dim": "axis", "num_heads": "heads", "nhead": "heads", "n_heads": "heads", "n_head": "heads",
    "drop_path_rate": "stochastic_depth_prob", "drop_path": "stochastic_depth_prob",
    "dim_feedforward": "hidden", "intermediate_size": "hidden", "layer_norm_eps": "eps",
    "init_values": "init_value", "num_kv_heads": "kv_heads", "num_key_value_heads": "kv_heads",
    "window_size": "window", "shift_size": "shift",
}


def unknown_keyword_hint(spec: Any, key: Any) -> Optional[str]:
    """The HNDL spelling of a torch keyword an operator lacks, or None."""
    if not isinstance(key, str):
        return None
    args = getattr(spec, "args", {})
    alias = spec.alias
    if key == "inplace":
        return "HNDL operators never compute in place: drop inplace=."
    if key == "approximate" and "activation" in args and "gelu_tanh" in (args["activation"].choices or ()):
        return (f"{alias} spells torch's gelu(approximate='tanh') as activation='gelu_tanh': "
                f"write {alias}(..., activation='gelu_tanh').")
    target = KEYWORD_SYNONYMS.get(key)
    if target is not None and target != key and target in args:
        return f"{alias} spells {key}= as {target}=: write {alias}(..., {target}=...)."
    if key in ("size", "output_size") and alias == "upsample" and is_first_party(spec):
        return TORCH_SPELLINGS["upsample"].hint
    if key in ("normalized_shape", "num_features", "num_channels", "in_channels", "embed_dim", "d_model",
               "dim", "input_channels"):
        return (f"{alias} reads that width from its input tensor: leave it out, e.g. {alias}()."
                if is_first_party(spec) else None)
    return None


def positional_remedies(spec: Any, accepted: tuple[str, ...]) -> tuple[str, ...]:
    """Remedies for more positional values than ``spec`` takes: the torch-habit hint of a first-party
    torch-named operator first, then the keyword-only arguments to pass the rest by."""
    remedies = []
    spelling = TORCH_SPELLINGS.get(spec.alias) if is_first_party(spec) else None
    if spelling is not None:
        remedies.append(spelling.hint)
    keywords = [name for name in spec.args if name not in accepted and name != "input_count"]
    if keywords:
        call = ", ".join(f"{name}=..." for name in keywords[:4]) + (", ..." if len(keywords) > 4 else "")
        remedies.append(f"Pass the remaining values by keyword: {spec.alias}({call}).")
    elif not remedies:
        remedies.append(f"{spec.alias} takes no other arguments: write {spec.alias}("
                        f"{', '.join(accepted)}).")
    return tuple(remedies)


def torch_habit(spec: Any, values: Any, author: Any) -> Optional[tuple[str, str, tuple[str, ...]]]:
    """(field, message, remedies) when a first-party operator's call is written the way torch writes its
    layer and would mean something else here; None otherwise. ``values`` are the positional author
    values, ``author`` every bound argument."""
    if not is_first_party(spec):
        return None
    alias = spec.alias
    spelling = TORCH_SPELLINGS.get(alias)
    if spelling is not None and spelling.width_first and values:
        first = values[0]
        positional = spec.positional_args
        name = positional[0] if positional else None
        if (name is not None and isinstance(first, int) and not isinstance(first, bool)
                and spec.args[name].type is float):
            return (name,
                    f"{alias}({first}): an integer in {alias}'s first position reads like torch's width "
                    f"({spelling.torch}), but here that position is {name} (a float); HNDL refuses it rather "
                    f"than use {name}={float(first)!r}",
                    (spelling.hint,))
    if alias in ("chunk", "split"):
        habit = _chunk_split_habit(alias, author)
        if habit is not None:
            return habit
    if alias == "reshape":
        shape = author.get("shape", ())
        if isinstance(shape, (list, tuple)) and any(isinstance(v, int) and not isinstance(v, bool) and v <= 0
                                                    for v in shape):
            kept = [v for v in shape if not (isinstance(v, int) and not isinstance(v, bool) and v <= 0)]
            example = f"reshape({', '.join(map(str, kept))})" if kept else "reshape()"
            return ("shape",
                    f"reshape({', '.join(map(str, shape))}): -1 and 0 are never written; reshape's values are "
                    f"the leading non-batch dimensions (the batch axis is implicit) and an omitted trailing "
                    f"factor is inferred from the element count",
                    (f"Leave the -1 out: {example} writes the leading dimensions and infers the rest from the "
                     f"element count and the output contract or consumer; to fix the last factor instead, "
                     f"write the leading one (torch's x.reshape(B, -1, 16) on [B, 64] is reshape(4)).",))
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _chunk_split_habit(alias: str, author: Any) -> Optional[tuple[str, str, tuple[str, ...]]]:
    """torch.chunk / torch.split habits: a negative or batch axis, and split's list of sections."""
    first = "chunks" if alias == "chunk" else "size"
    count = author.get(first)
    dim = author.get("dim", 1)
    if alias == "split" and isinstance(count, (list, tuple)) and count and all(map(_is_int, count)):
        return ("size",
                f"split({list(count)!r}): torch's list of section sizes; HNDL's split takes the first part's "
                f"size and returns two tensors, first and rest",
                (f"Write first, rest = split({count[0]}, dim) and split rest again for more parts, or use "
                 f"chunk(n, dim) for n equal parts.",))
    if _is_int(dim) and (dim < 0 or (dim == 0 and alias == "split")):  # chunk(n, 0) divides stacked batches
        shown_count = count if _is_int(count) else "n"
        if dim == 0:
            problem = "axis 0 is the batch axis, which HNDL never splits (torch's default dim=0 splits the batch)"
            fix = f"Split a non-batch axis: {alias}({shown_count}, 1) (axis 1 is also the default)."
        else:
            problem = "negative axes are not counted from the end here; axes are numbered on the whole shape"
            fix = (f"Write the axis from the front, batch being 0: for the last axis of [B, T, D] write "
                   f"{alias}({shown_count}, 2).")
        return ("dim", f"{alias}(..., dim={dim}): {problem}", (fix,))
    return None
