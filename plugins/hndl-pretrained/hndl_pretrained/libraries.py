"""The three ways a checkpoint becomes an ``nn.Module``: transformers, timm, a host provider.

An adapter knows, from the checkpoint's configuration alone, what input the model takes
(token ids, an image at its native resolution, or any floating tensor), how to construct the
architecture (under whatever device context the caller set: ``meta`` during resolution and
the allocation-free probes, the target device at build time), how to load the weights, and
how to run the model for the selected ``output=``.

Nothing in a checkpoint runs as code: transformers is never asked to trust remote code and
reads only safetensors; timm builds only architectures it registers itself; a provider is a
builder the host registered on its registry. Nothing in a checkpoint chooses another file to
load either: configuration keys that would make a library load a file, fetch from the Hub or
import code (:data:`TIMM_REFUSED`, :data:`TRANSFORMERS_REFUSED`) are refused, and the fields
HNDL reads itself are type-checked, so a malformed one is E_PRETRAINED, never a TypeError.
Weights reach the libraries only as tensors already read and verified (``sources.Checkpoint``).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from hndl import HNDLError

from .sources import Checkpoint, Source, fail, load_state_dict_file, require

#: Named outputs (§9); anything else names a raw attribute of a transformers output.
NAMED_OUTPUTS = ("features", "pooled", "logits", "embeds")
_TRANSFORMERS_NAMES = {"features": "last_hidden_state", "pooled": "pooler_output", "logits": "logits"}
_EMBEDS = ("image_embeds", "text_embeds", "embeds")
#: The tower attribute and the projected-feature method of a dual-encoder component.
_FEATURES_METHOD = {"vision": "get_image_features", "text": "get_text_features"}
_INPUT_NAME = {"vision": "pixel_values", "text": "input_ids"}
_KIND_OF_INPUT = {"input_ids": "text", "pixel_values": "vision"}
_LISTED = 64

#: timm ``pretrained_cfg`` keys that name weights to fetch or a loader to run (refused when set).
TIMM_REFUSED_CFG = ("hf_hub_id", "hf_hub_filename", "url", "file", "source", "state_dict", "custom_load")
#: timm ``model_args`` keys that make ``create_model`` load a file or look up another configuration.
TIMM_REFUSED_ARGS = ("checkpoint_path", "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir",
                     "pretrained_strict")
TIMM_REFUSED = tuple(f"pretrained_cfg.{key}" for key in TIMM_REFUSED_CFG) + tuple(
    f"model_args.{key}" for key in TIMM_REFUSED_ARGS)
#: transformers configuration keys (at any nesting depth) that make it load weights, code or another
#: configuration: why each one is refused.
TRANSFORMERS_REFUSED = {
    "use_pretrained_backbone": "loads pretrained backbone weights from another checkpoint",
    "quantization_config": "imports and runs a quantization backend while loading",
    "backbone": "names a Hub repository or directory whose configuration is loaded (unless a backbone_config "
                "is given, or it is a timm architecture name inside a timm_backbone configuration)",
    "attn_implementation": "a Hub kernel reference (owner/repo) downloads and imports kernel code",
    "_attn_implementation": "a Hub kernel reference (owner/repo) downloads and imports kernel code",
}


def listing(names, limit: int = _LISTED) -> str:
    """A bounded, comma-separated listing for error messages."""
    names = list(names)
    shown = ", ".join(names[:limit]) or "none"
    return shown + (f", ... and {len(names) - limit} more" if len(names) > limit else "")


def _float32(state: Mapping[str, torch.Tensor]) -> dict:
    """Weights are loaded in float32 (the build casts them to the compute dtype afterwards)."""
    return {key: value.float() if value.is_floating_point() else value for key, value in state.items()}


def _strict_load(model: nn.Module, state: Mapping[str, torch.Tensor], what: str) -> None:
    try:
        model.load_state_dict(_float32(state), strict=True)
    except RuntimeError as error:
        raise fail(f"the weights of {what} do not fit its architecture: {error}",
                   "Check that the checkpoint and the architecture belong together.") from None


def _isolated_rng():
    """Loading draws nothing from the caller's generators (an architecture may initialise randomly first)."""
    return torch.random.fork_rng(devices=[])


class Adapter:
    """What the operator needs from a library.

    ``input_kind`` is text, vision or float; ``native_input`` the (C, H, W) a vision model
    takes; ``max_length`` the longest token sequence a text model takes. Every adapter defines
    ``construct()`` (the architecture, under the caller's device context), ``load(weights)``
    (the architecture with its checkpoint weights, in float32 on the CPU) and ``run(model, x)``.
    """

    library: str
    input_kind: str
    native_input: Optional[tuple[int, ...]] = None
    max_length: Optional[int] = None


# -- transformers -------------------------------------------------------------------------------------
class TransformersAdapter(Adapter):
    library = "transformers"

    def __init__(self, config: Mapping[str, Any], *, output: str, component: str, label: str) -> None:
        transformers = require("transformers")
        self.label = label
        self.output = output
        self.component = component
        model_type = config.get("model_type")
        mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING
        if not isinstance(model_type, str) or model_type not in mapping:
            raise fail(f"{label}: transformers {transformers.__version__} does not know model_type {model_type!r}",
                       "Upgrade transformers, or use a checkpoint of a model type it ships (remote code never runs).")
        refuse_transformers_keys(config, label)
        try:
            self.config = mapping[model_type].from_dict(dict(config))
        except Exception as error:
            raise fail(f"{label}: config.json is not a valid {model_type} configuration: "
                       f"{type(error).__name__}: {error}") from None
        towers = tuple(name for name in _FEATURES_METHOD if getattr(self.config, f"{name}_config", None) is not None)
        if component:
            if component not in towers:
                raise fail(f"{label}: component={component!r} names no tower of this {model_type} checkpoint "
                           f"(towers: {listing(towers)})", field="component")
            if output == "logits":
                raise fail(f"{label}: a {component} tower has no logits; use features, pooled or embeds",
                           field="output")
            self.tower_config = getattr(self.config, f"{component}_config")
            self.input_name = _INPUT_NAME[component]
        elif len(towers) > 1:
            raise fail(f"{label}: this {model_type} checkpoint is multi-modal; pick one tower with "
                       f"component=\"vision\" or component=\"text\"", field="component")
        self.model_class = self._model_class(transformers, model_type)
        if not component:
            self.tower_config = self.config
            self.input_name = getattr(self.model_class, "main_input_name", None)
        self.input_kind = _KIND_OF_INPUT.get(self.input_name)
        if self.input_kind is None:
            raise fail(f"{label}: {self.model_class.__name__} takes {self.input_name!r}; the pretrained operator "
                       "supports token-id (input_ids) and image (pixel_values) models")
        if self.input_kind == "vision":
            size = getattr(self.tower_config, "image_size", None)
            size = (size, size) if _positive_int(size) else size
            channels = getattr(self.tower_config, "num_channels", 3)
            if not _positive_ints(size, 2) or not _positive_int(channels):
                raise fail(f"{label}: config.json gives no usable image_size/num_channels for a vision model "
                           "(image_size: a positive int or two; num_channels: a positive int)")
            self.native_input = (channels, *size)
        else:
            length = getattr(self.tower_config, "max_position_embeddings", None)
            self.max_length = length if _positive_int(length) else None
        self._forward_takes = None

    def _model_class(self, transformers, model_type: str) -> type:
        if self.output == "logits":
            names = getattr(self.config, "architectures", None) or ()
            if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
                raise fail(f"{self.label}: config.json's architectures is not a list of class names", field="output")
            names = list(names)
            for name in names:
                cls = getattr(transformers, name, None)
                if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel) and isinstance(
                        self.config, cls.config_class):
                    return cls
            raise fail(f"{self.label}: output=\"logits\" needs the checkpoint's own head class, but config.json "
                       f"lists architectures [{listing(names)}], none a transformers class for {model_type}",
                       "Select features or pooled, or use a checkpoint saved with its head.", field="output")
        try:
            return transformers.MODEL_MAPPING[type(self.config)]
        except KeyError:
            raise fail(f"{self.label}: transformers has no base model class for model_type {model_type!r}") from None

    def _drop_other_towers(self, model: nn.Module) -> nn.Module:
        """A component keeps only its own tower: the other ones are never run or stored."""
        if self.component:
            for other in _FEATURES_METHOD:
                if other != self.component and isinstance(getattr(model, f"{other}_model", None), nn.Module):
                    setattr(model, f"{other}_model", None)
        return model

    def construct(self) -> nn.Module:
        try:
            model = self.model_class(self.config)
        except (HNDLError, MemoryError):
            raise  # a resource bound stopped construction, or memory ran out: never a config problem
        except Exception as error:
            raise fail(f"{self.label}: {self.model_class.__name__} cannot be built from config.json: "
                       f"{type(error).__name__}: {error}") from None
        return self._drop_other_towers(model.eval())

    def load(self, checkpoint: Checkpoint) -> nn.Module:
        """The model with the verified tensors: from_pretrained gets a state dict, never a path, so
        it reads no file (no weights, no adapter configuration) of its own choosing."""
        try:
            with _isolated_rng(), torch.device("cpu"):
                model, info = self.model_class.from_pretrained(
                    None, config=self.config, state_dict=dict(checkpoint.tensors), dtype=torch.float32,
                    local_files_only=True, use_safetensors=True, trust_remote_code=False, output_loading_info=True,
                )
        except Exception as error:
            raise fail(f"{self.label}: transformers cannot load the weights: {type(error).__name__}: {error}") from None
        missing = sorted(info.get("missing_keys") or ())
        mismatched = list(info.get("mismatched_keys") or ())
        if missing or mismatched or info.get("error_msgs"):
            problems = [f"missing {listing(missing, 8)}" if missing else "",
                        f"mismatched {listing([str(m) for m in mismatched], 8)}" if mismatched else "",
                        "; ".join(map(str, info.get("error_msgs") or ()))]
            raise fail(f"{self.label}: the checkpoint does not hold every weight of {self.model_class.__name__} "
                       f"({'; '.join(p for p in problems if p)}); nothing is initialised at random",
                       "Select an output the saved model provides (a base checkpoint has no head logits).")
        return self._drop_other_towers(model.eval())

    def run(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        inputs = {self.input_name: x}
        if self.component and self.output == "embeds":
            method = getattr(model, _FEATURES_METHOD[self.component], None)
            if method is None:
                raise fail(f"{self.label}: {type(model).__name__} has no {_FEATURES_METHOD[self.component]} "
                           "for embeds", field="output")
            value = method(**inputs)
            if not isinstance(value, torch.Tensor):  # transformers 5 wraps projected features
                value = getattr(value, "pooler_output", None)
            return self._tensor(value, "embeds")
        target = model
        if self.component:
            target = getattr(model, f"{self.component}_model", None)
            if not isinstance(target, nn.Module):
                raise fail(f"{self.label}: {type(model).__name__} has no {self.component}_model tower",
                           field="component")
        outputs = target(**inputs, **self._options(target, tracing=x.device.type == "meta"))
        if isinstance(outputs, torch.Tensor):
            raise fail(f"{self.label}: the model returned a bare tensor; output= cannot select from it")
        available = [key for key, value in outputs.items() if isinstance(value, torch.Tensor)]
        if self.output == "embeds":
            name = next((key for key in _EMBEDS if key in available), None)
        else:
            name = _TRANSFORMERS_NAMES.get(self.output, self.output)
        if name is None or name not in available:
            raise fail(f"{self.label}: output={self.output!r} is not produced by {type(target).__name__}; its "
                       f"tensor outputs are {listing(available)}",
                       "Select one of those attributes by name, or features/pooled/logits/embeds where they apply.",
                       field="output")
        return outputs[name]

    def _options(self, target: nn.Module, *, tracing: bool) -> dict:
        """Keyword options of a call: no key/value cache at run time.

        A meta trace keeps the model's default cache handling, because without a cache some
        models inspect position values (packed-sequence detection), which meta tensors lack.
        """
        if self._forward_takes is None:
            try:
                self._forward_takes = frozenset(inspect.signature(target.forward).parameters)
            except (TypeError, ValueError):
                self._forward_takes = frozenset()
        options = {"return_dict": True}
        if "use_cache" in self._forward_takes and not tracing:
            options["use_cache"] = False
        return options

    def _tensor(self, value: Any, what: str) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise fail(f"{self.label}: {what} did not produce one tensor", field="output")
        return value


# -- timm ------------------------------------------------------------------------------------------------
def parse_timm_config(config: Mapping[str, Any], label: str) -> tuple[str, dict, dict]:
    """(architecture, pretrained_cfg, model_args) as timm's own hub loader reads config.json.

    Every field read here is type-checked, and a key that would make timm load a file or look
    up another configuration (:data:`TIMM_REFUSED`) is refused rather than dropped.
    """
    config = dict(config)
    if "pretrained_cfg" not in config:  # the legacy single-dict form
        pretrained_cfg = dict(config)
        config = {"architecture": pretrained_cfg.pop("architecture", None), "pretrained_cfg": pretrained_cfg}
        if "labels" in pretrained_cfg:
            pretrained_cfg["label_names"] = pretrained_cfg.pop("labels")
    pretrained_cfg = config.get("pretrained_cfg")
    model_args = config.get("model_args", {})
    if not isinstance(pretrained_cfg, dict) or not isinstance(model_args, dict):
        raise fail(f"{label}: config.json has a malformed pretrained_cfg or model_args (each must be an object)")
    pretrained_cfg, model_args = dict(pretrained_cfg), dict(model_args)
    for where, keys, given in (("pretrained_cfg", TIMM_REFUSED_CFG, pretrained_cfg),
                               ("model_args", TIMM_REFUSED_ARGS, model_args)):
        for key in keys:
            if given.get(key) not in (None, False, "", [], {}):
                raise fail(f"{label}: config.json sets {where}.{key}, which would make timm load another file "
                           "or configuration; weights come only from the checkpoint source itself",
                           f"Remove {where}.{key} from config.json.")
        for key in keys:
            given.pop(key, None)
    _check_field(label, "num_classes", config.get("num_classes"), lambda v: _positive_int(v) or v == 0,
                 "a non-negative int")
    _check_field(label, "pretrained_cfg.input_size", pretrained_cfg.get("input_size"),
                 lambda v: _positive_ints(v, 3), "three positive ints (C, H, W)")
    _check_field(label, "pretrained_cfg.fixed_input_size", pretrained_cfg.get("fixed_input_size"),
                 lambda v: isinstance(v, bool), "true or false")
    _check_field(label, "model_args.in_chans", model_args.get("in_chans"), _positive_int, "a positive int")
    _check_field(label, "model_args.img_size", model_args.get("img_size"),
                 lambda v: _positive_int(v) or _positive_ints(v, 2), "a positive int or two")
    if "num_classes" in config:
        pretrained_cfg["num_classes"] = config["num_classes"]
    if model_args.get("in_chans") is not None:
        size = pretrained_cfg.get("input_size") or (3, 224, 224)
        pretrained_cfg["input_size"] = (model_args["in_chans"], *size[1:])
    if model_args.get("img_size") is not None and pretrained_cfg.get("fixed_input_size", False):
        size = model_args["img_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        pretrained_cfg["input_size"] = (pretrained_cfg.get("input_size", (3,))[0], *size)
    return config.get("architecture"), pretrained_cfg, model_args


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _positive_ints(value: Any, count: int) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == count and all(map(_positive_int, value))


def _check_field(label: str, name: str, value: Any, valid: Callable[[Any], bool], expected: str) -> None:
    """E_PRETRAINED naming ``name`` when a present (non-null) config.json field is malformed."""
    if value is not None and not valid(value):
        shown = repr(value)
        raise fail(f"{label}: config.json field {name} must be {expected}, not "
                   f"{shown if len(shown) <= 80 else shown[:80] + '...'}", f"Correct {name} in config.json.")


def refuse_transformers_keys(config: Mapping[str, Any], label: str, where: str = "") -> None:
    """E_PRETRAINED for a :data:`TRANSFORMERS_REFUSED` key anywhere in a transformers config.json."""
    for key, value in config.items():
        name = f"{where}{key}"
        if key in TRANSFORMERS_REFUSED and value not in (None, False, "", {}) and not _harmless(key, value, config):
            raise fail(f"{label}: config.json sets {name}, which {TRANSFORMERS_REFUSED[key]}; a checkpoint loads "
                       "nothing beyond its own files", f"Remove {name} from config.json.")
        if isinstance(value, Mapping):
            refuse_transformers_keys(value, label, f"{name}.")


def _harmless(key: str, value: Any, config: Mapping[str, Any]) -> bool:
    """The refused keys' values that load nothing: built-in attention, a timm name or an unused backbone."""
    if key in ("attn_implementation", "_attn_implementation"):
        return isinstance(value, str) and "/" not in value and ":" not in value
    if key == "backbone":
        bare = isinstance(value, str) and value.replace("_", "").replace(".", "").replace("-", "").isalnum()
        return bare and (config.get("model_type") == "timm_backbone" or config.get("backbone_config") is not None)
    return False


class TimmAdapter(Adapter):
    library = "timm"
    input_kind = "vision"

    def __init__(self, config: Mapping[str, Any], *, output: str, component: str, label: str) -> None:
        timm = require("timm")
        self.label = label
        self.output = output
        if component:
            raise fail(f"{label}: component= picks a tower of a multi-modal transformers checkpoint; "
                       "a timm model has none", field="component")
        if output not in ("features", "pooled", "logits"):
            raise fail(f"{label}: a timm model offers output features, pooled or logits, not {output!r}",
                       field="output")
        architecture, self.pretrained_cfg, self.model_args = parse_timm_config(config, label)
        if not isinstance(architecture, str) or ":" in architecture or not timm.is_model(architecture):
            raise fail(f"{label}: timm {timm.__version__} has no architecture {architecture!r}",
                       "Use an architecture timm registers (timm.list_models()).")
        self.architecture = architecture
        size = self.pretrained_cfg.get("input_size")
        if size is None:
            default = timm.models.get_pretrained_cfg(architecture)
            size = getattr(default, "input_size", None)
        size = tuple(size or ())
        if len(size) != 3 or not all(isinstance(v, int) and v > 0 for v in size):
            raise fail(f"{label}: config.json gives no usable pretrained_cfg.input_size (C, H, W)")
        self.native_input = size

    def construct(self) -> nn.Module:
        timm = require("timm")
        try:
            model = timm.create_model(self.architecture, pretrained=False,
                                      pretrained_cfg_overlay=self.pretrained_cfg, **self.model_args)
        except (HNDLError, MemoryError):
            raise  # a resource bound stopped construction, or memory ran out: never a config problem
        except Exception as error:
            raise fail(f"{self.label}: timm cannot build {self.architecture} from config.json: "
                       f"{type(error).__name__}: {error}") from None
        if self.output == "logits" and not getattr(model, "num_classes", 0):
            raise fail(f"{self.label}: {self.architecture} was saved without a classifier (num_classes=0), "
                       "so it has no logits", field="output")
        return model.eval()

    def load(self, checkpoint: Checkpoint) -> nn.Module:
        with _isolated_rng(), torch.device("cpu"):
            model = self.construct()
        _strict_load(model, checkpoint.tensors, self.label)
        return model

    def run(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.output == "logits":
            return model(x)
        features = model.forward_features(x)
        if self.output == "features":
            return features
        return model.forward_head(features, pre_logits=True)


# -- a host-registered provider ------------------------------------------------------------------------------
class ProviderAdapter(Adapter):
    library = "provider"
    input_kind = "float"

    def __init__(self, source: Source, registry, *, readout: str) -> None:
        self.source = source
        self.label = f"provider {source.provider!r}"
        self.build = registry.provider(source.provider)
        self.readout = None
        if readout:
            offered = registry.readouts(source.provider)
            if readout not in offered:
                raise fail(f"provider {source.provider!r} offers no readout {readout!r} "
                           f"(it offers: {listing(sorted(offered))})",
                           "Register it with registry.pretrained_readout(provider, name, fn).", field="readout")
            self.readout = offered[readout]

    def construct(self) -> nn.Module:
        module = self.build()
        if not isinstance(module, nn.Module):
            raise fail(f"{self.label} built {type(module).__name__}, not an nn.Module", field="provider")
        return module

    def load(self, checkpoint: Optional[Checkpoint]) -> nn.Module:
        state = load_state_dict_file(self.source)  # verified against sha256= from the bytes it loads
        with _isolated_rng():
            model = self.construct()
        _strict_load(model, state, repr(self.source.text))
        return model

    def run(self, model: nn.Module, x: torch.Tensor) -> Any:
        return self.readout(model, x) if self.readout is not None else model(x)


def adapter_for(source: Source, config: Optional[Mapping[str, Any]], *, output: str, component: str,
                readout: str, registry_of: Callable[[], Any]) -> Adapter:
    """The adapter a checkpoint's configuration selects: model_type -> transformers, architecture -> timm."""
    if source.is_provider:
        return ProviderAdapter(source, registry_of(), readout=readout)
    label = repr(source.text)
    if "model_type" in config:
        return TransformersAdapter(config, output=output, component=component, label=label)
    if "architecture" in config:
        return TimmAdapter(config, output=output, component=component, label=label)
    raise fail(f"{label}: config.json names neither a transformers model_type nor a timm architecture",
               "Use a checkpoint saved by transformers (save_pretrained) or timm (push_to_hf_hub/save_for_hf).")
