"""pretrained@1: an existing checkpoint as one node (§9).

The checkpoint's own configuration defines the architecture. The relation reads config.json,
measures the architecture on the meta device (so that weight files too large for it are
refused by their size before a byte is hashed), hashes local weights or the pinned .pth for the
checkpoint's ``revision``, fixes the input contract the model takes, and traces the
architecture on the meta device to learn each output's shape. Weights are read only when the
network is built.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Optional

import torch
from torch import nn

from hndl import Arg, Example, HNDLError, operator

from .capture import capture, submodules
from .libraries import NAMED_OUTPUTS, Adapter, adapter_for
from .sources import (
    BoundedCache,
    Checkpoint,
    Source,
    StateSize,
    config_version,
    current_revision,
    fail,
    load_state_dict_file,
    parse_source,
    present_revision,
    read_config,
    verified_checkpoint,
)
from .tracing import FLOATING, bounded_construction, freeze_key, measure_state, trace_outputs

_TEXT_DTYPES = ("int64", "int32")
_ADAPTERS = BoundedCache(64)
_SIZES = BoundedCache(64)


# -- the registry a resolution or build runs under ----------------------------------------------------
def active_registry():
    """The registry of the resolution, restoration or build in progress (provider sources need it)."""
    from hndl import registry as registry_module

    getter = getattr(registry_module, "active_registry", None)
    if getter is None:
        raise fail("a provider source needs the registry this resolution or build runs under, and this HNDL "
                   "core does not expose it (hndl.registry.active_registry)",
                   "Upgrade hndl to a version whose entry points publish the active registry.", field="provider")
    registry = getter()
    if registry is None:
        raise fail("a provider source resolves and builds only through HNDL's entry points, which name the "
                   "registry holding its provider", field="provider")
    return registry


# -- arguments ---------------------------------------------------------------------------------------------
def check_arguments(args: Mapping[str, Any]) -> Source:
    """Cross-field checks on normalized arguments (the declaration's validate hook). Reads nothing."""
    source = parse_source(args["source"], config=args["config"], provider=args["provider"], sha256=args["sha256"])
    chosen = [name for name in ("layer", "layers", "readout") if args[name]]
    if len(chosen) > 1:
        raise fail(f"{' and '.join(f'{name}=' for name in chosen)} are mutually exclusive: a node returns one "
                   "submodule's output, several submodules' outputs, or one readout",
                   "Keep exactly one of layer=, layers= and readout=.", field=chosen[1])
    if chosen and not source.is_provider:
        raise fail(f"{chosen[0]}= applies only to a .pth source with provider=; transformers and timm "
                   "checkpoints run whole and are selected with output=", f"Drop {chosen[0]}=.", field=chosen[0])
    layers = args["layers"]
    if any(not entry for entry in layers):
        raise fail(f"layers={tuple(layers)!r} has an empty entry", "Name a submodule in every entry.", field="layers")
    repeated = sorted({entry for entry in layers if layers.count(entry) > 1})
    if repeated:
        raise fail(f"layers= names {repeated[0]!r} more than once", "Name each submodule once.", field="layers")
    if not args["output"]:
        raise fail("output= is empty", f"Select one of {', '.join(NAMED_OUTPUTS)} or an output attribute.",
                   field="output")
    if source.is_provider:
        if args["output"] != "features":
            raise fail(f"output={args['output']!r} selects among transformers and timm outputs; a provider node "
                       "returns its model's output, or layer=, layers= or readout=", "Drop output=.", field="output")
        if args["component"]:
            raise fail("component= picks a tower of a multi-modal transformers checkpoint, not of a provider",
                       "Drop component=.", field="component")
    return source


def recheck_source(args: Mapping[str, Any]) -> None:
    """Re-resolve a saved node's source (restoration): a changed checkpoint is E_CONSTRAINT."""
    source = check_arguments(args)
    now = _resolved(source, args, pinned=False)[0]
    if now != args["revision"]:
        raise HNDLError(
            "E_CONSTRAINT",
            f"source {args['source']!r} now resolves to revision {now}, but the plan was resolved against "
            f"{args['revision']}; restoring would load other weights",
            field="revision",
            remedies=("Point the source back at the recorded checkpoint (for the Hub, pin hf://owner/repo@<commit>), "
                      "or re-resolve the specification to adopt the new one deliberately.",),
        )


def _resolved(source: Source, args: Mapping[str, Any], *, pinned: bool = True) -> tuple[str, Adapter]:
    """The revision ``source`` points at now, and the adapter of its configuration.

    Local weights are refused by their size against the architecture the configuration (or the
    provider) describes before they are hashed. ``pinned=False`` does not hold a .pth to its
    ``sha256=`` (restoration reports a changed file as E_CONSTRAINT instead).
    """
    revise = current_revision if pinned else present_revision
    if source.kind == "hub":  # only config.json is read at resolution: there are no weights to hash
        revision = revise(source)
        return revision, _adapter(source, args, revision)
    adapter = _adapter(source, args, None)
    return revise(source, _architecture(source, adapter)), adapter


def _adapter(source: Source, args: Mapping[str, Any], revision: Optional[str]) -> Adapter:
    """The adapter of ``source``'s configuration (of the Hub commit ``revision``; a local one as it is now)."""

    def make() -> Adapter:
        config = read_config(source, revision)
        return adapter_for(source, config, output=args["output"], component=args["component"],
                           readout=args["readout"], registry_of=active_registry)

    if source.is_provider:
        return make()  # per registry: never shared through a cache
    return _ADAPTERS.get((source, config_version(source, revision), args["output"], args["component"]), make)


def _architecture(source: Source, adapter: Adapter) -> StateSize:
    """The state the adapter's architecture registers, measured once on the meta device."""
    return _SIZES.get(adapter.state_key(), lambda: measure_state(adapter.construct, _label(source)))


def _label(source: Source) -> str:
    return f"provider {source.provider!r} ({source.text!r})" if source.is_provider else repr(source.text)


# -- the relation ---------------------------------------------------------------------------------------------
def _relation(s) -> None:
    args = s.args
    source = check_arguments(args)
    revision, adapter = _resolved(source, args)
    s.arg("revision", revision)
    label = _label(source)
    dtype = s.dtype("x")
    if adapter.input_kind == "text":
        if dtype not in _TEXT_DTYPES:
            s.error("E_DTYPE", f"{label} is a text model: it takes token ids as an int64 or int32 input "
                               f"[B, T], not {dtype}")
        s.rank("x", 2)
    else:
        if dtype not in FLOATING:
            s.error("E_DTYPE", f"{label} takes a floating-point input, not {dtype}")
        if adapter.input_kind == "vision":
            _native_resolution(s, adapter.native_input, label)
    shape = s.shape("x")
    if shape is None or any(entry is None for entry in shape[1:]):
        return
    if adapter.max_length is not None and shape[1] > adapter.max_length:
        s.error("E_CONSTRAINT", f"{label} takes at most {adapter.max_length} tokens; the input has T = {shape[1]}")
    shapes = _trace(source, args, revision, tuple(shape[1:]), dtype, label)
    for port, dims in zip(s.outputs, shapes):
        s.rank(port, 1 + len(dims))
        for axis, extent in enumerate(dims, start=1):
            s.axis(port, axis, extent)


def _native_resolution(s, native: tuple[int, ...], label: str) -> None:
    shape = s.shape("x")
    expected = f"[B, {', '.join(map(str, native))}]"
    if shape is not None and (len(shape) != 4 or any(
            entry is not None and entry != want for entry, want in zip(shape[1:], native))):
        shown = ", ".join("?" if entry is None else str(entry) for entry in shape)
        s.error("E_CONSTRAINT", f"{label} takes images {expected} at its native resolution; the input is [{shown}]")
    s.rank("x", 4)
    for axis, extent in enumerate(native, start=1):
        s.axis("x", axis, extent)


def _trace(source: Source, args: Mapping[str, Any], revision: str, shape: tuple, dtype: str, label: str):
    key = freeze_key({**args, "revision": revision})
    if source.is_provider:
        registry = active_registry()
        key += (registry.provider(source.provider),
                registry.readouts(source.provider).get(args["readout"]) if args["readout"] else None)
    return trace_outputs(lambda: Pretrained(**{**args, "revision": revision}), key, shape, dtype,
                         label=label, provider=source.is_provider)


# -- the declaration and the module -------------------------------------------------------------------------
_RESTORE_HOOK = {"restore": recheck_source} if "restore" in inspect.signature(operator).parameters else {}


@operator(
    "pretrained",
    summary="An existing transformers, timm or host-registered .pth checkpoint as one frozen node.",
    shape="x:any -> out*",
    relation=_relation,
    outputs_from="layers",
    validate=check_arguments,
    shape_text=("The checkpoint fixes the input ([B, T] int ids for text, [B, C, H, W] at native resolution "
                "for vision, any floating [B, ...] for a provider); output shapes are traced on the meta device."),
    args={
        "source": Arg(str, help="hf://owner/repo[@revision], a checkpoint directory, a .safetensors file "
                                "(with config=) or a .pth state dict (with provider= and sha256=)."),
        "output": Arg(str, "features", positional=False,
                      help="features, pooled, logits, embeds, or the name of a transformers output attribute."),
        "component": Arg(str, "", positional=False, choices=("", "vision", "text"),
                         help="The tower of a multi-modal checkpoint (CLIP-like): vision or text."),
        "config": Arg(str, "", positional=False, help="The config.json of a bare .safetensors source."),
        "provider": Arg(str, "", positional=False,
                        help="The registry-registered builder whose architecture a .pth state dict fills."),
        "sha256": Arg(str, "", positional=False,
                      help="The SHA-256 of a .pth source, required and verified at resolution and before loading."),
        "layer": Arg(str, "", positional=False,
                     help="Return this submodule's output (dotted named_modules() path) and stop the pass."),
        "layers": Arg("strs", (), positional=False,
                      help="Return these submodules' outputs, one port each (out0, out1, ...), from one pass."),
        "readout": Arg(str, "", positional=False,
                       help="A readout registered for the provider, called as readout(model, x)."),
        "revision": Arg(str, inferable=True, positional=False,
                        help="The resolved Hub commit or local sha256 content digest; inferred and rechecked on "
                             "restore."),
    },
    category="pretrained",
    examples=(
        Example('pretrained("hf://google/vit-base-patch16-224-in21k", output="pooled")',
                ("B", 3, 224, 224), ("B", 768), note="A ViT's pooled features at its native 224x224.",
                network=True),
        Example('pretrained("hf://openai-community/gpt2")', ("B", 16), ("B", 16, 768),
                input_dtype="int64", note="GPT-2 hidden states for 16 token ids.", network=True),
        Example(
            'both = concat(x, x, axis=0)\n'
            'features = pretrained(both, "hf://google/vit-base-patch16-224-in21k", output="pooled")\n'
            'a, b = chunk(features, 2, dim=0)\nout = add(a, b)',
            ("B", 3, 224, 224), ("B", 768), note="One shared backbone over two stacked branches.", network=True,
        ),
    ),
    **_RESTORE_HOOK,
)
class Pretrained(nn.Module):
    """Wraps a checkpoint whose own configuration defines the architecture: a `config.json`
    with a `model_type` is built by transformers, one with an `architecture` by timm, and a
    `.pth` state dict fills the architecture a host registered with
    `registry.pretrained_provider(name, build)`. Nothing in a checkpoint runs as code.

    Text models take int64/int32 token ids `[B, T]`; vision models take `[B, C, H, W]` at the
    checkpoint's native resolution; a provider takes any floating input its model accepts.
    `output=` selects `features` (last hidden state, or timm's `forward_features`), `pooled`,
    `logits`, `embeds` (a dual encoder's projected embedding) or a raw output attribute;
    `component=` picks the vision or text tower of a multi-modal checkpoint. For a provider,
    `layer=` returns one submodule's output, `layers=` several (one port each, from one pass
    that stops after the last of them; captures are cloned), and `readout=` a registered
    readout's single tensor.

    The resolved Hub commit or the local content digest is recorded as `revision`; restoring a
    plan re-resolves the source and fails if it changed. The weights are loaded at build time
    in float32 and cast to the compute dtype; the model is frozen and stays in eval mode while
    the network trains, unless the node is built with `trainable=True`. Resolution reads the
    configuration (fetching only `config.json` from the Hub), hashes local checkpoint files for
    their revision without deserializing them, and traces on the meta device: no weights are
    loaded, no storage is allocated and no random number is drawn. Examples need the network."""

    def __init__(
        self,
        *,
        source: str,
        revision: str,
        output: str = "features",
        component: str = "",
        config: str = "",
        provider: str = "",
        sha256: str = "",
        layer: str = "",
        layers: tuple = (),
        readout: str = "",
    ) -> None:
        super().__init__()
        args = dict(source=source, output=output, component=component, config=config, provider=provider,
                    sha256=sha256, layer=layer, layers=tuple(layers), readout=readout)
        parsed = check_arguments(args)
        device = torch.get_default_device()
        label = _label(parsed)
        if device.type == "meta":  # the architecture only, bounded by the limits in force: no weights are opened
            adapter = _adapter(parsed, args, revision)
            with bounded_construction(label):
                model = adapter.construct()
        else:
            adapter, checkpoint = _verified(parsed, args, revision)
            model = adapter.load(checkpoint).to(device)
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        self.model = model.eval()
        self.adapter = adapter
        self.label = label
        self.layer_names = tuple(layers) or ((layer,) if layer else ())
        self.returns_tuple = bool(layers)
        # Plain references (not registered twice): the hooked submodules of self.model.
        self._hooked = submodules(model, self.layer_names, self.label) if self.layer_names else {}

    # A frozen checkpoint keeps its dropout and batch statistics still while the network trains.
    def _reaches_training(self) -> bool:
        return any(parameter.requires_grad for parameter in self.model.parameters())

    def train(self, mode: bool = True) -> "Pretrained":
        super().train(mode)
        self.model.train(mode and self._reaches_training())
        return self

    def forward(self, x: torch.Tensor):
        wanted = self.training and self._reaches_training()
        if self.model.training != wanted:
            self.model.train(wanted)
        if self.layer_names:
            values = capture(self._hooked, lambda: self.model(x), clone=self.returns_tuple, label=self.label)
            return values if self.returns_tuple else values[0]
        value = self.adapter.run(self.model, x)
        if not isinstance(value, torch.Tensor):
            raise fail(f"{self.label} returned {type(value).__name__}, not one tensor",
                       "A readout or model used as a node must return a single tensor.", field="readout")
        return value

    def extra_repr(self) -> str:
        return f"{self.adapter.library}: {self.label}"


def _verified(source: Source, args: Mapping[str, Any], revision: str) -> tuple[Adapter, Checkpoint]:
    """The adapter and weights a build loads, from bytes hashed as they were read (never a cache).

    The weight files are refused by size against the architecture first, so a file swapped for
    a huge one after resolution is neither hashed nor read.
    """
    if source.is_provider and revision != "sha256:" + source.sha256:
        raise fail(f"revision {revision!r} does not match sha256={source.sha256}", field="revision")
    adapter = _adapter(source, args, revision)
    architecture = _architecture(source, adapter)
    if source.is_provider:
        return adapter, Checkpoint(config=None, tensors=load_state_dict_file(source, architecture))
    checkpoint = verified_checkpoint(source, revision, architecture)
    return adapter_for(source, checkpoint.config, output=args["output"], component=args["component"],
                       readout=args["readout"], registry_of=active_registry), checkpoint
