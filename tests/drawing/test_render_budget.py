"""Graphviz within a budget (issue 29, item 6): the diagram renderer bomb.

A valid plan of n ``relu(x)`` branches joined by a chain of ``add``s lays out in time and memory
that grow far faster than the plan: 400 nodes took Graphviz over a minute, 5,000 nodes grew it to
5.5 GiB. Layouts too large to draw quickly are refused before Graphviz starts (``max_layout_nodes``),
and the renderer runs in its own session under ``RLIMIT_AS`` and ``RLIMIT_CPU``, is killed with its
whole process group at its deadline, on an interrupt or when its parent dies, and is always waited for.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import hndl
from hndl import HNDLError
from hndl.drawing import graphviz
from hndl.drawing.dot import layout_size
from hndl.drawing.draw import check_drawable, draw_plan

DOT = 'digraph plan { "node:n0" [shape=box, label="n0"]; "node:n0" -> "output:y"; }\n'
#: The refusal reads the plan once (milliseconds, 0.03 s at most measured on a loaded 2-core
#: machine); 1 s is over 30x that, and 60 times less than the old renderer took for the same plan.
REFUSAL_SECONDS = 1.0
#: Killing and reaping a renderer after its deadline took at most 0.2 s measured; 10 s is 50x that.
KILL_SECONDS = 10.0
#: How long a killed renderer may take to disappear from the process table (normally milliseconds).
GONE_SECONDS = 30.0


def branch_and_add(branches: int) -> str:
    """The issue's plan: ``branches`` ``relu(x)`` branches joined by a chain of ``add``s (2n nodes)."""
    lines = [f"r{index} = relu(x)" for index in range(branches)]
    total = "r0"
    for index in range(1, branches):
        lines.append(f"s{index} = add({total}, r{index})")
        total = f"s{index}"
    lines.append(f"y = relu({total})")
    return "\n".join(lines)


def residual_chain(blocks: int) -> str:
    """A flat ResNet-like plan: per block three layers and an ``add`` of the block's input (4 nodes each)."""
    lines, previous = [], "x"
    for block in range(blocks):
        lines += [f"a{block} = relu({previous})", f"b{block} = relu(a{block})", f"c{block} = relu(b{block})",
                  f"o{block} = add(c{block}, {previous})"]
        previous = f"o{block}"
    lines.append(f"y = relu({previous})")
    return "\n".join(lines)


def resolve_graph(source: str):
    return hndl.resolve(source, input_shape={"x": ("B", 4)}, output_shape={"y": ("B", 4)})


@pytest.fixture(scope="module")
def bomb_plan():
    """400 nodes: Graphviz took over 60 s for it before this fix."""
    return resolve_graph(branch_and_add(200))


@pytest.fixture
def budget():
    """Restores the render budget a test configured."""
    saved = graphviz.current()
    yield
    graphviz.configure(**dataclasses.asdict(saved))


@pytest.fixture
def spawned(monkeypatch):
    """Every process started while the test runs (subprocess.Popen still starts them)."""
    started = []
    real = subprocess.Popen

    def recording(args, *rest, **options):
        started.append(args)
        return real(args, *rest, **options)

    monkeypatch.setattr(subprocess, "Popen", recording)
    return started


def fake_renderer(folder: Path, body: str, *, python: bool = False) -> str:
    """An executable standing in for Graphviz: a shell script, or a Python one run by this interpreter."""
    path = folder / ("fake-dot.py" if python else "fake-dot")
    shebang = f"#!{sys.executable} -IS" if python else "#!/bin/sh"
    path.write_text(f"{shebang}\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def hanging_renderer(folder: Path) -> tuple[str, Path]:
    """A renderer that never answers and leaves a child of its own running; it writes both pids."""
    pids = folder / "pids"
    program = fake_renderer(folder, f'echo $$ > "{pids}.tmp"\nsleep 60 &\necho $! >> "{pids}.tmp"\n'
                                    f'mv "{pids}.tmp" "{pids}"\nwait')
    return program, pids


def is_gone(pid: int) -> bool:
    """The process has exited: no longer in the process table, or a zombie waiting for its reaper."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_until_gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + GONE_SECONDS
    while not all(is_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text(encoding="utf-8").split()] if path.exists() else []


def stop_leftovers(pids: list[int]) -> None:
    """Kill what a failing test left running, by pid (these are the fake renderer's own processes)."""
    for pid in pids:
        if not is_gone(pid):
            os.kill(pid, signal.SIGKILL)


# -- refused before Graphviz runs -------------------------------------------------------------------------
def test_the_400_node_branch_and_add_plan_is_refused_before_graphviz_runs(bomb_plan, spawned):
    started = time.perf_counter()
    with pytest.raises(HNDLError) as caught:
        draw_plan(bomb_plan, "svg")
    elapsed = time.perf_counter() - started
    error = caught.value
    assert error.code == "E_RESOURCE" and error.location.field == "max_layout_nodes"
    assert "20103 layout nodes" in error.message and "max_layout_nodes=2000" in error.message
    remedies = " ".join(error.remedies)
    assert "hndl graph -o plan.dot" in remedies and "configure(max_layout_nodes=" in remedies
    assert spawned == []  # Graphviz never started
    assert elapsed < REFUSAL_SECONDS


def test_the_layout_size_counts_every_rank_an_edge_crosses(bomb_plan):
    # input, 200 branches, 199 adds, the final relu and the output, plus one virtual node per rank
    # an edge crosses without ending there: branch i meets the chain i - 1 ranks further down.
    assert layout_size(bomb_plan) == 1 + 200 + 199 + 1 + 1 + sum(range(1, 199))
    assert layout_size(resolve_graph(branch_and_add(3))) == 9
    chain = hndl.resolve("\n".join(["relu()"] * 1000), input_shape=("B", 4), output_shape=("B", 4))
    assert layout_size(chain) == 1002  # a chain crosses no rank: its boxes are all there is


def test_ordinary_plans_stay_drawable():
    plan = resolve_graph(residual_chain(50))  # 201 nodes, every residual add reaching back one block
    assert len(plan.nodes) == 201 and layout_size(plan) < graphviz.current().max_layout_nodes
    svg = draw_plan(plan, "svg").decode("utf-8")
    assert svg.count("<g id=\"node") == 203 and ">n200</text>" in svg  # every box, the last one too


def test_a_raised_bound_lets_a_larger_layout_through(bomb_plan, budget):
    graphviz.configure(max_layout_nodes=30_000)
    check_drawable(bomb_plan)  # no longer refused: time, CPU and memory budgets still bound Graphviz


def test_the_budget_is_checked_like_the_other_limits(budget):
    with pytest.raises(HNDLError) as caught:
        graphviz.configure(max_nodes=5)
    assert caught.value.code == "E_SCHEMA" and "max_layout_nodes" in caught.value.remedies[0]
    for name, value in (("max_layout_nodes", 0), ("memory_bytes", 1.5), ("cpu_seconds", True),
                        ("timeout_seconds", float("inf")), ("notebook_timeout_seconds", -1),
                        ("memory_bytes", 2**64), ("timeout_seconds", 1e300)):
        with pytest.raises(HNDLError) as caught:
            graphviz.configure(**{name: value})
        assert caught.value.code == "E_SCHEMA" and caught.value.location.field == f"render budget.{name}"
    settings = graphviz.configure(timeout_seconds=5, cpu_seconds=3)
    assert settings == graphviz.current() and (settings.timeout_seconds, settings.cpu_seconds) == (5, 3)
    with pytest.raises(HNDLError) as caught:  # a budget built by hand is checked where it is used
        graphviz.render(DOT, "svg", budget=dataclasses.replace(settings, cpu_seconds=0))
    assert caught.value.code == "E_SCHEMA" and caught.value.location.field == "render budget.cpu_seconds"


# -- the renderer is bounded and never orphaned -----------------------------------------------------------
def test_a_renderer_that_hangs_is_killed_with_its_whole_group_at_the_deadline(tmp_path):
    program, pids_file = hanging_renderer(tmp_path)
    try:
        # Doubling deadlines until the fake had started its child: on a loaded machine starting
        # the shell may itself take longer than the first deadline.
        for timeout in (0.5, 1, 2, 4, 8, 16):
            pids_file.unlink(missing_ok=True)
            started = time.perf_counter()
            with pytest.raises(HNDLError) as caught:
                graphviz.render(DOT, "svg", program=program, timeout=timeout)
            elapsed = time.perf_counter() - started
            if len(read_pids(pids_file)) == 2:
                break
        pids = read_pids(pids_file)
        assert len(pids) == 2, "the fake renderer never started its child"
        assert caught.value.code == "E_RESOURCE" and caught.value.location.field == "timeout_seconds"
        assert f"longer than {timeout:g} s" in caught.value.message and "timeout_seconds" in caught.value.message
        assert elapsed < timeout + KILL_SECONDS
        assert wait_until_gone(pids), "the renderer or its child outlived the deadline"
    finally:
        stop_leftovers(read_pids(pids_file))


def test_an_interrupt_kills_the_renderer_and_its_group(tmp_path):
    program, pids_file = hanging_renderer(tmp_path)
    main = threading.main_thread().ident

    def interrupt_once_started():
        deadline = time.monotonic() + 120
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main, signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_once_started)
    # Ctrl-C raises KeyboardInterrupt only where Python installed its handler; a process started in
    # the background (`make test &`, some CI runners) inherits SIGINT ignored, so install it here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupter.start()
        with pytest.raises(KeyboardInterrupt):
            graphviz.render(DOT, "svg", program=program, timeout=300)
        interrupter.join()
        pids = read_pids(pids_file)
        assert len(pids) == 2 and wait_until_gone(pids), "an interrupted render left its renderer running"
    finally:
        interrupter.join()
        signal.signal(signal.SIGINT, previous)
        stop_leftovers(read_pids(pids_file))


def test_a_renderer_that_grows_its_memory_is_stopped_by_its_memory_budget(tmp_path, budget):
    # 768 MiB reserved in 16 MiB steps: a bomb without a budget (bounded, so the old code only fails),
    # stopped at 256 MiB with one. It aborts on a failed allocation the way graphviz-pure (Rust) does.
    program = fake_renderer(tmp_path, "import os, sys\nheld = []\ntry:\n    while len(held) < 48:\n"
                                      "        held.append(bytearray(16 << 20))\nexcept MemoryError:\n"
                                      "    os.abort()\nsys.exit(3)", python=True)
    graphviz.configure(memory_bytes=256 << 20)
    started = time.perf_counter()
    with pytest.raises(HNDLError) as caught:
        graphviz.render(DOT, "svg", program=program)
    assert caught.value.code == "E_RESOURCE" and caught.value.location.field == "memory_bytes"
    assert "SIGABRT" in caught.value.message and f"memory_bytes={256 << 20}" in caught.value.message
    assert time.perf_counter() - started < KILL_SECONDS


def test_a_renderer_that_spins_is_stopped_by_its_cpu_budget(tmp_path, budget):
    program = fake_renderer(tmp_path, "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n"
                                      "    pass\nprint('<svg/>')", python=True)
    graphviz.configure(cpu_seconds=1, timeout_seconds=120)
    with pytest.raises(HNDLError) as caught:
        graphviz.render(DOT, "svg", program=program)
    assert caught.value.code == "E_RESOURCE" and caught.value.location.field == "cpu_seconds"
    assert "CPU budget (cpu_seconds=1)" in caught.value.message


def test_the_real_renderer_past_a_raised_bound_is_killed_at_its_deadline(bomb_plan, budget, spawned):
    graphviz.configure(max_layout_nodes=30_000, timeout_seconds=1)
    started = time.perf_counter()
    with pytest.raises(HNDLError) as caught:
        draw_plan(bomb_plan, "svg")
    assert caught.value.code == "E_RESOURCE" and "longer than 1 s" in caught.value.message
    assert time.perf_counter() - started < 1 + KILL_SECONDS
    assert len(spawned) == 1
    assert not any(graphviz.PREFERRED_PROGRAM in " ".join(command) for command in running_commands())


def running_commands() -> list[list[str]]:
    """The command lines of this process's live children."""
    commands = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] not in ("Z", "X") and int(fields[1]) == os.getpid():
                commands.append((entry / "cmdline").read_text(encoding="utf-8").split("\0"))
        except (OSError, ValueError, IndexError):
            continue
    return commands


def test_a_renderer_dies_with_its_parent(tmp_path):
    pids_file = tmp_path / "pid"
    program = fake_renderer(tmp_path, f'echo $$ > "{pids_file}.tmp"\nmv "{pids_file}.tmp" "{pids_file}"\n'
                                      "exec sleep 120")
    parent = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom hndl.drawing.graphviz import render\n"
                               "render('digraph {}', 'svg', program=sys.argv[1], timeout=300)", program],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists():
            assert parent.poll() is None and time.monotonic() < deadline, "the parent never started its renderer"
            time.sleep(0.02)
        (renderer,) = read_pids(pids_file)
        assert not is_gone(renderer)
        parent.kill()
        parent.wait()
        assert wait_until_gone([renderer]), "the renderer outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        stop_leftovers(read_pids(pids_file))


# -- the command line -------------------------------------------------------------------------------------
def test_hndl_graph_refuses_the_bomb_and_writes_nothing(tmp_path):
    spec = tmp_path / "bomb.hndl"
    spec.write_text(branch_and_add(200) + "\n", encoding="utf-8")
    target = tmp_path / "bomb.svg"
    done = subprocess.run(
        [sys.executable, "-m", "hndl.cli", "graph", str(spec), "--input-shape", "x=B,4", "--output-shape", "y=B,4",
         "-o", str(target)], capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert done.returncode != 0 and "E_RESOURCE" in done.stderr and "max_layout_nodes=2000" in done.stderr
    assert not target.exists()
