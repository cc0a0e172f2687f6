"""Shared machinery of the reliability suite (issue 10): hypothesis profiles, the host audit
recorder, the invariant every untrusted input must satisfy, and a warm parser worker.

Profiles. Every property test runs twice over: once in the normal suite under the bounded
``hndl-normal`` profile, and once more, marked ``fuzz``, under ``hndl-fuzz`` (``pytest -m fuzz
tests/reliability``). The per-target example counts are the two ``max_examples`` below; every
property module takes its settings from these two profiles and nowhere else.

The audit recorder. ``sys.addaudithook`` hooks cannot be removed, so one hook is installed for
the whole test process and records only while ``audited()`` is active, i.e. only during the
call under test. Configuration is parsed in the worker process, which has its own guard
(``hndl.frontends.config.worker._AuditGuard``); this recorder watches the *host*, where the
binder, interpreter, resolver and restorer run on the parser's validated output.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, settings

from hndl.errors import CODES, HNDLError

NORMAL_EXAMPLES = 60
FUZZ_EXAMPLES = 5000

_COMMON = dict(
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],
    database=None,  # no example database written into the tree
)
settings.register_profile("hndl-normal", max_examples=NORMAL_EXAMPLES, **_COMMON)
settings.register_profile("hndl-fuzz", max_examples=FUZZ_EXAMPLES, **_COMMON)

#: Seconds any single untrusted input may take before it counts as a hang. The worker's own
#: wall-clock deadline is 30 s; everything the suite generates stays far below it, so a
#: generous 10 s bound catches a runaway loop without flaking on a loaded machine.
HANG_SECONDS = 10.0

# ---------------------------------------------------------------------------------------------
# The host audit recorder
# ---------------------------------------------------------------------------------------------

_LOCK = threading.Lock()
_RECORDING_THREADS: dict[int, list] = {}

#: Audited events that would mean untrusted data made the host run code, import, open files,
#: start processes or reach the network.
FORBIDDEN_EVENTS = frozenset({
    "exec", "compile", "import", "open", "os.system", "subprocess.Popen", "socket.connect",
    "os.listdir", "os.scandir", "os.remove", "os.rename", "shutil.rmtree", "ctypes.dlopen",
})
FORBIDDEN_PREFIXES = ("os.exec", "os.fork", "os.posix_spawn", "os.spawn", "socket.", "ctypes.",
                      "code.__new__", "function.__new__", "marshal.", "pickle.", "cpython.run_",
                      "urllib.", "webbrowser.", "shutil.", "glob.")


def _record(event: str, args: tuple, _threads=_RECORDING_THREADS, _ident=threading.get_ident) -> None:
    # Bound as defaults: audit hooks outlive the module, whose globals are cleared at shutdown.
    events = _threads.get(_ident())
    if events is None:
        return
    detail = None
    if event == "exec" and args:
        detail = getattr(args[0], "co_filename", None)
    elif event == "compile" and len(args) > 1:
        detail = args[1]
    elif event in ("open", "import") and args:
        detail = args[0]
    events.append((event, detail if isinstance(detail, str) else repr(detail)[:200]))


def _first_party_dirs() -> tuple[str, ...]:
    """Where HNDL's own code lives: the core and the first-party operator packs."""
    import os

    names = ["hndl"] + [name for name in sys.modules if name.startswith("hndl_") and "." not in name]
    dirs = []
    for name in names:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(dirs)


def _first_party(event: str, detail: str) -> bool:
    """HNDL lazily importing *its own* modules: the data cannot choose the module, so this is
    not an effect of untrusted input. Everything else (any other import, any open, compile or
    exec of anything that is not HNDL's own installed code) stays forbidden."""
    if event == "import":
        return detail == "hndl" or detail.startswith(("hndl.", "hndl_"))
    if event in ("open", "compile", "exec"):
        return detail.startswith(_first_party_dirs())
    return False


sys.addaudithook(_record)  # inert unless the calling thread is inside audited()


def forbidden(events) -> list:
    return [(event, detail) for event, detail in events
            if (event in FORBIDDEN_EVENTS or event.startswith(FORBIDDEN_PREFIXES))
            and not _first_party(event, detail)]


@contextmanager
def audited():
    """Record the audited events of the calling thread for the duration of the block."""
    events: list = []
    ident = threading.get_ident()
    with _LOCK:
        _RECORDING_THREADS[ident] = events
    try:
        yield events
    finally:
        with _LOCK:
            _RECORDING_THREADS.pop(ident, None)


# ---------------------------------------------------------------------------------------------
# The invariant
# ---------------------------------------------------------------------------------------------


class Outcome:
    """What one call on untrusted input did: its value or HNDLError, time and host events."""

    def __init__(self, value, error, seconds, events):
        self.value, self.error, self.seconds, self.events = value, error, seconds, events

    @property
    def code(self):
        return self.error.code if self.error is not None else None


def untrusted_call(call, *, what: str = "input", hang_seconds: float = HANG_SECONDS) -> Outcome:
    """Run ``call`` and check the untrusted-input invariant.

    It either returns or raises HNDLError with a catalog code; it never raises another
    exception, never takes longer than ``hang_seconds`` and never execs, compiles, imports or
    opens anything in the host while it runs.
    """
    start = time.perf_counter()
    value = error = None
    with audited() as events:
        try:
            value = call()
        except HNDLError as caught:
            error = caught
        except BaseException as other:  # the invariant's whole point: report, with the input
            raise AssertionError(
                f"{what} raised {type(other).__name__} instead of HNDLError: {other!r}"
            ) from other
    seconds = time.perf_counter() - start
    assert error is None or error.code in CODES, f"{what}: code {error.code!r} is not in the catalog"
    assert seconds < hang_seconds, f"{what} took {seconds:.2f} s (limit {hang_seconds} s)"
    bad = forbidden(events)
    assert not bad, f"{what}: the host saw forbidden effects {bad[:5]}"
    return Outcome(value, error, seconds, events)


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def registry():
    """One built-in registry for the suite (resolve with registry=None builds a fresh one)."""
    import hndl

    return hndl.Registry.builtins()


def ensure_worker(registry) -> None:
    """Start the parser worker outside any audited block, so starting it is never recorded."""
    import hndl
    from hndl.frontends.config import worker

    if worker.current().mode != "process":
        worker.configure(mode="process")
    if worker._worker is None or not worker._worker.usable() or worker._worker.settings != worker.current():
        hndl.resolve("linear(4)", input_shape=("B", 4), output_shape=("B", 4), registry=registry)


class Support:
    """The helpers above, handed to test modules as the ``support`` fixture (test modules cannot
    import this conftest by name under ``--import-mode=importlib``)."""

    untrusted_call = staticmethod(untrusted_call)
    audited = staticmethod(audited)
    forbidden = staticmethod(forbidden)
    ensure_worker = staticmethod(ensure_worker)
    HANG_SECONDS = HANG_SECONDS
    NORMAL_EXAMPLES = NORMAL_EXAMPLES
    FUZZ_EXAMPLES = FUZZ_EXAMPLES


@pytest.fixture(scope="session")
def support():
    return Support


@pytest.fixture(scope="session")
def warm(registry):
    """Default process isolation with a running worker; torn down at the end of the session."""
    from hndl.frontends.config import worker

    ensure_worker(registry)
    # and the lazy imports of the error path, outside any audited block
    with pytest.raises(HNDLError):
        import hndl

        hndl.resolve("foo bar", input_shape=("B", 4), output_shape=("B", 4), registry=registry)
    yield registry
    with worker._lock:
        if worker._worker is not None:
            worker._worker.close()
            worker._worker = None
