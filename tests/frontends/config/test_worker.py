"""The isolated parser worker (§7 "Loading limits and trust boundaries").

All declarative source follows one isolated parser/validator worker path with memory and
time limits by default: a separate, persistent process with RLIMIT_AS / RLIMIT_CPU, a
per-request wall-clock deadline, size-bounded and strictly validated replies, and no silent
fallback from one isolation mode to another. Linux /proc is used to inspect the worker.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import sys
import threading
import time

import pytest

import hndl
from hndl.errors import HNDLError
from hndl.frontends.config import worker

CONTRACT = {"input_shape": ("B", 8), "output_shape": ("B", 8)}
MIB = 1 << 20
#: About 1 MiB of valid source: a 500k-item list literal. CPython's parser needs ~500 MB to
#: build its tree, and a second or more, before any HNDL budget can look at it.
BOMB = "linear(8, v=[" + "0," * ((MIB - 40) // 2) + "])"


@pytest.fixture(autouse=True)
def isolation(monkeypatch):
    """Every test starts from and returns to the same isolation settings, with no worker."""
    monkeypatch.delenv("HNDL_CONFIG_ISOLATION", raising=False)
    saved = worker._settings
    _drop_worker()
    yield
    _drop_worker()
    worker._settings = saved


def _drop_worker():
    with worker._lock:
        if worker._worker is not None:
            worker._worker.close()
            worker._worker = None


def _resolve(source="linear(8)", **contract):
    return hndl.resolve(source, **(contract or CONTRACT))


def _worker_pid() -> int:
    assert worker._worker is not None, "no worker is running"
    return worker._worker.process.pid


def _limits(pid: int) -> dict:
    """/proc/<pid>/limits as {name: (soft, hard)}, with 'unlimited' kept as a string."""
    with open(f"/proc/{pid}/limits") as handle:
        lines = handle.read().splitlines()[1:]
    result = {}
    for line in lines:
        name = line[:26].strip()
        soft, hard = line[26:].split()[:2]
        result[name] = tuple(value if value == "unlimited" else int(value) for value in (soft, hard))
    return result


def _alive(pid: int) -> bool:
    """A live (not zombie, not gone) process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _children(marker: str = "hndl.frontends.config.worker") -> list[int]:
    """Live child processes of this test process whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if int(fields[1]) == os.getpid() and fields[0] not in ("Z", "X") and marker in cmdline:
            found.append(int(entry))
    return found


def _expect(code: str, source: str = "linear(8)", **contract) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        _resolve(source, **contract)
    assert caught.value.code == code, caught.value
    return caught.value


# ---------------------------------------------------------------------------------------
# A separate, persistent process with rlimits
# ---------------------------------------------------------------------------------------


def test_resolve_parses_in_a_separate_persistent_process():
    assert worker.current().mode == "process"
    plan = _resolve()
    assert plan.output_shape == ("B", 8)
    pid = _worker_pid()
    assert pid != os.getpid() and _alive(pid)
    assert _children() == [pid]
    for _ in range(3):
        _resolve("linear(16)\nrelu()\nlinear()")
        assert _worker_pid() == pid  # the same process serves consecutive calls
    assert _children() == [pid]


def test_the_worker_runs_under_address_space_and_cpu_limits():
    worker.configure(memory_bytes=512 * MIB, cpu_seconds=7)
    _resolve()
    limits = _limits(_worker_pid())
    assert limits["Max address space"] == (512 * MIB, 512 * MIB)
    soft, _ = limits["Max cpu time"]
    assert soft != "unlimited" and 7 <= soft <= 7 + 5  # the budget, on top of the CPU time used so far
    # and the host itself is not limited by the worker's settings
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 512 * MIB


def test_the_default_memory_limit_is_one_gibibyte():
    assert worker.current().memory_bytes == 1 << 30
    _resolve()
    assert _limits(_worker_pid())["Max address space"] == (1 << 30, 1 << 30)


def test_each_request_gets_a_fresh_cpu_budget_on_top_of_what_the_worker_used():
    worker.configure(cpu_seconds=3)
    _resolve()
    pid = _worker_pid()
    for _ in range(5):
        _resolve("linear(16)\nrelu()\n" * 200 + "linear(8)\n")
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    soft, _ = _limits(pid)["Max cpu time"]
    assert used + 3 <= soft + 1 and soft <= used + 3 + 2


# ---------------------------------------------------------------------------------------
# Killed workers, deadlines and budgets: one failed request, then a fresh worker
# ---------------------------------------------------------------------------------------


def test_a_worker_killed_between_calls_is_replaced_by_a_fresh_one():
    _resolve()
    old = worker._worker
    os.kill(old.process.pid, signal.SIGKILL)
    old.process.wait(timeout=10)
    plan = _resolve("linear(16)\nrelu()\nlinear()")
    assert plan.output_shape == ("B", 8)
    assert _worker_pid() != old.process.pid
    assert _children() == [_worker_pid()]


def test_a_worker_killed_mid_parse_fails_that_request_with_e_resource(kill_worker_mid_parse):
    killed = kill_worker_mid_parse(_resolve, lambda: _resolve(BOMB))
    error = killed.outcome
    assert isinstance(error, HNDLError) and error.code == "E_RESOURCE", error
    assert "stopped" in error.message
    assert worker._worker is None and not _alive(killed.pid)
    assert _resolve().output_shape == ("B", 8)
    assert _worker_pid() != killed.pid


def test_the_wall_clock_deadline_fails_the_request_and_kills_the_worker():
    worker.configure(timeout_seconds=0.001)
    start = time.monotonic()
    error = _expect("E_RESOURCE", BOMB)
    assert time.monotonic() - start < 10
    assert "longer than 0.001 s" in error.message
    assert any("timeout_seconds" in remedy for remedy in error.remedies)
    assert worker._worker is None and _children() == []  # the late worker was killed
    worker.configure(timeout_seconds=30.0)
    assert _resolve().output_shape == ("B", 8)


def test_the_deadline_is_per_request_and_starting_the_worker_is_not_a_request(tmp_path, monkeypatch):
    """A worker slower to start than a tight per-request deadline still starts and serves small
    sources; the deadline then applies to each request. The start is slowed on purpose (a launcher
    that sleeps, then runs the real worker), so the test does not depend on how fast imports are."""
    launcher = tmp_path / "python"
    launcher.write_text(f"#!/bin/sh\nsleep 1\nexec {sys.executable} \"$@\"\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(launcher))
    worker.configure(timeout_seconds=0.5)  # half the start; each small request takes milliseconds
    for _ in range(3):
        assert _resolve().output_shape == ("B", 8)
    pid = _worker_pid()
    _expect("E_RESOURCE", BOMB)
    assert not _alive(pid)


class _Interrupted(Exception):
    pass


def test_an_interrupted_request_never_leaves_its_reply_for_the_next_one():
    """A signal handler raising mid-request (Ctrl-C, a timeout decorator) must not leave the
    late reply in the pipe, where it would answer the next, different request."""
    _resolve()
    pid = _worker_pid()

    def interrupt(signum, frame):
        raise _Interrupted()

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(_Interrupted):
            _resolve(BOMB)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert worker._worker is None and not _alive(pid)
    plan = _resolve("linear(16)\nrelu()\nlinear()")
    assert plan.node("n0").args["out_features"] == 16


def test_a_memory_bomb_is_contained_in_the_worker():
    worker.configure(memory_bytes=256 * MIB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB, the host's peak so far
    error = _expect("E_RESOURCE", BOMB)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200 * 1024, f"the host grew by {grown} kB"
    assert "MemoryError" in error.message or "stopped" in error.message
    assert _resolve().output_shape == ("B", 8)  # the same settings keep working afterwards
    assert _limits(_worker_pid())["Max address space"][0] == 256 * MIB


def test_the_same_bomb_fits_the_default_limit_and_then_fails_an_ast_budget():
    """The contrast to the bomb test: with room to parse, HNDL's own budget reports it."""
    error = _expect("E_RESOURCE", BOMB)
    assert "syntax nodes" in error.message


def test_a_memory_limit_too_small_to_run_the_worker_fails_to_start_instead_of_parsing():
    worker.configure(memory_bytes=16 * MIB)
    error = _expect("E_RESOURCE")
    assert "could not start" in error.message
    assert any("configure" in remedy for remedy in error.remedies)
    assert worker._worker is None and _children() == []  # nothing left running, nothing parsed in-process
    worker.configure(memory_bytes=256 * MIB)
    assert _resolve().output_shape == ("B", 8)


# ---------------------------------------------------------------------------------------
# Modes, budgets and the environment variable
# ---------------------------------------------------------------------------------------


def test_in_process_mode_parses_in_the_host_without_a_worker():
    settings = worker.configure(mode="in-process")
    assert settings.mode == "in-process" and worker.current() == settings
    assert _resolve("linear(16)\nrelu()\nlinear()").output_shape == ("B", 8)
    assert worker._worker is None and _children() == []
    _expect("E_SYNTAX", "import os")
    assert worker._worker is None


def test_process_unlimited_mode_starts_a_worker_without_rlimits():
    worker.configure(mode="process-unlimited")
    _resolve()
    pid = _worker_pid()
    assert pid != os.getpid()
    limits, host = _limits(pid), _limits(os.getpid())
    # Inherited from the host, never set: unlimited wherever the host is.
    assert limits["Max address space"] == host["Max address space"] == ("unlimited", "unlimited")
    assert limits["Max cpu time"] == host["Max cpu time"]
    assert limits["Max cpu time"][0] == "unlimited"


@pytest.mark.parametrize("mode", ["Process", "subprocess", "unlimited", "", "in_process", "process ", 3])
def test_an_unknown_mode_is_e_schema_and_changes_nothing(mode):
    before = worker.current()
    with pytest.raises(HNDLError) as caught:
        worker.configure(mode=mode)
    assert caught.value.code == "E_SCHEMA"
    assert worker.current() == before


@pytest.mark.parametrize(
    "budget",
    [
        {"memory_bytes": 0},
        {"memory_bytes": -1},
        {"memory_bytes": 1.5},
        {"memory_bytes": True},
        {"memory_bytes": "1000000000"},
        {"cpu_seconds": 0},
        {"cpu_seconds": 2.5},
        {"cpu_seconds": None},
        {"max_reply_bytes": 0},
        {"timeout_seconds": 0},
        {"timeout_seconds": -1.0},
        {"timeout_seconds": float("nan")},
        {"timeout_seconds": float("inf")},
        {"timeout_seconds": True},
        {"timeout_seconds": "30"},
        {"memory": 1 << 30},
        {"mode": "in-process", "timeout": 3},
    ],
    ids=repr,
)
def test_bad_budgets_are_e_schema_and_change_nothing(budget):
    before = worker.current()
    with pytest.raises(HNDLError) as caught:
        worker.configure(**budget)
    assert caught.value.code == "E_SCHEMA"
    assert worker.current() == before


def test_configure_returns_the_settings_and_restarts_the_worker():
    _resolve()
    pid = _worker_pid()
    settings = worker.configure(cpu_seconds=5, timeout_seconds=12)
    assert (settings.mode, settings.cpu_seconds, settings.timeout_seconds) == ("process", 5, 12)
    assert worker._worker is None and not _alive(pid)
    _resolve()
    assert _worker_pid() != pid


def test_the_environment_variable_selects_the_mode_when_configure_was_never_called(monkeypatch):
    worker._settings = None
    monkeypatch.setenv("HNDL_CONFIG_ISOLATION", "in-process")
    assert worker.current().mode == "in-process"
    _resolve()
    assert worker._worker is None

    monkeypatch.setenv("HNDL_CONFIG_ISOLATION", "process-unlimited")
    _resolve()
    unlimited = _worker_pid()
    assert _limits(unlimited)["Max address space"][0] == "unlimited"

    # Changing the variable never leaves the host on a weaker worker than it now asks for.
    monkeypatch.setenv("HNDL_CONFIG_ISOLATION", "process")
    _resolve()
    assert _worker_pid() != unlimited and not _alive(unlimited)
    assert _limits(_worker_pid())["Max address space"][0] == 1 << 30

    monkeypatch.setenv("HNDL_CONFIG_ISOLATION", "sandbox")
    error = _expect("E_SCHEMA")
    assert "sandbox" in error.message
    # An explicit configure() overrides a bad variable.
    assert worker.configure(mode="in-process").mode == "in-process"
    assert _resolve().output_shape == ("B", 8)


def test_configure_takes_precedence_over_the_environment_variable(monkeypatch):
    worker.configure(mode="process")
    monkeypatch.setenv("HNDL_CONFIG_ISOLATION", "in-process")
    assert worker.current().mode == "process"
    _resolve()
    assert worker._worker is not None


# ---------------------------------------------------------------------------------------
# Threads and fork
# ---------------------------------------------------------------------------------------


def test_concurrent_resolves_each_get_their_own_plan():
    _resolve()
    pid = _worker_pid()
    widths = [3, 5, 7, 11, 13, 17, 19, 23]
    barrier = threading.Barrier(len(widths))
    results: dict = {}

    def run(width):
        source = f"h = linear({width * 2}, name='wide')\nrelu()\nout = linear({width}, name='last')\n"
        barrier.wait()
        try:
            results[width] = _resolve(source, input_shape=("B", width + 1), output_shape=("B", width))
        except BaseException as error:  # reported below
            results[width] = error

    threads = [threading.Thread(target=run, args=(width,)) for width in widths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for width in widths:
        plan = results[width]
        assert not isinstance(plan, BaseException), plan
        assert plan.input_shape == ("B", width + 1) and plan.output_shape == ("B", width)
        assert plan.node("wide").args["out_features"] == width * 2
        assert plan.node("wide").args["in_features"] == width + 1
        assert plan.node("last").args["in_features"] == width * 2
    assert _worker_pid() == pid


def test_a_worker_owned_by_another_process_is_never_used_or_killed():
    """After fork() the child inherits the parent's worker object; it must start its own."""
    _resolve()
    inherited = worker._worker
    inherited.owner = -1  # as seen from a forked child
    try:
        assert not inherited.usable()
        _resolve()
        assert _worker_pid() != inherited.process.pid
        # Dropping it only released this process's pipe ends (here the last ones, so the worker
        # saw end of input and exited cleanly); it was not killed as an owned worker would be.
        assert inherited.process.wait(timeout=10) == 0
    finally:
        inherited.owner = os.getpid()
        inherited.close()


def test_a_forked_child_starts_its_own_worker_and_leaves_the_parents_alone():
    _resolve()
    parent_pid = _worker_pid()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        report = {}
        try:
            os.close(read_end)
            worker.configure(cpu_seconds=4)  # closes the inherited worker: must not kill the parent's
            report["plan"] = list(hndl.resolve("linear(4)\nrelu()\nlinear()", **CONTRACT).output_shape)
            report["worker"] = worker._worker.process.pid
            worker._worker.close()
        except BaseException as error:
            report["error"] = repr(error)
        finally:
            os.write(write_end, json.dumps(report).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        report = json.loads(handle.read().decode() or "{}")
    os.waitpid(child, 0)
    assert "error" not in report, report
    assert report["plan"] == ["B", 8]
    assert report["worker"] != parent_pid
    assert _alive(parent_pid) and _worker_pid() == parent_pid
    assert _resolve().output_shape == ("B", 8)
    assert _worker_pid() == parent_pid


# ---------------------------------------------------------------------------------------
# Diagnostics keep their code, message, position, remedies and file
# ---------------------------------------------------------------------------------------

OUTCOMES = [
    "linear(64)\nfoo bar",
    "linear(64)\nimport os",
    "linear(64)\nh = linear(undefined_name)",
    "linear(64)\nfrobnicate(3)",
    "\n    linear(64)\n    relu()\n    foo bar\n",
    "\n        h = linear(64)\n        h = relu(h, name='ünï')\n        relu(h, x=[1, 2, 3], x=2)\n",
    "linear(64, name='ünïcødé', w=[1, 2, ä])",
    "linear(" + "(" * 300 + "x" + ")" * 300 + ")",
    "linear(12345678901234567890123)",
    "linear(64)\n\tlinear(64)",
    "linear(64)\nx = (",
    # valid sources, including what makes CPython's tokenizer import or warn on demand
    "linear(16)\nrelu()\nlinear()",
    "ä = linear(16)\nout = linear(ä, 8)",
    "ｌｉｎｅａｒ(8)",
    "linear(8, name='\\N{LATIN SMALL LETTER A}')",
    "linear(8, name='\\d')",
    "linear(8, name='a\\\nb')",
    "\ufeffinear(8)",
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # in-process parsing may warn on "\\d"
@pytest.mark.parametrize("source", OUTCOMES, ids=range(len(OUTCOMES)))
def test_the_worker_and_in_process_parsing_agree_field_for_field(source):
    def outcome():
        try:
            return ("plan", str(_resolve(source)))
        except HNDLError as error:
            return (error.code, error.message, error.location, error.chain, error.remedies)

    worker.configure(mode="process")
    isolated = outcome()
    assert worker._worker is not None
    assert "forbidden effect" not in str(isolated)
    worker.configure(mode="in-process")
    assert outcome() == isolated


def test_a_syntax_error_keeps_its_line_and_column():
    error = _expect("E_SYNTAX", "linear(64)\nfoo bar")
    assert (error.location.line, error.location.column) == (2, 5)
    assert "invalid syntax" in error.message


def test_positions_of_indented_sources_are_in_the_authors_coordinates():
    text = "\n        linear(64)\n        relu()\n        h = linear(nowhere)\n    "
    error = _expect("E_NAME", text)
    assert (error.location.line, error.location.column) == (4, len("        h = linear(") + 1)
    error = _expect("E_SYNTAX", "\n      linear(64)\n      foo bar\n")
    assert (error.location.line, error.location.column) == (3, len("      foo ") + 1)


def test_errors_of_file_sources_name_the_file(tmp_path):
    path = tmp_path / "model.py"
    path.write_text("linear(64)\nfoo bar\n", encoding="utf-8")
    with pytest.raises(HNDLError) as caught:
        hndl.resolve_file(path, **CONTRACT)
    error = caught.value
    assert worker._worker is not None
    assert (error.code, error.location.line, error.location.file) == ("E_SYNTAX", 2, str(path))


@pytest.mark.parametrize("text, code", [
    ("linear(64)\nlinear(5)\n", "E_CONSTRAINT"),       # found while resolving
    ("linear(64)\nrelu(nowhere)\n", "E_NAME"),          # found while interpreting
])
def test_resolution_errors_of_file_sources_name_the_file_too(tmp_path, text, code):
    path = tmp_path / "model.py"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(HNDLError) as caught:
        hndl.resolve_file(path, **CONTRACT)
    error = caught.value
    assert (error.code, error.location.line, error.location.file) == (code, 2, str(path))
    assert f"{path}, line 2" in str(error)
    with pytest.raises(HNDLError) as from_text:
        hndl.resolve(text, **CONTRACT)
    assert from_text.value.location.file is None and from_text.value.code == code


# ---------------------------------------------------------------------------------------
# A misbehaving worker: the host validates the protocol and never hangs
# ---------------------------------------------------------------------------------------

FAKE_WORKER = r'''
import os, struct, sys, time
mode = os.environ["HNDL_TEST_FAKE_MODE"]
out = sys.stdout.buffer

def send(payload):
    out.write(struct.pack(">I", len(payload)) + payload)
    out.flush()

def read_request():
    size = struct.unpack(">I", sys.stdin.buffer.read(4))[0]
    sys.stdin.buffer.read(size)

if mode == "exit-at-start":
    sys.exit(3)
if mode == "refuse-at-start":
    send(b'{"ready": false, "error": "no limits here"}')
    sys.exit(0)
if mode == "silent-at-start":
    time.sleep(60)
send(b'{"ready": true}')
if mode == "never-reads":
    time.sleep(60)
read_request()
if mode.startswith("reply:"):
    with open(mode[6:], "rb") as reply:
        out.write(reply.read())
    out.flush()
    time.sleep(60)
if mode == "silent":
    time.sleep(60)
if mode == "trickle":
    out.write(struct.pack(">I", 200))
    out.flush()
    for _ in range(200):
        out.write(b" ")
        out.flush()
        time.sleep(0.05)
if mode == "exit":
    sys.exit(0)
'''


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    """Make the next worker a scripted impostor speaking (or not) the worker protocol."""
    script = tmp_path / "fake_hndl_worker.py"
    script.write_text(FAKE_WORKER)
    launcher = tmp_path / "python"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)

    def install(mode, **settings):
        if isinstance(mode, bytes):  # a canned reply, header included
            reply = tmp_path / "reply.bin"
            reply.write_bytes(mode)
            mode = f"reply:{reply}"
        monkeypatch.setenv("HNDL_TEST_FAKE_MODE", mode)
        monkeypatch.setattr(sys, "executable", str(launcher))
        worker.configure(**settings)

    yield install
    _drop_worker()
    monkeypatch.undo()


def _reply(payload: bytes, size=None) -> bytes:
    return (len(payload) if size is None else size).to_bytes(4, "big") + payload


def _fake_failure(fake_worker, mode, **settings) -> HNDLError:
    fake_worker(mode, **settings)
    error = _expect("E_RESOURCE")
    assert worker._worker is None  # never trusted again
    assert _children("fake_hndl_worker") == []  # and killed
    return error


MALFORMED_REPLIES = {
    "not JSON": b"{'ok': True}",
    "not UTF-8": b'{"ok": "\xff"}',
    "a JSON list": b"[true, []]",
    "a JSON string": b'"ok"',
    "ok without a program": b'{"ok": true}',
    "ok with an extra key": b'{"ok": true, "program": [], "exec": "print(1)"}',
    "ok as 1": b'{"ok": 1, "program": []}',
    "a program that is not a list": b'{"ok": true, "program": {"e": [1, 1]}}',
    "a statement with an unknown kind": b'{"ok": true, "program": [["exec", 1, 1, "1"]]}',
    "a statement in the dict form": b'{"ok": true, "program": [{"k": "eval", "call": null, "pos": [1, 1]}]}',
    "an error with an unknown code": b'{"ok": false, "error": {"code": "E_PWNED", "message": "m", "line": null, '
    b'"column": null, "node": null, "field": null, "chain": [], "remedies": ["r"]}}',
    "deeply nested JSON": b"[" * 100_000 + b"]" * 100_000,
    "a huge integer": b'{"ok": true, "program": ' + b"9" * 5000 + b"}",
    "a NaN float": b'{"ok": true, "program": NaN}',
}


@pytest.mark.parametrize("name", sorted(MALFORMED_REPLIES))
def test_malformed_replies_are_e_resource_and_discard_the_worker(fake_worker, name):
    error = _fake_failure(fake_worker, _reply(MALFORMED_REPLIES[name]))
    assert "malformed" in error.message


def test_an_oversized_reply_is_refused_before_it_is_read(fake_worker):
    error = _fake_failure(fake_worker, _reply(b"{}", size=1 << 30), max_reply_bytes=1 << 20)
    assert "above" in error.message


def test_a_worker_that_exits_instead_of_replying_is_e_resource(fake_worker):
    error = _fake_failure(fake_worker, "exit")
    assert "stopped" in error.message


def test_a_silent_worker_hits_the_deadline(fake_worker):
    start = time.monotonic()
    error = _fake_failure(fake_worker, "silent", timeout_seconds=0.5)
    assert time.monotonic() - start < 10
    assert "longer than 0.5 s" in error.message


def test_the_deadline_covers_the_whole_reply_not_each_chunk(fake_worker):
    """A worker that trickles its reply a byte at a time cannot stretch the deadline."""
    start = time.monotonic()
    _fake_failure(fake_worker, "trickle", timeout_seconds=1.0)
    assert time.monotonic() - start < 5


def test_the_deadline_covers_sending_the_request(fake_worker):
    """A worker that stops reading cannot block the host on a full pipe."""
    source = ("# " + "x" * 98 + "\n") * 5000 + "linear(8)\n"  # ~500 KB, far beyond a pipe buffer
    fake_worker("never-reads", timeout_seconds=1.0)
    start = time.monotonic()
    error = _expect("E_RESOURCE", source)
    assert time.monotonic() - start < 5
    assert "longer than" in error.message
    assert worker._worker is None and _children("fake_hndl_worker") == []


@pytest.mark.parametrize("mode", ["exit-at-start", "refuse-at-start"])
def test_a_worker_that_cannot_start_is_e_resource_with_a_remedy(fake_worker, mode):
    error = _fake_failure(fake_worker, mode)
    assert "could not start" in error.message
    assert any("configure" in remedy for remedy in error.remedies)
    assert any("process-unlimited" in remedy for remedy in error.remedies)


def test_a_missing_interpreter_is_e_resource_not_an_os_error(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    error = _expect("E_RESOURCE")
    assert "could not start" in error.message
    assert worker._worker is None


def test_a_worker_that_never_says_ready_is_killed(fake_worker, monkeypatch):
    monkeypatch.setattr(worker, "_STARTUP_SECONDS", 0.5)
    start = time.monotonic()
    error = _fake_failure(fake_worker, "silent-at-start", timeout_seconds=0.5)
    assert time.monotonic() - start < 10
    assert "could not start" in error.message


def test_after_an_impostor_the_real_worker_works_again(fake_worker, monkeypatch):
    _fake_failure(fake_worker, _reply(b"[]"))
    monkeypatch.undo()
    worker.configure()
    assert _resolve().output_shape == ("B", 8)
    assert _children() == [_worker_pid()]


def test_an_f_string_bomb_is_refused_by_the_host_and_costs_the_worker_nothing():
    """Issue 15, item 14: one f-string with 200,000 fields kept the worker busy for about 10 s
    (CPython's parser is quadratic in the fields) before it died. The host now refuses it with
    the allowlist's own E_SYNTAX before sending anything, so no worker is even started."""
    registry = hndl.Registry.from_packs("basic")
    worker.configure(mode="process")
    source = 'linear(8, name=f"' + "{x}" * 200_000 + '")'
    start = time.perf_counter()
    with pytest.raises(HNDLError) as caught:
        hndl.resolve(source, **CONTRACT, registry=registry)
    seconds = time.perf_counter() - start
    assert caught.value.code == "E_SYNTAX"
    assert caught.value.message == "formatted strings (f-strings) are not part of python_config@1"
    assert (caught.value.location.line, caught.value.location.column) == (1, 16)
    assert worker._worker is None  # never asked, never started
    assert seconds < 2.0, f"refused only after {seconds:.2f} s"  # measured: about 0.05 s
    # text that merely contains f and a quote still travels to the worker and resolves
    plan = hndl.resolve("linear(8)  # f'x' here is a comment\nrelu()\nlinear()", **CONTRACT,
                        registry=registry)
    assert plan.output_shape == ("B", 8) and worker._worker is not None


# ---------------------------------------------------------------------------------------
# max_nodes is counted by the parser, before the host decodes anything (issue 15, item 18)
# ---------------------------------------------------------------------------------------

def test_the_worker_refuses_calls_past_max_nodes_and_the_host_never_decodes_them(monkeypatch):
    """Regression: ``"linear(8);" * 49000`` came back as an 8 MB reply that the host decoded whole
    (about 9 s of host CPU) before its binder refused the 10,001st node. The worker now counts
    operator calls against max_nodes, so the host receives only the diagnostic."""
    decoded = []

    def counting_decode(data, source, **keywords):
        decoded.append(len(data))
        return decode_program(data, source, **keywords)

    from hndl.frontends.config.source import load_text
    from hndl.frontends.config.wire import decode_program

    monkeypatch.setattr(worker, "decode_program", counting_decode)
    worker.configure(mode="process")
    with pytest.raises(HNDLError) as caught:
        worker.parse_isolated(load_text("linear(8);" * 6), aliases=["linear"], inputs=["x"], max_nodes=5)
    error = caught.value
    assert error.code == "E_RESOURCE"
    assert error.message == "the configuration has more than 5 operator calls, above max_nodes=5"
    assert (error.location.line, error.location.column) == (1, len("linear(8);") * 5 + 1)
    assert decoded == []  # the worker answered with the diagnostic alone
    assert worker._worker is not None and worker._worker.usable()  # a refusal is not a failure
    program = worker.parse_isolated(load_text("linear(8);" * 5), aliases=["linear"], inputs=["x"], max_nodes=5)
    assert len(program.statements) == 5 and decoded == [5]


def test_exactly_max_nodes_calls_resolve_and_one_more_fails_alike_in_both_modes():
    source = "a = relu(relu(x))\nb = relu(relu(a))\nout = relu(b)\n"  # five calls, nested ones first
    outcomes = {}
    for mode in ("process", "in-process"):
        worker.configure(mode=mode)
        assert len(_resolve(source, **CONTRACT, limits={"max_nodes": 5}).nodes) == 5
        with pytest.raises(HNDLError) as caught:
            _resolve(source, **CONTRACT, limits={"max_nodes": 4})
        error = caught.value
        outcomes[mode] = (error.code, error.message, error.location, error.remedies)
    assert outcomes["process"] == outcomes["in-process"]
    code, message, location, _ = outcomes["process"]
    assert code == "E_RESOURCE" and message.endswith("operator calls, above max_nodes=4")
    assert (location.line, location.column) == (3, 1 + len("out = "))


def test_a_reply_with_more_calls_than_max_nodes_is_malformed_and_discards_the_worker(fake_worker):
    from hndl.frontends.config.grammar import parse_config
    from hndl.frontends.config.source import load_text
    from hndl.frontends.config.wire import encode_program

    source = "relu()\n" * 6
    program = encode_program(parse_config(load_text(source), aliases=["relu"], inputs=["x"]))
    fake_worker(_reply(json.dumps({"ok": True, "program": program}).encode()))
    with pytest.raises(HNDLError) as caught:
        _resolve(source, **CONTRACT, limits={"max_nodes": 5})
    assert caught.value.code == "E_RESOURCE" and "malformed" in caught.value.message
    assert "above max_nodes=5" in caught.value.message
    assert worker._worker is None  # never trusted again
