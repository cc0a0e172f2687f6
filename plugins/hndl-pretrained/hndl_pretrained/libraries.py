"""The three ways a checkpoint becomes an ``nn.Module``: transformers, timm, a host provider.

An adapter knows, from the checkpoint's configuration alone, what input the model takes
(token ids, an image at its native resolution, or any floating tensor), how to construct the
architecture (under whatever device context the caller set: ``meta`` during resolution and
the allocation-free probes, the target device at build time), how to load the weights, and
how to run the model for the selected ``output=``.

Nothing in a checkpoint runs as code: transformers is never asked to trust remote code and
reads only safetensors; timm builds only architectures it registers itself; a provider is a
builder the host registered on its registry. Nothing in a checkpoint chooses another file to
load either: config.json is read through an allowlist per route (:func:`transformers_config`,
:func:`parse_timm_config`), so a key a route does not need (one that would make a library load
a file, fetch from the Hub or import code included) is E_PRETRAINED naming the key to remove;
attention is pinned to torch's own (:data:`TORCH_ATTENTION`); a timm architecture is a bare
registered name (never ``hf-hub:`` or ``local-dir:``), wherever it appears. The fields HNDL reads
itself are type-checked, so a malformed one is E_PRETRAINED, never a TypeError. Weights reach
the libraries only as tensors already read and verified (``sources.Checkpoint``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Mapping, Optional

import torch
from torch import nn

from hndl import HNDLError
from hndl.errors import echo, listed

from .sources import Checkpoint, Source, fail, require

#: Named outputs (§9); anything else names a raw attribute of a transformers output.
NAMED_OUTPUTS = ("features", "pooled", "logits", "embeds")
_TRANSFORMERS_NAMES = {"features": "last_hidden_state", "pooled": "pooler_output", "logits": "logits"}
_EMBEDS = ("image_embeds", "text_embeds", "embeds")
#: The tower attribute and the projected-feature method of a dual-encoder component.
_FEATURES_METHOD = {"vision": "get_image_features", "text": "get_text_features"}
_INPUT_NAME = {"vision": "pixel_values", "text": "input_ids"}
_KIND_OF_INPUT = {"input_ids": "text", "pixel_values": "vision"}
_LISTED = 64

# -- what config.json may hold: an allowlist per route --------------------------------------------------------
#: The top-level keys of a timm config.json (timm's hub format): ``architecture``, ``pretrained_cfg`` and
#: ``model_args`` are checked key by key; ``num_classes`` sets the classifier; the rest is metadata.
TIMM_KEYS = ("architecture", "num_classes", "num_features", "global_pool", "pretrained_cfg", "model_args",
             "label_names", "label_descriptions")
#: timm ``PretrainedCfg`` fields that say where weights come from: not accepted (the source's own files are
#: the weights). Every other field of timm's ``PretrainedCfg`` is (``custom_load`` only when false).
TIMM_WEIGHT_LOCATIONS = ("url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source")
#: Arguments ``create_model`` and ``build_model_with_cfg`` consume to load, look up or place a model: never
#: accepted in ``model_args``, even where a model class names one of them (the loader takes them first).
TIMM_LOADER_ARGUMENTS = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path", "cache_dir",
                         "pretrained_strict", "pretrained_filter_fn", "pretrained_model_args", "kwargs_filter",
                         "model_cfg", "feature_cfg", "features_only", "feature_cls", "out_indices", "pruned",
                         "scriptable", "exportable", "no_jit", "device", "dtype")
#: Attention implemented by torch itself: the model's own code (eager) or scaled_dot_product_attention (sdpa).
#: Every other choice (flash_attention_*, flex_attention, paged|..., a Hub kernel owner/repo) can import a
#: package or download and import compiled kernel code.
TORCH_ATTENTION = ("eager", "sdpa")
ATTENTION_KEYS = ("attn_implementation", "_attn_implementation")
#: Keys any transformers configuration may carry besides its own (which its class defines), passed on.
TRANSFORMERS_GENERIC = ("model_type", "architectures", "dtype", "torch_dtype", "id2label", "label2id", "num_labels",
                        "problem_type", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
                        "decoder_start_token_id", "tie_word_embeddings", "is_encoder_decoder", "is_decoder",
                        "add_cross_attention", "chunk_size_feed_forward", "use_cache", *ATTENTION_KEYS)
#: Keys tolerated and dropped where the configuration class does not define them: they never reach
#: transformers. Provenance and tokenizer metadata, output switches HNDL sets itself, and keys older
#: transformers versions saved that transformers 5 no longer reads (the generic attributes of 4.x, GPT-2's
#: n_ctx, CLIP's tower dropout). Generation settings (the keys of transformers' GenerationConfig) and keys
#: set to null are dropped too.
TRANSFORMERS_METADATA = ("transformers_version", "_name_or_path", "_commit_hash", "auto_map", "task_specific_params",
                         "finetuning_task", "tokenizer_class", "prefix", "output_attentions", "output_hidden_states",
                         "return_dict", "torchscript", "use_bfloat16", "tf_legacy_loss", "tie_encoder_decoder",
                         "cross_attention_hidden_size", "gradient_checkpointing", "xla_device", "output_past",
                         "_num_labels", "n_ctx", "dropout")
#: Keys dropped only when empty: pruned heads would change the architecture.
TRANSFORMERS_EMPTY_ONLY = ("pruned_heads",)
#: Own keys of a transformers configuration that name a timm model: each is checked as the timm route would.
TIMM_REFERENCES = ("architecture", "backbone")


def listing(names, limit: int = _LISTED) -> str:
    """A bounded, escaped, comma-separated listing of checkpoint names for error messages ("none" when empty)."""
    return listed(names, limit=limit, show=lambda name: echo(str(name), 200)) or "none"


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

    def state_key(self) -> Any:
        """What the architecture ``construct()`` builds depends on: the adapter itself (for a provider,
        its source and builder)."""
        return self


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
        allowed = transformers_config(config, mapping[model_type], label)
        try:
            self.config = mapping[model_type].from_dict(allowed)
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
        self.attention = pinned_attention(allowed, self.model_class)
        self.config._attn_implementation = self.attention  # set on every sub-configuration too
        if not component:
            self.tower_config = self.config
            self.input_name = getattr(self.model_class, "main_input_name", None)
        self.input_kind = _KIND_OF_INPUT.get(self.input_name)
        if self.input_kind is None:
            raise fail(f"{label}: {self.model_class.__name__} takes {self.input_name!r}; the pretrained operator "
                       "supports token-id (input_ids) and image (pixel_values) models")
        if self.input_kind == "vision" and _timm_backed(self.tower_config):
            architecture, pretrained_cfg, model_args = parse_timm_config(
                {"architecture": self.tower_config.architecture,
                 "pretrained_cfg": getattr(self.tower_config, "pretrained_cfg", None) or {},
                 "model_args": self.tower_config.model_args or {}}, label)
            self.native_input = timm_native_input(architecture, pretrained_cfg, model_args, label)
        elif self.input_kind == "vision":
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
        return self._drop_other_towers(self._torch_attention(model).eval())

    def _torch_attention(self, model: nn.Module) -> nn.Module:
        """The model, once it is sure to run torch's own attention (as pinned) everywhere."""
        chosen = {getattr(getattr(module, "config", None), "_attn_implementation", None) for module in model.modules()}
        if not chosen <= {None, *TORCH_ATTENTION}:
            other = sorted(map(str, chosen - {None, *TORCH_ATTENTION}))
            raise fail(f"{self.label}: transformers chose attention {other}, not torch's own "
                       f"({' or '.join(TORCH_ATTENTION)})")
        return model

    def load(self, checkpoint: Checkpoint) -> nn.Module:
        """The model with the verified tensors: from_pretrained gets a state dict, never a path, so
        it reads no file (no weights, no adapter configuration) of its own choosing."""
        try:
            with _isolated_rng(), torch.device("cpu"):
                model, info = self.model_class.from_pretrained(
                    None, config=self.config, state_dict=dict(checkpoint.tensors), dtype=torch.float32,
                    local_files_only=True, use_safetensors=True, trust_remote_code=False, output_loading_info=True,
                    attn_implementation=self.attention,
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
        return self._drop_other_towers(self._torch_attention(model).eval())

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
def parse_timm_config(config: Mapping[str, Any], label: str, where: str = "") -> tuple[str, dict, dict]:
    """(architecture, pretrained_cfg, model_args) as timm's own hub loader reads config.json.

    The configuration is read through the timm route's allowlist: the top-level keys of
    :data:`TIMM_KEYS`; ``pretrained_cfg`` keys that timm's ``PretrainedCfg`` defines, except the
    weight locations (:data:`TIMM_WEIGHT_LOCATIONS`) and a true ``custom_load``; ``model_args``
    keys the architecture's model classes take (:func:`timm_model_arguments`); and an
    ``architecture`` that is a bare name timm registers. The fields HNDL reads are type-checked
    first. Anything else is E_PRETRAINED naming the key to remove (prefixed with ``where``, the
    position of a configuration nested in another).
    """
    config = dict(config)
    if "pretrained_cfg" not in config:  # the legacy single-dict form
        pretrained_cfg = dict(config)
        config = {"architecture": pretrained_cfg.pop("architecture", None), "pretrained_cfg": pretrained_cfg}
        for key in ("num_features", "num_classes"):
            if key in pretrained_cfg:
                config[key] = pretrained_cfg.pop(key)
        if "labels" in pretrained_cfg:
            pretrained_cfg["label_names"] = pretrained_cfg.pop("labels")
    pretrained_cfg = config.get("pretrained_cfg")
    model_args = config.get("model_args", {})
    if not isinstance(pretrained_cfg, dict) or not isinstance(model_args, dict):
        raise fail(f"{label}: config.json has a malformed {where}pretrained_cfg or {where}model_args (each must be "
                   "an object)")
    pretrained_cfg, model_args = dict(pretrained_cfg), dict(model_args)
    _check_timm_fields(config, pretrained_cfg, model_args, label, where)
    _only_keys(config, TIMM_KEYS, label, where, "the timm route reads")
    architecture = timm_architecture(config.get("architecture"), label, f"{where}architecture")
    _only_keys(pretrained_cfg, timm_pretrained_cfg_keys(), label, f"{where}pretrained_cfg.",
               "timm's PretrainedCfg defines (weight locations excepted)")
    if pretrained_cfg.get("custom_load") not in (None, False):
        _refuse(label, f"{where}pretrained_cfg.custom_load", "which would make timm run a model-specific weight loader")
    _only_keys(model_args, timm_model_arguments(architecture), label, f"{where}model_args.",
               f"the model classes of timm's {architecture} take (loader and placement arguments excepted)")
    if "num_classes" in config:
        pretrained_cfg["num_classes"] = config["num_classes"]
    _adjust_input_size(pretrained_cfg, model_args)
    return architecture, pretrained_cfg, model_args


def _adjust_input_size(pretrained_cfg: dict, model_args: Mapping[str, Any]) -> None:
    """Apply ``model_args``' channels and (for a fixed-size model) image size to ``pretrained_cfg``'s
    input size, as timm's hub loader does."""
    if model_args.get("in_chans") is not None:
        size = pretrained_cfg.get("input_size") or (3, 224, 224)
        pretrained_cfg["input_size"] = (model_args["in_chans"], *size[1:])
    if model_args.get("img_size") is not None and pretrained_cfg.get("fixed_input_size", False):
        size = model_args["img_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        pretrained_cfg["input_size"] = (pretrained_cfg.get("input_size", (3,))[0], *size)


def _check_timm_fields(config: Mapping[str, Any], pretrained_cfg: Mapping[str, Any], model_args: Mapping[str, Any],
                       label: str, where: str) -> None:
    """E_PRETRAINED naming the field when one of the timm fields HNDL reads is malformed."""
    _check_field(label, f"{where}num_classes", config.get("num_classes"), lambda v: _positive_int(v) or v == 0,
                 "a non-negative int")
    _check_field(label, f"{where}pretrained_cfg.input_size", pretrained_cfg.get("input_size"),
                 lambda v: _positive_ints(v, 3), "three positive ints (C, H, W)")
    _check_field(label, f"{where}pretrained_cfg.fixed_input_size", pretrained_cfg.get("fixed_input_size"),
                 lambda v: isinstance(v, bool), "true or false")
    _check_field(label, f"{where}model_args.in_chans", model_args.get("in_chans"), _positive_int, "a positive int")
    _check_field(label, f"{where}model_args.img_size", model_args.get("img_size"),
                 lambda v: _positive_int(v) or _positive_ints(v, 2), "a positive int or two")


def timm_architecture(value: Any, label: str, name: str) -> str:
    """``value`` as a timm architecture: a bare name timm registers, never a model source.

    ``hf-hub:owner/repo`` and ``local-dir:/path`` would make timm fetch or read another
    configuration (and its model_args) instead of the checkpoint's own.
    """
    timm = require("timm")
    if isinstance(value, str) and (":" in value or "/" in value):
        _refuse(label, name, f"which names a timm model source ({_short(value)}; hf-hub: or local-dir:) that would "
                             "make timm fetch or read another configuration",
                f"Set {name} to a bare timm architecture name (such as 'resnet18').")
    if not isinstance(value, str) or not timm.is_model(value):
        raise fail(f"{label}: timm {timm.__version__} has no architecture {_short(value)} (config.json field {name})",
                   "Use an architecture timm registers (timm.list_models()).")
    return value


@functools.lru_cache(maxsize=1)
def timm_pretrained_cfg_keys() -> frozenset:
    """The ``pretrained_cfg`` keys accepted: the fields of timm's ``PretrainedCfg`` but the weight locations."""
    timm_models = require("timm.models")
    return frozenset(field.name for field in dataclasses.fields(timm_models.PretrainedCfg)) - set(TIMM_WEIGHT_LOCATIONS)


@functools.lru_cache(maxsize=256)
def timm_model_arguments(architecture: str) -> frozenset:
    """The ``model_args`` keys accepted for ``architecture``: keyword parameters of the model classes in the
    module that defines its entrypoint (the classes ``create_model`` passes arguments to), less
    :data:`TIMM_LOADER_ARGUMENTS`."""
    timm_models = require("timm.models")
    name = timm_models.split_model_name_tag(architecture)[0]
    module = inspect.getmodule(timm_models.model_entrypoint(name))
    keys = set()
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, nn.Module):
            keys |= keyword_parameters(value)
    return frozenset(keys - set(TIMM_LOADER_ARGUMENTS))


def timm_native_input(architecture: str, pretrained_cfg: Mapping[str, Any], model_args: Mapping[str, Any],
                      label: str) -> tuple[int, int, int]:
    """The (C, H, W) a timm model takes: the input size of its ``pretrained_cfg`` (as :func:`parse_timm_config`
    returns it), else that of timm's default configuration for the architecture under ``model_args``."""
    size = pretrained_cfg.get("input_size")
    if size is None:
        timm_models = require("timm.models")
        default = timm_models.get_pretrained_cfg(architecture)
        merged = {**(default.to_dict() if default is not None else {}), **pretrained_cfg}
        _adjust_input_size(merged, model_args)
        size = merged.get("input_size")
    size = tuple(size or ())
    if len(size) != 3 or not all(_positive_int(v) for v in size):
        raise fail(f"{label}: config.json gives no usable pretrained_cfg.input_size (C, H, W)")
    return size


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _positive_ints(value: Any, count: int) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == count and all(map(_positive_int, value))


def _short(value: Any) -> str:
    """``repr`` of a config.json value, cut to a bounded length for a message."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:80] + "..."


def _check_field(label: str, name: str, value: Any, valid: Callable[[Any], bool], expected: str) -> None:
    """E_PRETRAINED naming ``name`` when a present (non-null) config.json field is malformed."""
    if value is not None and not valid(value):
        raise fail(f"{label}: config.json field {name} must be {expected}, not {_short(value)}",
                   f"Correct {name} in config.json.")


def _refuse(label: str, name: str, why: str, *remedies: str) -> None:
    """E_PRETRAINED for config.json key ``name``, saying ``why`` ("which ...") and naming the key to remove."""
    raise fail(f"{label}: config.json sets {name}, {why}; a checkpoint loads nothing beyond its own files",
               *(remedies or (f"Remove {name} from config.json.",)))


def _only_keys(config: Mapping[str, Any], allowed, label: str, where: str, whose: str) -> None:
    """E_PRETRAINED for the first key of ``config`` outside ``allowed``."""
    for key in config:
        if key not in allowed:
            _refuse(label, f"{where}{key}", f"which is not among the keys {whose}")


def keyword_parameters(cls: type) -> set:
    """The names ``cls(...)`` takes by keyword (``**kwargs`` aside)."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {parameter.name for parameter in parameters if parameter.name != "self"
            and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}


# -- transformers: the configuration allowlist and the attention pin ----------------------------------------------
def transformers_config(config: Mapping[str, Any], config_class: type, label: str, where: str = "") -> dict:
    """What transformers gets of ``config``: only keys the route reads, each checked.

    Accepted are the keys ``config_class`` defines itself (:func:`own_keys`), the generic keys of
    :data:`TRANSFORMERS_GENERIC` (attention only as torch's own) and, recursively, nested
    configurations by their own classes (declared sub-configurations, any object naming a
    ``model_type``) and per-layer overrides (``per_layer_config``) by ``config_class``. Metadata
    (:data:`TRANSFORMERS_METADATA`, generation settings, empty :data:`TRANSFORMERS_EMPTY_ONLY`
    keys, null values) is dropped. A timm-backed class (one
    defining ``architecture`` and ``model_args``, as timm_wrapper does) takes the timm route's keys
    under the timm route's checks; an own ``backbone`` must name a bare timm architecture. Anything
    else is E_PRETRAINED naming the key.
    """
    own = own_keys(config_class)
    timm_backed = {"architecture", "model_args"} <= own
    if timm_backed:
        timm_view = {key: config[key] for key in TIMM_KEYS if key in config}
        timm_view.setdefault("architecture", _default_value(config_class, "architecture"))
        timm_view["pretrained_cfg"] = timm_view.get("pretrained_cfg") or {}
        timm_view["model_args"] = timm_view.get("model_args") or {}
        parse_timm_config(timm_view, label, where)
    kept = {}
    for key, value in config.items():
        name = f"{where}{key}"
        sub_class = _nested_config_class(config_class, key, value, label)
        if sub_class is not None:
            kept[key] = transformers_config(value, sub_class, label, f"{name}.")
        elif key == "per_layer_config" and key in own and isinstance(value, Mapping):
            kept[key] = {layer: transformers_config(_mapping(overrides, f"{name}.{layer}", label), config_class, label,
                                                    f"{name}.{layer}.") for layer, overrides in value.items()}
        elif key in ATTENTION_KEYS:
            if value is not None and value not in TORCH_ATTENTION:
                _refuse(label, name, f"which chooses attention {_short(value)} rather than torch's own "
                                     f"({' or '.join(TORCH_ATTENTION)}): other attention can import a package or "
                                     "download and import kernel code",
                        f"Remove {name} from config.json (or set it to \"sdpa\" or \"eager\").")
            kept[key] = value
        elif key in own or key in TRANSFORMERS_GENERIC or (timm_backed and key in TIMM_KEYS):
            if key in TIMM_REFERENCES and key in own and not timm_backed:
                timm_architecture(value, label, name)
            kept[key] = value
        elif not _dropped(key, value):
            _refuse(label, name, f"which {config_class.__name__} does not define and HNDL does not accept (it reads "
                                 "a configuration's own keys and a few generic ones)")
    return kept


def _dropped(key: str, value: Any) -> bool:
    """Whether a key the configuration class does not define is tolerated (and never passed on)."""
    if value is None or key in TRANSFORMERS_METADATA or key in generation_keys():
        return True
    return key in TRANSFORMERS_EMPTY_ONLY and not value


def pinned_attention(config: Mapping[str, Any], model_class: type) -> str:
    """The attention the model runs: the configuration's (eager or sdpa, already checked), else sdpa
    where the model class supports it, else eager. Never transformers' own choice."""
    requested = next((config[key] for key in ATTENTION_KEYS if config.get(key) is not None), None)
    if requested is not None:
        return requested
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


@functools.lru_cache(maxsize=None)
def own_keys(config_class: type) -> frozenset:
    """The keys a transformers configuration class defines itself: its constructor's keyword
    parameters, its default instance's ``to_dict()`` keys and its ``attribute_map`` aliases, less
    those of the generic ``PretrainedConfig`` (HNDL lists the generic keys it accepts)."""
    transformers = require("transformers")
    return frozenset(_class_keys(config_class) - _class_keys(transformers.PretrainedConfig))


@functools.lru_cache(maxsize=None)
def _class_keys(config_class: type) -> frozenset:
    keys = keyword_parameters(config_class) | set(getattr(config_class, "attribute_map", {}) or {})
    return frozenset(keys | set(_default_dict(config_class)))


@functools.lru_cache(maxsize=None)
def _default_dict(config_class: type) -> dict:
    """``config_class().to_dict()``, or {} where a default instance cannot be made."""
    try:
        return config_class().to_dict()
    except Exception:  # a class that needs arguments, or a sub-configuration type transformers lacks
        return {}


def _default_value(config_class: type, key: str) -> Any:
    return _default_dict(config_class).get(key)


@functools.lru_cache(maxsize=1)
def generation_keys() -> frozenset:
    """The generation settings older configurations carry (transformers drops them)."""
    transformers = require("transformers")
    try:
        return frozenset(transformers.GenerationConfig().to_dict())
    except Exception:
        return frozenset()


def _mapping(value: Any, name: str, label: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise fail(f"{label}: config.json field {name} must be an object, not {_short(value)}",
                   f"Correct {name} in config.json.")
    return value


def _nested_config_class(config_class: type, key: str, value: Any, label: str) -> Optional[type]:
    """The configuration class of the object ``value`` under ``key``: the class ``config_class``
    declares for a sub-configuration, else the class of the ``model_type`` it names; None when
    ``value`` is not a nested configuration."""
    if not isinstance(value, Mapping):
        return None
    transformers = require("transformers")
    declared = getattr(config_class, "sub_configs", None) or {}
    if key not in declared and "model_type" not in value:
        return None
    target = declared.get(key)
    if isinstance(target, type) and issubclass(target, transformers.PretrainedConfig):
        return target
    defaults = getattr(config_class, "sub_configs_defaults", None) or {}
    model_type = value.get("model_type") or getattr(defaults.get(key), "model_type", None)
    mapping = transformers.models.auto.configuration_auto.CONFIG_MAPPING
    if not isinstance(model_type, str) or model_type not in mapping:
        raise fail(f"{label}: config.json's {key} names no model_type transformers {transformers.__version__} ships "
                   f"({_short(model_type)})", f"Give {key} a known model_type, or remove {key}.")
    return mapping[model_type]


def _timm_backed(config: Any) -> bool:
    """Whether a transformers configuration wraps a timm model (timm_wrapper and the like)."""
    return isinstance(getattr(config, "architecture", None), str) and hasattr(config, "model_args")


class TimmAdapter(Adapter):
    library = "timm"
    input_kind = "vision"

    def __init__(self, config: Mapping[str, Any], *, output: str, component: str, label: str) -> None:
        self.label = label
        self.output = output
        if component:
            raise fail(f"{label}: component= picks a tower of a multi-modal transformers checkpoint; "
                       "a timm model has none", field="component")
        if output not in ("features", "pooled", "logits"):
            raise fail(f"{label}: a timm model offers output features, pooled or logits, not {output!r}",
                       field="output")
        self.architecture, self.pretrained_cfg, self.model_args = parse_timm_config(config, label)
        self.native_input = timm_native_input(self.architecture, self.pretrained_cfg, self.model_args, label)

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

    def state_key(self) -> Any:
        return (self.source, self.build)

    def load(self, checkpoint: Checkpoint) -> nn.Module:
        """The provider's model with the state dict, verified against sha256= from the bytes it was loaded from."""
        with _isolated_rng():
            model = self.construct()
        _strict_load(model, checkpoint.tensors, repr(self.source.text))
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
