"""Checkpoint sources (§9): what a ``source=`` string names, its revision, its config and its weights.

Four forms are accepted:

``hf://owner/repo[@revision]``
    A Hugging Face Hub repository. During resolution only ``config.json`` is fetched, through
    ``huggingface_hub`` (so its cache and ``HF_HUB_OFFLINE`` apply); the commit it resolves to
    is the node's ``revision``. The build downloads the safetensors weights of that commit.
``/path/to/checkpoint``
    A directory holding ``config.json`` and ``*.safetensors`` weights.
``/path/to/model.safetensors`` with ``config=``
    A bare weights file plus its configuration file.
``/path/to/weights.pth`` with ``provider=`` and ``sha256=``
    A state dict for a host-registered architecture. The file is hashed at resolution and
    again, from the very bytes that are then deserialized, just before loading.

A local source's ``revision`` is ``sha256:`` plus a digest of its configuration and weight
files (names and bytes); the bytes are hashed, never deserialized, during resolution. Digests
are cached per file identity (device, inode, size, modification time), so repeated relation
sweeps do not hash a checkpoint again.

Every failure here is ``E_PRETRAINED``; a missing optional dependency is too, never an
ImportError.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from hndl import HNDLError

HUB_PREFIX = "hf://"
STATE_DICT_SUFFIXES = (".pth", ".pt")
SAFETENSORS_SUFFIX = ".safetensors"
CONFIG_NAME = "config.json"
#: A config.json larger than this is not a configuration (and is not read).
MAX_CONFIG_BYTES = 16 * 1024 * 1024

_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*\Z")
_COMMIT = re.compile(r"[0-9a-f]{40}\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_CHUNK = 1 << 20

INSTALL_REMEDY = "Install the pretrained extra: pip install 'hndl[pretrained]'."


def fail(message: str, *remedies: str, field: Optional[str] = None) -> HNDLError:
    """The E_PRETRAINED error every source problem raises."""
    return HNDLError("E_PRETRAINED", message, field=field, remedies=remedies)


def require(name: str):
    """Import an optional dependency of this pack; E_PRETRAINED (never ImportError) if unusable."""
    try:
        return importlib.import_module(name)
    except Exception as error:  # ImportError, or a broken installation failing at import time
        raise fail(
            f"the pretrained operator needs {name}, which cannot be imported ({type(error).__name__}: {error})",
            INSTALL_REMEDY,
        ) from None


# -- parsing -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """A parsed ``source=`` argument. ``kind`` is hub, directory, safetensors or state_dict."""

    text: str
    kind: str
    repo: Optional[str] = None
    ref: Optional[str] = None
    path: Optional[Path] = None
    config: Optional[Path] = None
    provider: str = ""
    sha256: str = ""

    @property
    def is_provider(self) -> bool:
        return self.kind == "state_dict"


def parse_source(source: str, *, config: str = "", provider: str = "", sha256: str = "") -> Source:
    """Check the source string and the arguments that only some source forms take. Reads nothing."""
    if not source:
        raise fail("source is empty", "Name an hf://owner/repo, a checkpoint directory, a .safetensors "
                   "file with config=, or a .pth file with provider= and sha256=.", field="source")
    if source.startswith(HUB_PREFIX):
        spec = source[len(HUB_PREFIX):]
        repo, at, ref = spec.partition("@")
        if not _REPO.match(repo):
            raise fail(f"source {source!r} does not name a repository as hf://owner/repo[@revision]", field="source")
        if at and not _REF.match(ref):
            raise fail(f"source {source!r} has an empty or malformed revision after '@'", field="source")
        _only_for(source, "a .safetensors file", config=config)
        _only_for(source, "a .pth state dict", provider=provider, sha256=sha256)
        return Source(source, "hub", repo=repo, ref=ref or None)
    if "://" in source:
        raise fail(f"source {source!r} uses an unknown scheme; only hf:// and local paths are accepted",
                   field="source")
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if suffix in STATE_DICT_SUFFIXES:
        _only_for(source, "a .safetensors file", config=config)
        if not provider:
            raise fail(f"{source!r} is a state dict, which describes no architecture: name a registered "
                       "builder with provider=", "Register one with registry.pretrained_provider(name, build).",
                       field="provider")
        if not sha256:
            raise fail(f"a .pth source needs sha256= (the file's SHA-256, 64 hex digits); {source!r} has none",
                       f"Compute it with: sha256sum {source}", field="sha256")
        digest = sha256.lower()
        if not _SHA256.match(digest):
            raise fail(f"sha256={sha256!r} is not 64 hexadecimal digits", field="sha256")
        return Source(source, "state_dict", path=path, provider=provider, sha256=digest)
    _only_for(source, "a .pth state dict", provider=provider, sha256=sha256)
    if suffix == SAFETENSORS_SUFFIX:
        if not config:
            raise fail(f"a bare .safetensors file carries no configuration: give config= for {source!r}",
                       "Pass config=\"/path/to/config.json\", or point source= at the checkpoint directory.",
                       field="config")
        return Source(source, "safetensors", path=path, config=Path(config).expanduser())
    _only_for(source, "a .safetensors file", config=config)
    return Source(source, "directory", path=path)


def _only_for(source: str, form: str, **given: str) -> None:
    for name, value in given.items():
        if value:
            raise fail(f"{name}= applies only to {form}, not to source {source!r}", f"Drop {name}=.", field=name)


# -- small caches ----------------------------------------------------------------------------------------
class BoundedCache:
    """A thread-safe LRU mapping of a fixed size (relations run on every sweep; files rarely change)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_DIGESTS = BoundedCache(256)
_CONFIGS = BoundedCache(256)


def _identity(path: Path) -> tuple:
    try:
        info = path.stat()
    except OSError as error:
        raise fail(f"cannot read {str(path)!r}: {error.strerror or error}") from None
    return (str(path.resolve()), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes, cached per file identity."""

    def compute() -> str:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        except OSError as error:
            raise fail(f"cannot read {str(path)!r}: {error.strerror or error}") from None
        return digest.hexdigest()

    return _DIGESTS.get(("sha256", _identity(path)), compute)


def read_json(path: Path, what: str) -> dict:
    """A configuration file as a JSON object, cached per file identity."""

    def compute() -> dict:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_CONFIG_BYTES + 1)
        except OSError as error:
            raise fail(f"cannot read {what} {str(path)!r}: {error.strerror or error}") from None
        if len(data) > MAX_CONFIG_BYTES:
            raise fail(f"{what} {str(path)!r} is larger than {MAX_CONFIG_BYTES} bytes")
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise fail(f"{what} {str(path)!r} is not valid JSON: {error}") from None
        if not isinstance(value, dict):
            raise fail(f"{what} {str(path)!r} is not a JSON object")
        return value

    return _freeze_json(_CONFIGS.get(("json", _identity(path)), compute))


def _freeze_json(value: dict) -> dict:
    """A private deep copy, so a caller editing its configuration never edits the cache."""
    return json.loads(json.dumps(value))


# -- resolution: the revision and the configuration -----------------------------------------------------
def current_revision(source: Source) -> str:
    """What ``source`` points at now: a commit for the Hub, ``sha256:<hex>`` for local files.

    This is what the relation records as ``revision`` and what restoring a plan compares with.
    """
    revision = present_revision(source)
    if source.kind == "state_dict" and revision != "sha256:" + source.sha256:
        raise _sha_mismatch(source, revision.removeprefix("sha256:"))
    return revision


def present_revision(source: Source) -> str:
    """Like :func:`current_revision`, without holding a .pth file to its ``sha256=`` pin."""
    if source.kind == "hub":
        return _hub_config_path(source.repo, source.ref or None)[1]
    if source.kind == "state_dict":
        return "sha256:" + file_digest(_existing_file(source.path, "state dict"))
    return "sha256:" + _local_digest(source)


def read_config(source: Source, revision: str) -> Optional[dict]:
    """The checkpoint's configuration at ``revision`` (None for a provider's state dict).

    Only the configuration file is read: for the Hub only ``config.json`` of that commit is
    fetched, and local weights are not opened.
    """
    if source.kind == "state_dict":
        return None
    if source.kind == "hub":
        path = _hub_config_path(source.repo, revision)[0]
        return read_json(path, "config.json")
    if source.kind == "directory":
        directory = _existing_directory(source.path)
        return read_json(_existing_file(directory / CONFIG_NAME, "config.json"), "config.json")
    _existing_file(source.path, "weights file")
    return read_json(_existing_file(source.config, "configuration file"), "configuration file")


def _hub_config_path(repo: str, revision: Optional[str]) -> tuple[Path, str]:
    hub = require("huggingface_hub")
    try:
        path = Path(hub.hf_hub_download(repo, CONFIG_NAME, revision=revision))
    except Exception as error:  # offline and not cached, unknown repository or revision, network
        where = f"{repo}@{revision}" if revision else repo
        raise fail(
            f"cannot fetch config.json of hf://{where}: {type(error).__name__}: {error}",
            "Check the repository and revision; offline (HF_HUB_OFFLINE=1), download it into the "
            "Hugging Face cache first.",
            field="source",
        ) from None
    commit = path.parent.name
    if not _COMMIT.match(commit):
        raise fail(f"huggingface_hub returned {str(path)!r}, which is not inside a commit snapshot", field="source")
    return path, commit


def _hub_weights(repo: str, commit: str) -> Path:
    """The snapshot directory of ``commit`` holding its config and safetensors weights.

    Files are fetched one by one with ``hf_hub_download`` (which serves them from the cache,
    offline too): ``model.safetensors``, or else the shards a ``model.safetensors.index.json``
    names. Pickled weights are never fetched.
    """
    hub = require("huggingface_hub")

    def fetch(filename: str) -> Path:
        return Path(hub.hf_hub_download(repo, filename, revision=commit))

    problems = []
    for name in ("model.safetensors", "model.safetensors.index.json"):
        try:
            path = fetch(name)
        except Exception as error:  # absent from the repository, or offline and not cached
            problems.append(f"{name}: {type(error).__name__}: {error}")
            continue
        try:
            if name.endswith(".index.json"):
                shards = read_json(path, "weights index").get("weight_map", {})
                for shard in sorted(set(shards.values()) if isinstance(shards, dict) else ()):
                    fetch(shard)
            fetch(CONFIG_NAME)
        except HNDLError:
            raise
        except Exception as error:
            raise fail(f"cannot fetch the weights of hf://{repo}@{commit}: {type(error).__name__}: {error}",
                       "Download the checkpoint into the Hugging Face cache, or build where the Hub is reachable.",
                       field="source") from None
        return path.parent
    raise fail(f"cannot fetch safetensors weights of hf://{repo}@{commit} ({'; '.join(problems)})",
               "Download the checkpoint into the Hugging Face cache, or build where the Hub is reachable.",
               field="source")


def _local_digest(source: Source) -> str:
    if source.kind == "directory":
        directory = _existing_directory(source.path)
        files = [_existing_file(directory / CONFIG_NAME, "config.json")] + weight_files(directory)
    else:
        files = [_existing_file(source.config, "configuration file"), _existing_file(source.path, "weights file")]
    digest = hashlib.sha256()
    for role, path in zip(("config", *["weights"] * (len(files) - 1)), files):
        digest.update(f"{role}:{path.name}:{file_digest(path)}\n".encode())
    return digest.hexdigest()


def weight_files(directory: Path) -> list[Path]:
    """The safetensors weight files of a checkpoint directory, by name."""
    files = sorted(path for path in directory.iterdir() if path.name.endswith(SAFETENSORS_SUFFIX) and path.is_file())
    if not files:
        raise fail(f"checkpoint directory {str(directory)!r} holds no *.safetensors weights",
                   "Save the checkpoint with safetensors (save_pretrained(..., safe_serialization=True)); "
                   "pickled .bin weights are never loaded.", field="source")
    return files


def _existing_directory(path: Path) -> Path:
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise fail(f"checkpoint source {str(path)!r} {what}", field="source")
    return path


def _existing_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise fail(f"{what} {str(path)!r} does not exist or is not a file", field="source")
    return path


def _sha_mismatch(source: Source, actual: str) -> HNDLError:
    return fail(
        f"{source.text!r} has SHA-256 {actual}, but sha256= pins {source.sha256}",
        "Check that the file is the intended checkpoint, then update sha256= deliberately.",
        field="sha256",
    )


# -- build: the weights ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Weights:
    """Where a build reads weights: a checkpoint directory, or one safetensors file."""

    directory: Optional[Path] = None
    file: Optional[Path] = None


def checkpoint_files(source: Source, revision: str) -> Weights:
    """Fetch (Hub) or check (local) the weights of exactly ``revision`` for a build."""
    if source.kind == "hub":
        return Weights(directory=_hub_weights(source.repo, revision))
    actual = current_revision(source)
    if actual != revision:
        raise fail(
            f"checkpoint {source.text!r} changed after resolution: the plan recorded revision {revision}, "
            f"the files now hash to {actual}",
            "Re-resolve the specification to adopt the new checkpoint deliberately.",
            field="revision",
        )
    if source.kind == "directory":
        return Weights(directory=source.path)
    return Weights(file=source.path)


def verified_state_dict_bytes(source: Source) -> bytes:
    """The .pth file's bytes, verified against sha256= immediately before they are deserialized."""
    path = _existing_file(source.path, "state dict")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise fail(f"cannot read {source.text!r}: {error.strerror or error}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != source.sha256:
        raise _sha_mismatch(source, actual)
    return data


def load_state_dict_file(source: Source) -> dict:
    """``torch.load(map_location="cpu", weights_only=True)`` of the verified bytes: no object is unpickled."""
    import torch

    data = verified_state_dict_bytes(source)
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:
        raise fail(f"{source.text!r} is not a loadable weights-only state dict: {type(error).__name__}: {error}",
                   "Save it with torch.save(model.state_dict(), path).") from None
    if not isinstance(state, Mapping) or not all(
            isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()):
        raise fail(f"{source.text!r} does not hold a flat state dict of named tensors",
                   "Save it with torch.save(model.state_dict(), path).")
    return dict(state)


def load_safetensors(files: list[Path]) -> dict:
    """Every tensor of the given safetensors files (names must not repeat across files)."""
    safetensors_torch = require("safetensors.torch")
    state: dict = {}
    for path in files:
        try:
            part = safetensors_torch.load_file(str(path), device="cpu")
        except Exception as error:
            raise fail(f"cannot read safetensors weights {str(path)!r}: {type(error).__name__}: {error}") from None
        repeated = set(part) & set(state)
        if repeated:
            raise fail(f"tensor {sorted(repeated)[0]!r} appears in more than one weights file")
        state.update(part)
    return state


