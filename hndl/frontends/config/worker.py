"""Parse configuration in an isolated worker process with memory and CPU-time limits (§7).

Python's own parser can exhaust memory or time before any allowlist sees the tree, so every
configuration source is parsed and validated in a separate, persistent worker process: its
address space and CPU time are capped with ``resource.setrlimit``, each request has a
wall-clock deadline, replies are size-bounded JSON decoded strictly by ``wire``, and an audit
hook inside the worker refuses exec, imports, file opening and any compilation other than
the parser's own. Any failure kills the worker; the next request starts a fresh one.

Isolation is configured with :func:`configure` or the ``HNDL_CONFIG_ISOLATION`` environment
variable: ``process`` (the default, a worker with rlimits), ``process-unlimited`` (a worker
with only the wall-clock deadline, for platforms without ``resource`` limits), or
``in-process`` (an explicit opt-out: the same parser and budgets in the host process, with no
memory or CPU isolation). HNDL never falls back from one mode to another on its own.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any, Collection, Optional, Sequence

from ...errors import HNDLError
from .grammar import PARSE_FILENAME, Program, parse_config
from .source import Source, load_text
from .wire import decode_error, decode_program, encode_error, encode_program, malformed

MODES = ("process", "process-unlimited", "in-process")
_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class Isolation:
    """How configuration parsing is isolated, and its budgets."""

    mode: str = "process"
    memory_bytes: int = 1 << 30
    cpu_seconds: int = 10
    timeout_seconds: float = 30.0
    max_reply_bytes: int = 16 << 20


_settings: Optional[Isolation] = None
_lock = threading.Lock()
_worker: Optional["_Worker"] = None


def configure(mode: Optional[str] = None, **budgets: Any) -> Isolation:
    """Set the isolation mode and budgets for this process; returns the settings in force.

    ``budgets`` may set ``memory_bytes``, ``cpu_seconds``, ``timeout_seconds`` and
    ``max_reply_bytes``. Changing anything restarts the worker on the next request.
    """
    global _settings, _worker
    settings = replace(current(), **budgets) if budgets else current()
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
    settings = Isolation(mode=os.environ.get("HNDL_CONFIG_ISOLATION", "process"))
    _check(settings)
    return settings


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
    if not isinstance(settings.timeout_seconds, (int, float)) or settings.timeout_seconds <= 0:
        raise HNDLError("E_SCHEMA", "isolation timeout_seconds must be positive", field="isolation")


def parse_isolated(source: Source, *, aliases: Collection[str], inputs: Sequence[str]) -> Program:
    """Parse and validate ``source`` under the configured isolation; the host keeps ``source``."""
    settings = current()
    if settings.mode == "in-process":
        return parse_config(source, aliases=aliases, inputs=inputs)
    request = {"text": source.original, "aliases": sorted(aliases), "inputs": list(inputs)}
    with _lock:
        global _worker
        if _worker is None or not _worker.usable():
            _worker = _Worker(settings)
        try:
            reply = _worker.ask(request)
        except HNDLError:
            _worker.close()
            _worker = None
            raise
    if reply.get("ok") is True and set(reply) == {"ok", "program"}:
        return decode_program(reply["program"], source)
    if reply.get("ok") is False and set(reply) == {"ok", "error"}:
        raise decode_error(reply["error"])
    raise malformed("unexpected reply shape")


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
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", boot, json.dumps(sys.path), json.dumps(limits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        hello = self._receive()
        if hello != {"ready": True}:
            self.close()
            detail = hello.get("error") if isinstance(hello, dict) else None
            raise HNDLError(
                "E_RESOURCE",
                f"the configuration parser worker could not start with its limits ({detail or 'no reply'})",
                remedies=(
                    "On platforms without resource limits, choose isolation explicitly with "
                    "hndl.frontends.config.worker.configure(mode='process-unlimited') or HNDL_CONFIG_ISOLATION.",
                ),
            )

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def ask(self, request: dict) -> dict:
        payload = json.dumps(request, ensure_ascii=False).encode("utf-8")
        try:
            self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.process.stdin.flush()
        except OSError:
            raise self._died() from None
        return self._receive()

    def _receive(self) -> Any:
        header = self._read(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        if size > self.settings.max_reply_bytes:
            raise HNDLError(
                "E_RESOURCE",
                f"the configuration parser worker replied with {size} bytes, above {self.settings.max_reply_bytes}",
            )
        try:
            return json.loads(self._read(size).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise malformed("not JSON") from None

    def _read(self, size: int) -> bytes:
        stream = self.process.stdout
        chunks, missing = [], size
        while missing:
            ready, _, _ = select.select([stream], [], [], self.settings.timeout_seconds)
            if not ready:
                raise HNDLError(
                    "E_RESOURCE",
                    f"parsing configuration took longer than {self.settings.timeout_seconds} s",
                    remedies=("Shrink the configuration, or raise timeout_seconds with configure().",),
                )
            chunk = os.read(stream.fileno(), missing)
            if not chunk:
                raise self._died()
            chunks.append(chunk)
            missing -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> HNDLError:
        code = self.process.poll()
        return HNDLError(
            "E_RESOURCE",
            "the configuration parser worker stopped while parsing"
            + (f" (exit status {code})" if code is not None else "")
            + ": the source exceeded its memory or CPU budget",
            remedies=("Shrink the configuration, or raise memory_bytes / cpu_seconds with configure().",),
        )

    def close(self) -> None:
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


def _answer(request: dict, guard: "_AuditGuard") -> dict:
    try:
        source = load_text(request["text"])
        with guard:
            program = parse_config(source, aliases=request["aliases"], inputs=request["inputs"])
        return {"ok": True, "program": encode_program(program)}
    except HNDLError as error:
        return {"ok": False, "error": encode_error(error)}
    except (MemoryError, RecursionError) as error:
        return {"ok": False, "error": encode_error(HNDLError(
            "E_RESOURCE", f"parsing exhausted the worker ({type(error).__name__})"))}


def _send(stream, message: dict) -> None:
    payload = json.dumps(message, ensure_ascii=False).encode("utf-8")
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _apply_limits(limits: dict) -> None:
    if limits.get("memory_bytes") is None and limits.get("cpu_seconds") is None:
        return
    import resource

    if limits.get("memory_bytes") is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    _renew_cpu_budget(limits)


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
    """While parsing, refuse every audited effect except the parser's own AST-only compile."""

    FORBIDDEN = ("exec", "import", "open", "os.", "subprocess.", "socket.", "shutil.", "ctypes.", "pickle.", "marshal.")

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
        if event == "compile":
            if len(args) > 1 and args[1] == PARSE_FILENAME:
                return
            self._refuse(event)
        if event in ("exec", "import", "open") or event.startswith(self.FORBIDDEN[3:]):
            self._refuse(event)

    def _refuse(self, event: str) -> None:
        self.active = False
        raise HNDLError("E_SYNTAX", f"parsing configuration attempted a forbidden effect ({event})")
