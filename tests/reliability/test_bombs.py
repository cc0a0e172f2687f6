"""Resource bombs (issue 10, item 2; §5 limits, §7 "Loading limits and trust boundaries", §10).

Each bomb must fail with its code (E_RESOURCE; E_SYNTAX for f-strings, which python_config@1
does not contain) quickly and with bounded memory, and leave HNDL usable. Every bomb is
measured twice:

* **time**: the best of up to three untraced runs, under ``SECONDS``. That bound has 3x
  headroom over the slowest figure measured on a loaded 2-core machine, so load cannot make
  it flaky; the promise of 2 s per bomb is checked by ``tests/benchmark/test_bombs_speed.py``
  (``pytest -m benchmark``);
* **memory**: one run under ``tracemalloc`` for the host's peak Python allocation during the
  call, and, for bombs that reach the parser worker, the worker's peak resident set
  (``VmHWM`` of a worker started fresh for that bomb; "idle" when the host refused the bomb
  before the worker saw it).

Run with ``-s`` to see the table (``test_zz_report_the_measurements`` prints it); SECURITY.md
quotes it.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
from torch import nn

import hndl
import hndl.torch
from hndl import HNDLError
from hndl.frontends.config import worker
from hndl.limits import DEFAULT_LIMITS

MIB = 1 << 20
REGISTRY = hndl.Registry.from_packs("basic", "vision", "transformer")
CONTRACT = {"input_shape": ("B", 8), "output_shape": ("B", 8)}
#: Seconds a bomb may take to be refused in the normal suite: 3x the slowest figure measured on
#: a 2-core machine shared by five test runs (the densest source the byte budget admits took
#: 9.1 s there, nearly all of it CPython's own parse; 1.7 s on an idle machine). The 2 s promise
#: itself is a benchmark: tests/benchmark/test_bombs_speed.py.
SECONDS = 30.0
#: And the host's peak Python allocation while it is refused.
HOST_PEAK_BYTES = 64 * MIB
#: The worker's address-space cap (its RLIMIT_AS; the default of §"Parser isolation").
WORKER_CAP_BYTES = 1 << 30

RESULTS: dict[str, dict] = {}
#: Bombs refused with another code than E_RESOURCE.
CODES = {"f-string with 2*10^5 fields (600 KB)": "E_SYNTAX", "f-string after 10^5 raw strings": "E_SYNTAX"}


# ---------------------------------------------------------------------------------------------
# The bombs
# ---------------------------------------------------------------------------------------------

def _resolve(source, **overrides):
    keywords = {**CONTRACT, "registry": REGISTRY, **overrides}
    return lambda: hndl.resolve(source, **keywords)


def _many_nodes(count):
    def graph(x):
        for _ in range(count):
            REGISTRY.ops.relu()
    return lambda: hndl.resolve_callable(graph, **CONTRACT, registry=REGISTRY)


def _creeping_registry():
    """A (trusted, deliberately bad) relation that narrows an open extent by one on every call,
    so resolution never reaches a fixed point: max_iterations must stop it."""
    registry = hndl.Registry.from_packs("basic")
    calls = [0]

    def creep(s):
        calls[0] += 1
        s.interval("out", 1, 1, 2**31 - 1 - calls[0])

    @registry.operator("creep", identity="test.creep", summary="Never settles.", shape="x[B, D] -> out[B, E]",
                       relation=creep)
    class Creep(nn.Module):
        """Narrows its output width by one per sweep, forever."""

        def forward(self, x):  # pragma: no cover - never built
            return x

    return registry


def _never_settles():
    registry = _creeping_registry()
    return lambda: hndl.resolve("creep()\nlinear(8)", **CONTRACT, registry=registry)


def _big_file(tmp_path, name, size, fill=b"#"):
    path = tmp_path / name
    with open(path, "wb") as handle:
        handle.truncate(0)
        block = fill * MIB
        for _ in range(size // MIB):
            handle.write(block)
    return path


def _formatted_fields(count):
    """One f-string with ``count`` fields: CPython parses it in time quadratic in ``count``."""
    return 'linear(8, name=f"' + "{x}" * count + '")'


def _huge_plan_text():
    return '{"digests":' + " " * (16 * MIB) + "}"


#: name -> (what it is, where it is refused, factory(tmp_path) -> call, expected message part)
BOMBS = {
    "10 MB source": ("resolve() of 10**7 bytes", "host: byte budget",
                     lambda tmp: _resolve("#" * 10**7), "UTF-8 bytes"),
    "10 MB file": ("resolve_file() of a 10 MiB file", "host: bounded read",
                   lambda tmp: (lambda path: lambda: hndl.resolve_file(path, **CONTRACT, registry=REGISTRY))(
                       _big_file(tmp, "big.hndl", 10 * MIB)), "larger than"),
    "10^5 lines": ("relu()\\n x 10**5", "host: line budget",
                   lambda tmp: _resolve("relu()\n" * 10**5), "lines"),
    "10^4-deep parentheses": ("linear(((...x...)))", "worker: CPython parser limit",
                              lambda tmp: _resolve("linear(" + "(" * 10**4 + "x" + ")" * 10**4 + ")"), "nested"),
    "10^4-deep lists": ("linear([[[...]]])", "worker: CPython parser limit",
                        lambda tmp: _resolve("linear(" + "[" * 10**4 + "]" * 10**4 + ")"), "nested"),
    "10^6-digit integer": ("linear(999...9)", "worker: integer digit limit",
                           lambda tmp: _resolve("linear(" + "9" * 10**6 + ")"), "digits"),
    "10^6-element list": ("linear(8, v=[0, 0, ...]) with 10**6 items", "host: byte budget",
                          lambda tmp: _resolve("linear(8, v=[" + "0," * 10**6 + "])"), "UTF-8 bytes"),
    "5*10^5-element list (fits 1 MiB)": ("the densest list the byte budget admits", "worker: AST node budget",
                                         lambda tmp: _resolve("linear(8, v=[" + "0," * ((MIB - 40) // 2) + "])"),
                                         "syntax nodes"),
    "10^5 calls on one line": ("relu(); x 10**5", "worker: AST node budget",
                               lambda tmp: _resolve("relu();" * 10**5), "syntax nodes"),
    "f-string with 2*10^5 fields (600 KB)": ("linear(8, name=f'{x}{x}...') with 200,000 fields",
                                             "host: f-string scan", lambda tmp: _resolve(_formatted_fields(200_000)),
                                             "f-strings"),
    "f-string after 10^5 raw strings": ("r'f' x 10**5, then one f-string: the scan's slowest input",
                                        "host: f-string scan",
                                        lambda tmp: _resolve("linear(8, name=" + "r'f' " * 10**5 + ")\nrelu(f'{x}')"),
                                        "f-strings"),
    "10^5 nodes, callable": ("a captured loop of 10**5 ops.relu()", "host: max_nodes while capturing",
                             lambda tmp: _many_nodes(10**5), f"max_nodes={DEFAULT_LIMITS['max_nodes']}"),
    "10^6 nodes, callable": ("a captured loop of 10**6 ops.relu()", "host: max_nodes while capturing",
                             lambda tmp: _many_nodes(10**6), f"max_nodes={DEFAULT_LIMITS['max_nodes']}"),
    "49,000 calls (490 KB)": ("linear(8); x 49,000: inside every byte, line and syntax-node budget",
                              "worker: max_nodes (operator calls)", lambda tmp: _resolve("linear(8);" * 49_000),
                              f"more than {DEFAULT_LIMITS['max_nodes']} operator calls, "
                              f"above max_nodes={DEFAULT_LIMITS['max_nodes']}"),
    "5000 nodes vs max_nodes=1000": ("relu()\\n x 5000 under limits={'max_nodes': 1000}",
                                     "worker: max_nodes (operator calls)",
                                     lambda tmp: _resolve("relu()\n" * 5000, limits={"max_nodes": 1000}),
                                     "max_nodes=1000"),
    "reshape over max_elements": ("[B, 2**20, 4] -> linear(2**21) -> reshape(2**21, 2**20)", "host: max_elements",
                                  lambda tmp: _resolve("linear(2097152)\nreshape(2097152, 1048576)\nlinear(1)",
                                                       input_shape=("B", 2**20, 4), output_shape=("B", 2**21, 1)),
                                  "max_elements"),
    "contract over max_elements": ("input [B, 2**31-1, 2**31-1, 2**31-1]", "host: max_elements",
                                   lambda tmp: _resolve("relu()", input_shape=("B",) + (2**31 - 1,) * 3,
                                                        output_shape=("B",) + (2**31 - 1,) * 3), "max_elements"),
    "relation that never settles": ("a relation narrowing an extent by one per sweep", "host: max_iterations",
                                    lambda tmp: _never_settles(), "max_iterations=1000"),
    "plan JSON over 16 MiB (text)": ("from_json of 16 MiB + 13 bytes", "host: plan size bound",
                                     lambda tmp: (lambda text: lambda: hndl.ResolvedPlan.from_json(text))(
                                         _huge_plan_text()), "16 MiB"),
    "plan JSON over 16 MiB (bytes)": ("from_json of 17 MiB of bytes", "host: plan size bound",
                                      lambda tmp: (lambda data: lambda: hndl.ResolvedPlan.from_json(data))(
                                          b" " * (17 * MIB)), "16 MiB"),
    "plan file over 16 MiB": ("hndl.torch.restore(path) of a 64 MiB file", "host: bounded read",
                              lambda tmp: (lambda path: lambda: hndl.torch.restore(
                                  path, device="cpu", registry=REGISTRY))(_big_file(tmp, "plan.json", 64 * MIB, b" ")),
                              "16 MiB"),
}


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------

def _status(pid: int, key: str) -> int:
    """A /proc/<pid>/status figure in bytes (VmHWM: peak resident set)."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _fresh_worker():
    with worker._lock:
        if worker._worker is not None:
            worker._worker.close()
            worker._worker = None
    hndl.resolve("linear(4)", input_shape=("B", 4), output_shape=("B", 4), registry=REGISTRY)
    return worker._worker.process.pid


def _refused(call):
    try:
        call()
    except HNDLError as error:
        return error
    raise AssertionError("the bomb was accepted")


@pytest.fixture(autouse=True)
def process_isolation():
    saved = worker._settings
    worker.configure(mode="process", memory_bytes=WORKER_CAP_BYTES, cpu_seconds=10, timeout_seconds=30.0,
                     max_reply_bytes=16 << 20)
    yield
    worker._settings = saved


@pytest.mark.parametrize("name", list(BOMBS))
def test_each_bomb_is_refused_quickly_with_its_code_and_bounded_memory(name, tmp_path):
    what, where, factory, expected = BOMBS[name]
    call = factory(tmp_path)
    pid = _fresh_worker()
    baseline = _status(pid, "VmHWM")
    # time: best of up to three runs; stop at the first under the bound
    times = []
    for _ in range(3):
        start = time.perf_counter()
        error = _refused(call)
        times.append(time.perf_counter() - start)
        assert error.code == CODES.get(name, "E_RESOURCE"), f"{name}: {error}"
        assert expected in error.message, f"{name}: {error.message}"
        if times[-1] < SECONDS:
            break
    alive = worker._worker is not None and worker._worker.process.pid == pid and worker._worker.usable()
    worker_peak = _status(pid, "VmHWM") if alive else None
    # host memory: one traced run
    tracemalloc.start()
    try:
        _refused(call)
        host_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    RESULTS[name] = dict(what=what, where=where, seconds=min(times), host=host_peak,
                         worker=worker_peak if worker_peak is not None and worker_peak > baseline else None,
                         idle=baseline, message=error.message)
    assert min(times) < SECONDS, f"{name}: refused only after {min(times):.2f} s"
    assert host_peak < HOST_PEAK_BYTES, f"{name}: the host allocated {host_peak / MIB:.1f} MiB"
    assert alive, f"{name}: the parser worker did not survive a refused bomb"
    assert worker_peak < WORKER_CAP_BYTES
    # and HNDL is still usable
    assert hndl.resolve("linear(16)\nrelu()\nlinear()", **CONTRACT, registry=REGISTRY).output_shape == ("B", 8)


BOMB = "linear(8, v=[" + "0," * ((MIB - 40) // 2) + "])"
#: The budget walk may take this many times as long as ``ast.walk`` of the same tree.
WALK_RATIO = 6.0


def test_a_parser_worker_killed_mid_parse_fails_that_call_with_e_resource_and_the_next_call_works(
        kill_worker_mid_parse):
    killed = kill_worker_mid_parse(_fresh_worker, lambda: hndl.resolve(BOMB, **CONTRACT, registry=REGISTRY))
    error, pid, seconds = killed.outcome, killed.pid, killed.seconds
    assert isinstance(error, HNDLError), error
    assert error.code == "E_RESOURCE" and "stopped" in error.message, error
    assert worker._worker is None  # the dead worker is dropped, never reused
    start = time.perf_counter()
    plan = hndl.resolve("linear(16)\nrelu()\nlinear()", **CONTRACT, registry=REGISTRY)
    restart = time.perf_counter() - start
    assert plan.output_shape == ("B", 8) and worker._worker.process.pid != pid
    RESULTS["parser worker killed mid-parse"] = dict(
        what="SIGKILL to the worker while it parses the 1 MiB list", where="host: dead worker detected",
        seconds=seconds, host=None, worker=None, idle=None, message=error.message,
        note=f"killed at >150 MiB RSS; the next call (fresh worker) took {restart:.2f} s")
    assert seconds < SECONDS


def test_the_budget_walk_of_a_dense_source_is_fast_and_located():
    """Regression (issue 10 bombs): the AST budget walk used ``ast.iter_child_nodes`` with an
    anchor per node, ~0.5 s for the 2*10^5 nodes of a dense 1 MiB source on top of CPython's
    own parse; the plain ``_fields`` loop takes a fifth of that and reports the same position. It is
    timed against ``ast.walk`` of the same tree in the same process, so load on the machine moves both:
    the walk measured 0.9-1.8x ``ast.walk`` on a loaded 2-core machine (the walk before the fix took
    five times as long as this one), and the bound leaves 3x headroom over the slowest ratio, with
    no absolute floor for load to break."""
    import ast

    from hndl.frontends.config.source import load_text, resolve_budgets
    from hndl.frontends.config.syntax import check_ast_budgets

    source = load_text("relu();" * 10**5)
    module = ast.parse(source.text)
    start = time.perf_counter()
    with pytest.raises(HNDLError) as caught:
        check_ast_budgets(module, source, resolve_budgets(None))
    seconds = time.perf_counter() - start
    assert caught.value.code == "E_RESOURCE"
    # the 200,001st node in depth-first order (last statement first) is the Name of call 66,667
    # from the end, i.e. statement 33,334, which starts at column 7 * 33,333 + 1
    assert (caught.value.location.line, caught.value.location.column) == (1, 7 * 33_333 + 1)
    start = time.perf_counter()
    sum(1 for _ in ast.walk(module))  # the standard library's full walk, timed under the same load
    reference = time.perf_counter() - start
    assert seconds < WALK_RATIO * reference, f"the budget walk took {seconds:.2f} s (ast.walk: {reference:.2f} s)"


def test_capture_stops_at_max_nodes_instead_of_recording_without_limit():
    """Regression (issue 10 bombs): capture recorded every node and only resolution counted
    them, so a runaway loop in a captured callable grew memory until it finished (10^6 calls:
    ~20 s and ~600 MB). The binder now refuses the (max_nodes + 1)-th call."""
    calls = []

    def runaway(x):
        while True:
            calls.append(1)
            REGISTRY.ops.relu()

    with pytest.raises(HNDLError) as caught:
        hndl.resolve_callable(runaway, **CONTRACT, registry=REGISTRY, limits={"max_nodes": 100})
    assert caught.value.code == "E_RESOURCE"
    assert caught.value.message == "the graph has more than 100 nodes, above max_nodes=100"
    assert len(calls) == 101
    # configuration is bounded the same way, node by node
    with pytest.raises(HNDLError) as caught:
        hndl.resolve("relu()\n" * 200, **CONTRACT, registry=REGISTRY, limits={"max_nodes": 100})
    assert caught.value.code == "E_RESOURCE" and caught.value.location.line == 101
    # exactly max_nodes is still fine
    plan = hndl.resolve("relu()\n" * 100, **CONTRACT, registry=REGISTRY, limits={"max_nodes": 100})
    assert len(plan.nodes) == 100


def test_a_source_past_max_nodes_costs_the_host_almost_nothing():
    """Regression (issue 15, item 18): ``"linear(8);" * 49000`` fits every source budget, and the
    host used to decode the worker's 8 MB reply and bind 10,000 nodes before refusing the next:
    4.6-9.3 s of host CPU outside the worker's limits. The worker now counts operator calls
    against max_nodes and replies with the diagnostic alone: about 0.03 s of host CPU, so the
    bound below (host CPU, which other processes' load does not stretch) has 30x headroom."""
    import resource

    _fresh_worker()
    before = resource.getrusage(resource.RUSAGE_SELF)
    error = _refused(_resolve("linear(8);" * 49_000))
    after = resource.getrusage(resource.RUSAGE_SELF)
    host_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert error.code == "E_RESOURCE"
    assert error.message == "the configuration has more than 10000 operator calls, above max_nodes=10000"
    assert (error.location.line, error.location.column) == (1, len("linear(8);") * 10_000 + 1)
    assert host_cpu < 1.0, f"the host spent {host_cpu:.2f} s of CPU refusing it"


def test_zz_report_the_measurements():
    """Print the table (run with -s); SECURITY.md quotes it."""
    if not RESULTS:
        pytest.skip("no bomb ran in this session")
    rows = [("bomb", "refused by", "time", "host peak", "worker peak RSS")]
    for name, result in RESULTS.items():
        host = "-" if result["host"] is None else f"{result['host'] / MIB:.2f} MiB"
        if result["worker"] is not None:
            peak = f"{result['worker'] / MIB:.0f} MiB"
        elif result.get("note"):
            peak = result["note"]
        else:
            peak = "idle" if result["idle"] is not None else "-"
        rows.append((name, result["where"], f"{result['seconds'] * 1000:.0f} ms", host, peak))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    slow = {name: result["seconds"] for name, result in RESULTS.items() if result["seconds"] >= SECONDS}
    assert not slow, f"bombs refused too slowly: {slow}"
