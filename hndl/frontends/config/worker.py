"""Parse configuration in an isolated worker process with memory and CPU-time limits (§7).

Python's own parser can exhaust memory or time before any allowlist sees the tree, so every
configuration source is parsed and validated in a separate, persistent worker process: its
address space and CPU time are capped with ``resource.setrlimit``, each request has a
wall-clock deadline, replies are size-bounded JSON decoded strictly by ``wire``, and an audit
hook inside the worker refuses every audited effect (exec, imports, file opening, processes,
sockets, any compilation) other than the parser's own AST-only compile. Any failure kills
the worker; the next request starts a fresh one.

Isolation is configured with :func:`configure` or the ``HNDL_CONFIG_ISOLATION`` environment
variable: ``process`` (the default, a worker with rlimits), ``process-unlimited`` (a worker
with only the wall-clock deadline, for platforms without ``resource`` limits), or
``in-process`` (an explicit opt-out: the same parser and budgets in the host process, with no
memory or CPU isolation). HNDL never falls back from one mode to another on its own.
"""

from __future__ import annotations

import atexit
import gc
import json
import math
import os
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Collection, Optional, Sequence

from ...collector import collector_paused
from ...errors import HNDLError
from .grammar import parse_config, validate_config
from .ir import Program
from .source import Source, load_text
from .syntax import PARSE_FILENAME, reject_formatted_strings
from .wire import Wire, decode_error, decode_program, encode_error, malformed

MODES = ("process", "process-unlimited", "in-process")
_HEADER = struct.Struct(">I")
#: Starting the worker (importing HNDL) gets at least this long, whatever the per-request deadline.
_STARTUP_SECONDS = 30.0
#: Address space the worker must have left above what it already maps once it is started.
_MEMORY_HEADROOM = 32 << 20


@dataclass(frozen=True)
class Isolation:
    """How configuration parsing is isolated, and its budgets."""

    mode: str = "process"
    memory_bytes: int = 1 << 30
    cpu_seconds: int = 10
    timeout_seconds: float = 30.0
    max_reply_bytes: int = 16 << 20


_BUDGETS = frozenset({"memory_bytes", "cpu_seconds", "timeout_seconds", "max_reply_bytes"})
_settings: Optional[Isolation] = None
_lock = threading.Lock()
_worker: Optional["_Worker"] = None


def configure(mode: Optional[str] = None, **budgets: Any) -> Isolation:
    """Set the isolation mode and budgets for this process; returns the settings in force.

    ``budgets`` may set ``memory_bytes``, ``cpu_seconds``, ``timeout_seconds`` and
    ``max_reply_bytes``. Changing anything restarts the worker on the next request.
    """
    global _settings, _worker
    unknown = sorted(set(budgets) - _BUDGETS)
    if unknown:
        raise HNDLError(
            "E_SCHEMA",
            f"unknown isolation budget(s) {', '.join(unknown)}; expected {', '.join(sorted(_BUDGETS))}",
            field="isolation",
        )
    # Start from the configured settings, else the environment's, unchecked: an explicit mode
    # here must be able to replace a bad HNDL_CONFIG_ISOLATION value.
    settings = _settings if _settings is not None else _from_environment()
    settings = replace(settings, **budgets) if budgets else settings
    if mode is not None:
        settings = replace(settings, mode=mode)
    _check(settings)
    with _lock:
        _settings = settings
        if _worker is not None:
            _worker.close()
            _worker = None
    return settings


def current() -> Isolation:
    """The settings in force: configured, else from HNDL_CONFIG_ISOLATION, else ``process``."""
    if _settings is not None:
        return _settings
    settings = _from_environment()
    _check(settings)
    return settings


def _from_environment() -> Isolation:
    return Isolation(mode=os.environ.get("HNDL_CONFIG_ISOLATION", "process"))


def _check(settings: Isolation) -> None:
    if settings.mode not in MODES:
        raise HNDLError(
            "E_SCHEMA",
            f"configuration isolation mode {settings.mode!r} is not one of {', '.join(MODES)}",
            field="isolation",
        )
    for name in ("memory_bytes", "cpu_seconds", "max_reply_bytes"):
        value = getattr(settings, name)
        if type(value) is not int or value <= 0:
            raise HNDLError("E_SCHEMA", f"isolation {name} must be a positive int, got {value!r}", field="isolation")
    timeout = settings.timeout_seconds
    if type(timeout) not in (int, float) or not math.isfinite(timeout) or timeout <= 0:
        raise HNDLError(
            "E_SCHEMA", f"isolation timeout_seconds must be a positive finite number, got {timeout!r}", field="isolation"
        )


def parse_isolated(
    source: Source, *, aliases: Collection[str], inputs: Sequence[str], max_nodes: Optional[int] = None
) -> Program:
    """Parse and validate ``source`` under the configured isolation; the host keeps ``source``.

    ``max_nodes`` (the resolution's limit, None for no bound) caps the operator calls: the
    parser refuses the first call past it, in the worker, so the host never decodes a reply
    larger than the graph it may build; the decoder checks the same bound again.
    """
    settings = current()
    if settings.mode == "in-process":
        return parse_config(source, aliases=aliases, inputs=inputs, max_nodes=max_nodes)
    # An f-string costs CPython's parser quadratic time; refusing it here costs the worker nothing.
    reject_formatted_strings(source)
    request = {"text": source.original, "aliases": sorted(aliases), "inputs": list(inputs), "max_nodes": max_nodes}
    global _worker
    with _lock:
        if _worker is not None and not (_worker.usable() and _worker.settings == settings):
            # Dead, inherited across fork(), or started under other settings (for example a
            # changed HNDL_CONFIG_ISOLATION): never reuse it, so a mode is never downgraded.
            _worker.close()
            _worker = None
        if _worker is None:
            _worker = _Worker(settings)
            _shutdown_at_exit()
        try:
            with collector_paused():  # decoding builds many small records and no cycles
                outcome = _outcome(_worker.ask(request), source, max_nodes)
        except BaseException:
            # No reply, a late one, a malformed one, or an interrupted exchange (whose reply
            # would otherwise answer the next request): this worker is not trusted again.
            _worker.close()
            _worker = None
            raise
    if isinstance(outcome, HNDLError):
        raise outcome
    return outcome


def _outcome(reply: Any, source: Source, max_nodes: Optional[int]) -> Any:
    """The decoded Program, or the worker's diagnostic as an (unraised) HNDLError."""
    if type(reply) is dict and set(reply) == {"ok", "program"} and reply["ok"] is True:
        return decode_program(reply["program"], source, max_nodes=max_nodes)
    if type(reply) is dict and set(reply) == {"ok", "error"} and reply["ok"] is False:
        return decode_error(reply["error"], file=source.file)
    raise malformed("unexpected reply shape")


_exit_hook_installed = False


def _shutdown_at_exit() -> None:
    """Stop the worker when the interpreter exits (once per process; a fork's child registers its own).

    Without it the worker outlives ``sys.exit`` until the OS reaps it, and ``python -X dev``
    reports the still-running subprocess as a ResourceWarning.
    """
    global _exit_hook_installed
    if not _exit_hook_installed:
        atexit.register(shutdown)
        os.register_at_fork(after_in_child=_forget_exit_hook)
        _exit_hook_installed = True


def _forget_exit_hook() -> None:
    global _exit_hook_installed
    _exit_hook_installed = False


def shutdown() -> None:
    """Stop the persistent worker, if one runs: EOF first (it exits on its own), then kill."""
    global _worker
    with _lock:
        worker, _worker = _worker, None
    if worker is not None:
        worker.close(graceful=True)


class _Worker:
    """One persistent worker process and its pipes."""

    def __init__(self, settings: Isolation) -> None:
        self.settings = settings
        self.owner = os.getpid()
        boot = (
            "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
            "from hndl.frontends.config.worker import serve; serve(json.loads(sys.argv[2]))"
        )
        limits = {
            "memory_bytes": settings.memory_bytes if settings.mode == "process" else None,
            "cpu_seconds": settings.cpu_seconds if settings.mode == "process" else None,
        }
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", boot, json.dumps(sys.path), json.dumps(limits)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as error:
            raise self._unstartable(f"{type(error).__name__}: {error}") from None
        try:
            os.set_blocking(self.process.stdin.fileno(), False)
            # Importing HNDL is not part of any request: starting gets its own, longer deadline.
            hello = self._receive(time.monotonic() + max(_STARTUP_SECONDS, settings.timeout_seconds))
        except HNDLError as error:
            self.close()
            raise self._unstartable(error.message) from None
        except BaseException:
            self.close()
            raise
        if hello != {"ready": True}:
            self.close()
            detail = hello.get("error") if type(hello) is dict else None
            raise self._unstartable(detail if type(detail) is str else "no reply")

    @staticmethod
    def _unstartable(detail: str) -> HNDLError:
        return HNDLError(
            "E_RESOURCE",
            f"the configuration parser worker could not start with its limits ({detail[:1000]})",
            field="isolation",
            remedies=(
                "Raise memory_bytes, cpu_seconds or timeout_seconds with "
                "hndl.frontends.config.worker.configure(...).",
                "On platforms without resource limits, choose isolation explicitly with "
                "hndl.frontends.config.worker.configure(mode='process-unlimited') or HNDL_CONFIG_ISOLATION.",
            ),
        )

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def ask(self, request: dict) -> Any:
        """Send one request and wait for its reply, all within one wall-clock deadline."""
        deadline = time.monotonic() + self.settings.timeout_seconds
        payload = json.dumps(request, ensure_ascii=False).encode("utf-8")
        self._write(_HEADER.pack(len(payload)) + payload, deadline)
        return self._receive(deadline)

    def _write(self, data: bytes, deadline: float) -> None:
        fd = self.process.stdin.fileno()
        view = memoryview(data)
        while view:
            _, ready, _ = select.select([], [fd], [], self._remaining(deadline))
            if not ready:
                raise self._late()
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                continue
            except OSError:
                raise self._died() from None
            view = view[written:]

    def _receive(self, deadline: float) -> Any:
        header = self._read(_HEADER.size, deadline)
        (size,) = _HEADER.unpack(header)
        if size > self.settings.max_reply_bytes:
            raise HNDLError(
                "E_RESOURCE",
                f"the configuration parser worker replied with {size} bytes, above {self.settings.max_reply_bytes}",
                remedies=("Shrink the configuration, or raise max_reply_bytes with configure().",),
            )
        try:
            return json.loads(self._read(size, deadline).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise malformed("not JSON") from None

    def _read(self, size: int, deadline: float) -> bytes:
        stream = self.process.stdout
        chunks, missing = [], size
        while missing:
            ready, _, _ = select.select([stream], [], [], self._remaining(deadline))
            if not ready:
                raise self._late()
            chunk = os.read(stream.fileno(), missing)
            if not chunk:
                raise self._died()
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    @staticmethod
    def _remaining(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _late(self) -> HNDLError:
        return HNDLError(
            "E_RESOURCE",
            f"parsing configuration took longer than {self.settings.timeout_seconds} s",
            remedies=("Shrink the configuration, or raise timeout_seconds with configure().",),
        )

    def _died(self) -> HNDLError:
        code = self.process.poll()
        return HNDLError(
            "E_RESOURCE",
            "the configuration parser worker stopped while parsing"
            + (f" (exit status {code})" if code is not None else "")
            + ": the source exceeded its memory or CPU budget, or the worker was killed",
            remedies=("Shrink the configuration, or raise memory_bytes / cpu_seconds with configure().",),
        )

    def close(self, *, graceful: bool = False) -> None:
        """Stop the worker and release its pipes; a worker inherited across fork() is only released.

        A forked child holds copies of its parent's pipes; killing the process would take the
        parent's worker away, so the child just drops its copies. ``graceful`` (at exit) first
        closes the worker's stdin, on which it returns from its loop, and kills it only if it
        has not exited within a second.
        """
        if self.owner == os.getpid():
            if graceful and self.process.poll() is None:
                try:
                    self.process.stdin.close()
                    self.process.wait(timeout=1.0)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


# -- the worker side -------------------------------------------------------------------------
def serve(limits: dict) -> None:
    """Worker main loop: apply limits, then answer length-prefixed JSON requests until EOF."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        _apply_limits(limits)
    except Exception as error:  # report, never run unbounded
        _send(stdout, {"ready": False, "error": f"{type(error).__name__}: {error}"})
        return
    _preload()
    # What is loaded now lives as long as the worker: keep the collector from walking it again
    # on every request (the parse itself runs with the collector paused, see _answer).
    gc.freeze()
    guard = _AuditGuard()
    sys.addaudithook(guard)
    _send(stdout, {"ready": True})
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        request = json.loads(stdin.read(size).decode("utf-8"))
        _renew_cpu_budget(limits)
        _send(stdout, _answer(request, guard))


def _preload() -> None:
    """Import, before the guard is armed, what CPython's parser itself imports on demand.

    The tokenizer imports ``unicodedata`` to NFKC-normalize non-ASCII identifiers and to
    resolve ``\\N{...}`` escapes; under the guard that import would be refused and valid
    source would fail. Parser warnings (invalid escapes) are never shown: the worker has no
    audience for them, and displaying one would read source lines through ``linecache``.
    """
    import unicodedata  # noqa: F401
    import warnings

    warnings.simplefilter("ignore")
    import ast

    ast.parse("\u00e4 = '\\N{EM DASH}'", filename="<hndl-warmup>")  # exercise both paths once


def _answer(request: dict, guard: "_AuditGuard") -> dict:
    try:
        source = load_text(request["text"])
        # Syntax trees and their records form no cycles; without pauses the collector makes
        # long sources superlinear. Memory stays bounded by the worker's address-space limit.
        with collector_paused():
            with guard:
                program = validate_config(source, aliases=request["aliases"], inputs=request["inputs"],
                                          max_nodes=request["max_nodes"], build=Wire)
            return {"ok": True, "program": program}
    except HNDLError as error:
        return {"ok": False, "error": encode_error(error)}
    except (MemoryError, RecursionError) as error:
        return {"ok": False, "error": encode_error(HNDLError(
            "E_RESOURCE", f"parsing exhausted the worker ({type(error).__name__})"))}


def _send(stream, message: dict) -> None:
    payload = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _apply_limits(limits: dict) -> None:
    if limits.get("memory_bytes") is None and limits.get("cpu_seconds") is None:
        return
    import resource

    if limits.get("memory_bytes") is not None:
        memory = limits["memory_bytes"]
        mapped = _mapped_bytes()
        if mapped is not None and memory < mapped + _MEMORY_HEADROOM:
            # A cap below what the worker already maps would fail every real request with a
            # misleading "source too large"; refuse to start instead.
            raise ValueError(
                f"memory_bytes={memory} leaves no room: the started worker already maps "
                f"{mapped} bytes and needs {_MEMORY_HEADROOM} more"
            )
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _renew_cpu_budget(limits)


def _mapped_bytes() -> Optional[int]:
    """The worker's current address-space size where the platform reports it (Linux)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _renew_cpu_budget(limits: dict) -> None:
    """Give each request ``cpu_seconds`` more CPU time on top of what the worker used so far."""
    if limits.get("cpu_seconds") is None:
        return
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = spent + limits["cpu_seconds"]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


class _AuditGuard:
    """While parsing, refuse every audited effect except the parser's own AST-only compile.

    This is an allowlist: any audit event other than ``compile`` of ``PARSE_FILENAME`` raises
    while the guard is active, and the guard stays active after refusing, so an effect whose
    refusal some C code swallows (CPython tries to open the "file" named by a SyntaxError to
    quote its line) cannot switch it off for the rest of the parse.
    """

    def __init__(self) -> None:
        self.active = False

    def __enter__(self):
        self.active = True
        return self

    def __exit__(self, *exc):
        self.active = False
        return False

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "compile" and len(args) > 1 and args[1] == PARSE_FILENAME:
            return
        raise HNDLError("E_SYNTAX", f"parsing configuration attempted a forbidden effect ({event})")
