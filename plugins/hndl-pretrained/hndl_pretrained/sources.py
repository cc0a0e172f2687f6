"""Checkpoint sources (§9): what a ``source=`` string names, its revision, its config and its weights.

Four forms are accepted:

``hf://owner/repo[@revision]``
    A Hugging Face Hub repository. During resolution only ``config.json`` is read, through
    ``huggingface_hub`` from its cache (downloaded only when opted in, see below); the commit it
    resolves to is the node's ``revision``. The build reads the safetensors weights of that commit.
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
sweeps do not hash a checkpoint again. That identity cannot prove the bytes unchanged (a file
rewritten in place at the same size with its mtime restored keeps it), so a build never trusts
the cache: it hashes the very bytes it then loads and compares them with the plan's revision.

A path is the host's literal path: no ``~`` expansion happens. Hub owners, repositories and
revisions follow the Hub's own naming rules (no ``..``, no absolute or empty parts), and every
file huggingface_hub returns must lie in a commit snapshot of the cache the pack asked for.

The Hub is read from the local Hugging Face cache only, unless the environment opts in to
downloads with ``HNDL_PRETRAINED_DOWNLOAD=1`` (:func:`downloads_allowed`): an uncached file is
E_PRETRAINED at once, without a network request, whatever ``HF_HUB_OFFLINE`` says.

Weight files are refused by their size, before a byte is hashed or read, when they could not
hold the architecture their configuration describes (:class:`StateSize`: at most twice its
parameter and buffer bytes plus a header allowance) or exceed ``max_state_bytes`` plus format
overhead.

Every failure here is ``E_PRETRAINED`` (weights above ``max_state_bytes``: ``E_RESOURCE``); a
missing optional dependency is E_PRETRAINED too, never an ImportError.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from hndl import HNDLError
from hndl.limits import active_limits

HUB_PREFIX = "hf://"
STATE_DICT_SUFFIXES = (".pth", ".pt")
SAFETENSORS_SUFFIX = ".safetensors"
CONFIG_NAME = "config.json"
#: A config.json larger than this is not a configuration (and is not read).
MAX_CONFIG_BYTES = 16 * 1024 * 1024

#: One part of a Hub repository id (the Hub's rule): alphanumerics, ``-``, ``_`` and ``.``, neither
#: starting nor ending with ``-`` or ``.``; ``--`` and ``..`` are forbidden; ids are at most 96 long.
_REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
_MAX_REPO_ID = 96
#: One component of a branch or tag name (git's check-ref-format, restricted to safe characters).
_REF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")
_MAX_REF = 255
_COMMIT = re.compile(r"[0-9a-f]{40}\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_CHUNK = 1 << 20
#: Bytes a weights file may hold beyond its tensors' own: safetensors caps its JSON header at
#: 100 MB, and a .pth zip archive's records and pickle are far smaller.
FORMAT_OVERHEAD_BYTES = 100_000_000

INSTALL_REMEDY = "Install the pretrained extra: pip install 'hndl[pretrained]'."
#: The environment variable that lets the pack download from the Hub (anything else: cache only).
DOWNLOAD_VARIABLE = "HNDL_PRETRAINED_DOWNLOAD"
_TRUE = ("1", "true", "yes", "on")
CACHE_REMEDY = (f"Download it into the Hugging Face cache first (hf download owner/repo), or set "
                f"{DOWNLOAD_VARIABLE}=1 to let HNDL fetch from the Hub.")


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


def downloads_allowed() -> bool:
    """Whether the environment opted in to Hub downloads (``HNDL_PRETRAINED_DOWNLOAD=1``).

    Off by default, so that resolving configuration never waits on the network: only files
    already in the Hugging Face cache are read.
    """
    return os.environ.get(DOWNLOAD_VARIABLE, "").strip().lower() in _TRUE


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
        if not valid_repo_id(repo):
            raise fail(f"source {shown(source)} does not name a repository as hf://owner/repo[@revision]",
                       "Owner and repository use letters, digits, '-', '_' and '.', do not start or end with "
                       "'-' or '.', contain no '--' or '..', and are at most 96 characters together.",
                       field="source")
        if at and not valid_revision(ref):
            raise fail(f"source {shown(source)} has an empty or malformed revision after '@'",
                       "Give a commit (40 hex digits) or a branch or tag name: parts of letters, digits, '-', "
                       "'_' and '.' separated by '/', none empty, none starting with '.', and no '..'.",
                       field="source")
        _only_for(source, "a .safetensors file", config=config)
        _only_for(source, "a .pth state dict", provider=provider, sha256=sha256)
        return Source(source, "hub", repo=repo, ref=ref or None)
    if "://" in source:
        raise fail(f"source {shown(source)} uses an unknown scheme; only hf:// and local paths are accepted",
                   field="source")
    if "\0" in source or "\0" in config:
        raise fail(f"source {shown(source)} contains a NUL character, which no path can hold", field="source")
    path = Path(source)  # the host's literal path: no ~ expansion
    suffix = path.suffix.lower()
    if suffix in STATE_DICT_SUFFIXES:
        _only_for(source, "a .safetensors file", config=config)
        if not provider:
            raise fail(f"{shown(source)} is a state dict, which describes no architecture: name a registered "
                       "builder with provider=", "Register one with registry.pretrained_provider(name, build).",
                       field="provider")
        if not sha256:
            raise fail(f"a .pth source needs sha256= (the file's SHA-256, 64 hex digits); {shown(source)} has none",
                       f"Compute it with: sha256sum {source}", field="sha256")
        digest = sha256.lower()
        if not _SHA256.match(digest):
            raise fail(f"sha256={shown(sha256)} is not 64 hexadecimal digits", field="sha256")
        return Source(source, "state_dict", path=path, provider=provider, sha256=digest)
    _only_for(source, "a .pth state dict", provider=provider, sha256=sha256)
    if suffix == SAFETENSORS_SUFFIX:
        if not config:
            raise fail(f"a bare .safetensors file carries no configuration: give config= for {shown(source)}",
                       "Pass config=\"/path/to/config.json\", or point source= at the checkpoint directory.",
                       field="config")
        return Source(source, "safetensors", path=path, config=Path(config))
    _only_for(source, "a .safetensors file", config=config)
    return Source(source, "directory", path=path)


def valid_repo_id(repo: str) -> bool:
    """Whether ``repo`` is ``owner/name`` by the Hub's naming rules (so it names no path but its own)."""
    parts = repo.split("/")
    return (len(parts) == 2 and len(repo) <= _MAX_REPO_ID and "--" not in repo and ".." not in repo
            and all(_REPO_PART.match(part) for part in parts))


def valid_revision(ref: str) -> bool:
    """Whether ``ref`` is a commit or a branch/tag name that cannot climb out of the cache's refs/."""
    if _COMMIT.match(ref):
        return True
    parts = ref.split("/")
    return (len(ref) <= _MAX_REF and ".." not in ref and not ref.endswith(".lock")
            and all(_REF_PART.match(part) for part in parts))


def _only_for(source: str, form: str, **given: str) -> None:
    for name, value in given.items():
        if value:
            raise fail(f"{name}= applies only to {form}, not to source {shown(source)}", f"Drop {name}=.", field=name)


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
_SHOWN = 200


def shown(text: Any) -> str:
    """``repr`` of a path or source for a message, cut to a bounded length."""
    text = str(text)
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _why(error: BaseException) -> str:
    if isinstance(error, FileNotFoundError):
        return "it does not exist"
    if isinstance(error, ValueError):  # an embedded NUL, or a path the OS cannot represent
        return "it is not a valid path"
    return getattr(error, "strerror", None) or type(error).__name__


def _stat(path: Path, what: str) -> os.stat_result:
    """``stat`` of a host path; a missing, unreadable or unrepresentable path is E_PRETRAINED."""
    try:
        return path.stat()
    except (OSError, ValueError) as error:
        raise fail(f"cannot read {what} {shown(path)}: {_why(error)}", field="source") from None


def _identity(path: Path, what: str) -> tuple:
    """What the caches key a file by. ctime is in it because no caller can set it back."""
    info = _stat(path, what)
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _chunks(path: Path, what: str) -> Iterator[bytes]:
    """The bytes of the regular file ``path``, opened non-blocking (a FIFO or device never blocks)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as error:
        raise fail(f"cannot read {what} {shown(path)}: {_why(error)}", field="source") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise fail(f"{what} {shown(path)} is not a regular file", field="source")
        while chunk := os.read(fd, _CHUNK):
            yield chunk
    except OSError as error:
        raise fail(f"cannot read {what} {shown(path)}: {_why(error)}", field="source") from None
    finally:
        os.close(fd)


def _read(path: Path, what: str, limit: int) -> tuple[bytes, str]:
    """The bytes of ``path`` and their SHA-256 (hex), hashed while they are read; over ``limit`` is E_PRETRAINED."""
    digest, parts, size = hashlib.sha256(), [], 0
    for chunk in _chunks(path, what):
        size += len(chunk)
        if size > limit:
            raise fail(f"{what} {shown(path)} is larger than {limit} bytes", field="source")
        digest.update(chunk)
        parts.append(chunk)
    return b"".join(parts), digest.hexdigest()


def file_digest(path: Path, what: str = "file") -> str:
    """SHA-256 (hex) of a file's bytes, cached per file identity."""

    def compute() -> str:
        digest = hashlib.sha256()
        for chunk in _chunks(path, what):
            digest.update(chunk)
        return digest.hexdigest()

    return _DIGESTS.get(("sha256", _identity(path, what)), compute)


def _parse_json(data: bytes, path: Path, what: str) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        reason = "too deeply nested" if isinstance(error, RecursionError) else type(error).__name__
        raise fail(f"{what} {shown(path)} is not valid JSON ({reason})", field="source") from None
    if not isinstance(value, dict):
        raise fail(f"{what} {shown(path)} is not a JSON object", field="source")
    return value


def read_json(path: Path, what: str) -> dict:
    """A configuration file as a JSON object, cached per file identity."""

    def compute() -> dict:
        return _parse_json(_read(path, what, MAX_CONFIG_BYTES)[0], path, what)

    return _freeze_json(_CONFIGS.get(("json", _identity(path, what)), compute))


def _freeze_json(value: dict) -> dict:
    """A private deep copy, so a caller editing its configuration never edits the cache."""
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class StateSize:
    """What an architecture registers (parameter and buffer bytes, tensor count), measured on the
    meta device, and so how many bytes its weight files may hold (:meth:`allowed_bytes`)."""

    state_bytes: int
    tensors: int

    #: A checkpoint may store up to twice the bytes the architecture registers in float32: float64
    #: copies, or a head or tower the node does not build.
    SLACK = 2
    #: Header allowance per tensor (a safetensors JSON entry, a .pth pickle record) and per file.
    HEADER_BYTES_PER_TENSOR = 1024
    HEADER_BYTES_PER_FILE = 1 << 20

    def allowed_bytes(self, files: int) -> int:
        """The most bytes ``files`` weight files of this architecture may hold together."""
        return (self.SLACK * (self.state_bytes + self.HEADER_BYTES_PER_TENSOR * self.tensors)
                + self.HEADER_BYTES_PER_FILE * files)


def check_weight_sizes(files: list[Path], label: str, architecture: Optional[StateSize] = None) -> int:
    """The most bytes ``files`` may be read to, after refusing them by their sizes alone.

    This runs before any weights file is hashed or read, so a huge (or sparse) file costs a
    ``stat``, not a pass over its bytes. Weights above ``max_state_bytes`` of the limits in force
    plus :data:`FORMAT_OVERHEAD_BYTES` per file are E_RESOURCE; weights larger than the
    ``architecture`` they belong to allows (:meth:`StateSize.allowed_bytes`) are E_PRETRAINED.
    """
    budget = active_limits()["max_state_bytes"]
    total = sum(_stat(path, "weights file").st_size for path in files)
    allowed = budget + FORMAT_OVERHEAD_BYTES * len(files)
    if total > allowed:
        raise HNDLError(
            "E_RESOURCE",
            f"the weights of {label} are {total} bytes on disk, above max_state_bytes={budget} plus "
            f"{FORMAT_OVERHEAD_BYTES} bytes of format overhead per file ({len(files)} file(s)); nothing was hashed",
            field="source",
            remedies=("Use a smaller checkpoint, or raise limits['max_state_bytes'] explicitly.",),
        )
    if architecture is None:
        return allowed
    fitting = architecture.allowed_bytes(len(files))
    if total > fitting:
        raise fail(
            f"the weights of {label} are {total} bytes on disk, more than the architecture they belong to can "
            f"hold: it registers {architecture.state_bytes} bytes in {architecture.tensors} parameters and "
            f"buffers, so its {len(files)} weights file(s) may hold at most {fitting} bytes; nothing was hashed",
            "Check that the weights belong to this configuration (or provider): a checkpoint's weights hold its "
            "own architecture's tensors.",
            field="source",
        )
    return min(allowed, fitting)


# -- resolution: the revision and the configuration -----------------------------------------------------
def current_revision(source: Source, architecture: Optional[StateSize] = None) -> str:
    """What ``source`` points at now: a commit for the Hub, ``sha256:<hex>`` for local files.

    This is what the relation records as ``revision`` and what restoring a plan compares with.
    Local weights are first checked by size (:func:`check_weight_sizes`) against ``architecture``,
    the state of the model they belong to.
    """
    revision = present_revision(source, architecture)
    if source.kind == "state_dict" and revision != "sha256:" + source.sha256:
        raise _sha_mismatch(source, revision.removeprefix("sha256:"))
    return revision


def present_revision(source: Source, architecture: Optional[StateSize] = None) -> str:
    """Like :func:`current_revision`, without holding a .pth file to its ``sha256=`` pin."""
    if source.kind == "hub":
        return _hub_config_path(source.repo, source.ref or None)[1]
    if source.kind == "state_dict":
        path = _existing_file(source.path, "state dict")
        check_weight_sizes([path], shown(source.text), architecture)
        return "sha256:" + file_digest(path, "state dict")
    config, weights = _local_files(source)
    check_weight_sizes(weights, shown(source.text), architecture)
    return "sha256:" + _combined_digest([(config, file_digest(config, "configuration file"))]
                                        + [(path, file_digest(path, "weights file")) for path in weights])


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
    path = _config_path(source)
    return read_json(path, path.name if source.kind == "directory" else "configuration file")


def config_version(source: Source, revision: Optional[str]) -> Any:
    """What a configuration read for ``source`` depends on: the commit for the Hub, the
    configuration file's identity for a local checkpoint (None for a provider's state dict)."""
    if source.kind == "hub":
        return revision
    if source.kind == "state_dict":
        return None
    return _identity(_config_path(source), "configuration file")


def _config_path(source: Source) -> Path:
    """The configuration file of a local checkpoint (a directory's config.json, or config=)."""
    if source.kind == "directory":
        return _existing_file(_existing_directory(source.path) / CONFIG_NAME, "config.json")
    _existing_file(source.path, "weights file")
    return _existing_file(source.config, "configuration file")


def _hub():
    """huggingface_hub and the cache directory every download of this pack names explicitly."""
    hub = require("huggingface_hub")
    constants = require("huggingface_hub.constants")
    return hub, Path(constants.HF_HUB_CACHE)


def _hub_download(repo: str, filename: str, revision: Optional[str]) -> Path:
    """One file of ``repo`` at ``revision`` from the Hub cache, checked to be a file of one of its snapshots.

    Only the cache is read (``local_files_only``) unless :func:`downloads_allowed`. The path
    huggingface_hub returns must be ``<cache>/models--owner--name/snapshots/<commit>/<filename>``
    and, with every link resolved, still lie inside the cache directory.
    """
    hub, cache = _hub()
    path = Path(hub.hf_hub_download(repo, filename, revision=revision, cache_dir=str(cache),
                                    local_files_only=not downloads_allowed()))
    snapshots = cache / ("models--" + repo.replace("/", "--")) / "snapshots"
    root = os.path.realpath(cache)
    if (path.parent.parent != snapshots or path.name != filename or not _COMMIT.match(path.parent.name)
            or os.path.commonpath([root, os.path.realpath(path)]) != root):
        raise fail(f"huggingface_hub returned a file for hf://{repo} that is not inside a commit snapshot of "
                   "its cache", "Repair or clear the Hugging Face cache.", field="source")
    return path


def _hub_config_path(repo: str, revision: Optional[str]) -> tuple[Path, str]:
    try:
        path = _hub_download(repo, CONFIG_NAME, revision)
    except HNDLError:
        raise
    except Exception as error:  # offline and not cached, unknown repository or revision, network
        where = f"{repo}@{revision}" if revision else repo
        raise fail(
            f"cannot fetch config.json of hf://{where}{_offline_note()}: {type(error).__name__}",
            "Check the repository and revision.", CACHE_REMEDY,
            field="source",
        ) from None
    return path, path.parent.name


def _hub_weights(repo: str, commit: str) -> tuple[Path, list[Path]]:
    """The configuration and safetensors weight files of ``commit``, from its snapshot.

    Files are fetched one by one with ``hf_hub_download`` (which serves them from the cache,
    offline too): ``model.safetensors``, or else the shards a ``model.safetensors.index.json``
    names. Pickled weights are never fetched.
    """
    problems = []
    for name in ("model.safetensors", "model.safetensors.index.json"):
        try:
            path = _hub_download(repo, name, commit)
        except HNDLError:
            raise
        except Exception as error:  # absent from the repository, or offline and not cached
            problems.append(f"{name}: {type(error).__name__}")
            continue
        try:
            files = [path]
            if name.endswith(".index.json"):
                shards = read_json(path, "weights index").get("weight_map", {})
                names = sorted(set(shards.values()) if isinstance(shards, dict) else ())
                if not all(isinstance(shard, str) and _REPO_PART.match(shard) for shard in names):
                    raise fail(f"the weights index of hf://{repo}@{commit} names a shard that is not a plain "
                               "file name", field="source")
                files = [_hub_download(repo, shard, commit) for shard in names]
            return _hub_download(repo, CONFIG_NAME, commit), files
        except HNDLError:
            raise
        except Exception as error:
            raise fail(f"cannot fetch the weights of hf://{repo}@{commit}{_offline_note()}: {type(error).__name__}",
                       CACHE_REMEDY, field="source") from None
    raise fail(f"cannot fetch safetensors weights of hf://{repo}@{commit}{_offline_note()} ({'; '.join(problems)})",
               CACHE_REMEDY, field="source")


def _offline_note() -> str:
    """Why a Hub file was not fetched, when downloads are off (the default)."""
    if downloads_allowed():
        return ""
    return f" (not in the Hugging Face cache, and downloads are off: {DOWNLOAD_VARIABLE} is not 1)"


def _local_files(source: Source) -> tuple[Path, list[Path]]:
    """The configuration file and the weight files a local source's revision covers."""
    if source.kind == "directory":
        directory = _existing_directory(source.path)
        return _existing_file(directory / CONFIG_NAME, "config.json"), weight_files(directory)
    return _existing_file(source.config, "configuration file"), [_existing_file(source.path, "weights file")]


def _combined_digest(files: list[tuple[Path, str]]) -> str:
    """One digest over (role, name, SHA-256) of the configuration file and then each weights file."""
    digest = hashlib.sha256()
    for index, (path, file_hash) in enumerate(files):
        digest.update(f"{'config' if index == 0 else 'weights'}:{path.name}:{file_hash}\n".encode())
    return digest.hexdigest()


def weight_files(directory: Path) -> list[Path]:
    """The safetensors weight files of a checkpoint directory, by name."""
    try:
        files = sorted(path for path in directory.iterdir()
                       if path.name.endswith(SAFETENSORS_SUFFIX) and path.is_file())
    except OSError as error:
        raise fail(f"cannot list checkpoint directory {shown(directory)}: {_why(error)}", field="source") from None
    if not files:
        raise fail(f"checkpoint directory {shown(directory)} holds no *.safetensors weights",
                   "Save the checkpoint with safetensors (save_pretrained(..., safe_serialization=True)); "
                   "pickled .bin weights are never loaded.", field="source")
    return files


def _kind(path: Path) -> Optional[int]:
    """The ``st_mode`` of ``path``, or None where it cannot be stat'ed (absent, too long, NUL, ...)."""
    try:
        return path.stat().st_mode
    except (OSError, ValueError):
        return None


def _existing_directory(path: Path) -> Path:
    mode = _kind(path)
    if mode is None or not stat.S_ISDIR(mode):
        what = "does not exist" if mode is None else "is not a directory"
        raise fail(f"checkpoint source {shown(path)} {what}", field="source")
    return path


def _existing_file(path: Path, what: str) -> Path:
    mode = _kind(path)
    if mode is None or not stat.S_ISREG(mode):
        raise fail(f"{what} {shown(path)} does not exist or is not a file", field="source")
    return path


def _sha_mismatch(source: Source, actual: str) -> HNDLError:
    return fail(
        f"{shown(source.text)} has SHA-256 {actual}, but sha256= pins {source.sha256}",
        "Check that the file is the intended checkpoint, then update sha256= deliberately.",
        field="sha256",
    )


# -- build: the weights ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    """What a build loads: the configuration and every weight tensor, parsed from bytes that were
    hashed as they were read (and, for a local source, matched with the plan's revision). A provider's
    state dict has no configuration."""

    config: Optional[dict]
    tensors: dict


def verified_checkpoint(source: Source, revision: str, architecture: StateSize) -> Checkpoint:
    """The configuration and weights of exactly ``revision``, for a build.

    The weight files are first refused by size if ``architecture`` could not fill them, and are
    never read past that bound. Each file is read once; its SHA-256 is computed from the bytes
    read, and the tensors are parsed from those same bytes, so a file swapped in place (even one
    whose size and mtime were restored) fails here instead of loading other weights. Hub files
    come from the snapshot of the recorded commit.
    """
    if source.kind == "hub":
        config_path, weights = _hub_weights(source.repo, revision)
    else:
        config_path, weights = _local_files(source)
    budget = check_weight_sizes(weights, shown(source.text), architecture)
    config_bytes, config_hash = _read(config_path, "configuration file", MAX_CONFIG_BYTES)
    contents = [(path, *_read(path, "weights file", budget)) for path in weights]
    if source.kind != "hub":
        actual = "sha256:" + _combined_digest([(config_path, config_hash)]
                                              + [(path, file_hash) for path, _, file_hash in contents])
        if actual != revision:
            raise fail(
                f"checkpoint {shown(source.text)} changed after resolution: the plan recorded revision "
                f"{revision}, the files now hash to {actual}",
                "Re-resolve the specification to adopt the new checkpoint deliberately.",
                field="revision",
            )
    config = _parse_json(config_bytes, config_path, "configuration file")
    return Checkpoint(config=config, tensors=_safetensors_state([(path, data) for path, data, _ in contents]))


def _safetensors_state(contents: list[tuple[Path, bytes]]) -> dict:
    """Every tensor of the given safetensors file contents (names must not repeat across files)."""
    safetensors_torch = require("safetensors.torch")
    state: dict = {}
    for path, data in contents:
        try:
            part = safetensors_torch.load(data)
        except Exception as error:
            raise fail(f"cannot read safetensors weights {shown(path)}: {type(error).__name__}: {error}") from None
        repeated = set(part) & set(state)
        if repeated:
            raise fail(f"tensor {sorted(repeated)[0]!r} appears in more than one weights file")
        state.update(part)
    return state


def verified_state_dict_bytes(source: Source, architecture: StateSize) -> bytes:
    """The .pth file's bytes, verified against sha256= immediately before they are deserialized
    (and refused by size first if the provider's ``architecture`` could not fill them)."""
    path = _existing_file(source.path, "state dict")
    budget = check_weight_sizes([path], shown(source.text), architecture)
    data, actual = _read(path, "state dict", budget)
    if actual != source.sha256:
        raise _sha_mismatch(source, actual)
    return data


def load_state_dict_file(source: Source, architecture: StateSize) -> dict:
    """``torch.load(map_location="cpu", weights_only=True)`` of the verified bytes: no object is unpickled."""
    import torch

    data = verified_state_dict_bytes(source, architecture)
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:
        raise fail(f"{shown(source.text)} is not a loadable weights-only state dict: {type(error).__name__}: {error}",
                   "Save it with torch.save(model.state_dict(), path).") from None
    if not isinstance(state, Mapping) or not all(
            isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in state.items()):
        raise fail(f"{shown(source.text)} does not hold a flat state dict of named tensors",
                   "Save it with torch.save(model.state_dict(), path).")
    return dict(state)
