"""Concurrency (issue 10, item 3; §7 "Trusted callable", "The current tensor", "Parser isolation").

* Captures on many threads at once stay isolated: every capture is active at the same moment
  (a barrier holds them mid-capture), none sees another's nodes, symbols or current tensor,
  and each plan holds exactly its own nodes.
* A symbol carried from one capture into another (across threads or into a nested capture) is
  E_CAPTURE, never a silent cross-graph edge.
* Nested captures restore the outer context, current tensor included, whether the inner one
  succeeds or raises.
* A failing capture leaves no state: the exception keeps its type, nothing stays active, the
  next capture starts from n0.
* The persistent parser worker serves concurrent ``hndl.resolve`` calls correctly: threads
  resolving different specifications (valid and invalid, small and bomb-sized) each get their
  own plan or their own diagnostic, also when the worker dies under one of them.
"""

from __future__ import annotations

import threading
import time

import pytest

import hndl
from hndl import HNDLError
from hndl.frontends import capture as capture_module
from hndl.frontends.config import worker

REGISTRY = hndl.Registry.from_packs("basic", "vision", "transformer")
ops = REGISTRY.ops
THREADS = 16


def run_threads(count, target):
    """Run ``target(index)`` on ``count`` threads; return results (or exceptions) by index."""
    results: dict[int, object] = {}

    def body(index):
        try:
            results[index] = target(index)
        except BaseException as error:  # reported by the caller
            results[index] = error

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return results


# ---------------------------------------------------------------------------------------------
# Captures on many threads
# ---------------------------------------------------------------------------------------------

def test_captures_on_many_threads_at_once_stay_isolated():
    barrier = threading.Barrier(THREADS)
    seen: dict[int, dict] = {}

    def capture_on_thread(index):
        width = 3 + index
        depth = 1 + index % 4

        def graph(x):
            for layer in range(depth):
                ops.linear(width, name=f"t{index}_l{layer}")
                ops.relu()
            active = capture_module._active.get()
            own = (active.binder, len(active.binder.nodes), active.binder.current)
            barrier.wait(timeout=60)  # every capture is active right now
            time.sleep(0.01 * (index % 3))
            again = capture_module._active.get()
            seen[index] = {"same": again.binder is own[0], "count": len(again.binder.nodes) == own[1],
                           "current": again.binder.current is own[2]}
            return ops.linear(2, name=f"t{index}_head")

        return hndl.resolve_callable(graph, input_shape=("B", 4 + index), output_shape=("B", 2), registry=REGISTRY)

    results = run_threads(THREADS, capture_on_thread)
    for index in range(THREADS):
        plan = results[index]
        assert not isinstance(plan, BaseException), plan
        width, depth = 3 + index, 1 + index % 4
        assert seen[index] == {"same": True, "count": True, "current": True}
        ids = [node.id for node in plan.nodes]
        assert all(node_id.startswith(f"t{index}_") or node_id.startswith("n") for node_id in ids), ids
        assert ids == [item for layer in range(depth) for item in (f"t{index}_l{layer}", f"n{2 * layer + 1}")] + \
            [f"t{index}_head"]
        assert plan.input_shape == ("B", 4 + index)
        assert plan.node(f"t{index}_l0").args["in_features"] == 4 + index
        assert all(plan.node(f"t{index}_l{layer}").args["out_features"] == width for layer in range(depth))
        assert plan.node(f"t{index}_head").args["in_features"] == width
    assert capture_module._active.get() is None


def test_ops_on_a_thread_without_a_capture_fail_even_while_other_threads_capture():
    inside = threading.Event()
    release = threading.Event()

    def long_capture(x):
        ops.linear(8)
        inside.set()
        assert release.wait(timeout=60)
        return ops.relu()

    holder = threading.Thread(target=lambda: hndl.resolve_callable(
        long_capture, input_shape=("B", 4), output_shape=("B", 8), registry=REGISTRY))
    holder.start()
    try:
        assert inside.wait(timeout=60)
        with pytest.raises(HNDLError) as caught:
            ops.relu()  # this thread has no capture, whatever the other thread is doing
        assert caught.value.code == "E_CAPTURE"
    finally:
        release.set()
        holder.join(timeout=60)


def test_a_symbol_from_another_threads_capture_is_e_capture():
    handed = {}
    ready, used = threading.Event(), threading.Event()

    def owner(x):
        handed["symbol"] = ops.linear(8)
        ready.set()
        assert used.wait(timeout=60)
        return ops.relu()

    def thief(x):
        assert ready.wait(timeout=60)
        try:
            return ops.relu(handed["symbol"])
        finally:
            used.set()

    results = run_threads(2, lambda index: hndl.resolve_callable(
        owner if index == 0 else thief, input_shape=("B", 4), output_shape=("B", 8), registry=REGISTRY))
    assert not isinstance(results[0], BaseException), results[0]
    assert isinstance(results[1], HNDLError) and results[1].code == "E_CAPTURE", results[1]


# ---------------------------------------------------------------------------------------------
# Nested captures
# ---------------------------------------------------------------------------------------------

def test_a_nested_capture_restores_the_outer_context_and_its_current_tensor():
    inner_plans = []

    def inner(x):
        ops.linear(5, name="inner_a")
        return ops.tanh(name="inner_b")

    def outer(x):
        ops.linear(16, name="outer_a")
        before = capture_module._active.get()
        inner_plans.append(hndl.resolve_callable(inner, input_shape=("B", 3), output_shape=("B", 5),
                                                 registry=REGISTRY))
        inner_plans.append(hndl.resolve("linear(7)\nrelu()", input_shape=("B", 2), output_shape=("B", 7),
                                        registry=REGISTRY))
        assert capture_module._active.get() is before
        ops.relu(name="outer_b")  # reads current: outer_a's output, not anything of the inner captures
        return None

    plan = hndl.resolve_callable(outer, input_shape=("B", 4), output_shape=("B", 16), registry=REGISTRY)
    assert [node.id for node in plan.nodes] == ["outer_a", "outer_b"]
    assert plan.node("outer_b").inputs["x"] == "node:outer_a/out"
    assert [node.id for node in inner_plans[0].nodes] == ["inner_a", "inner_b"]
    assert [node.id for node in inner_plans[1].nodes] == ["n0", "n1"]
    assert capture_module._active.get() is None


def test_a_failing_nested_capture_restores_the_outer_context():
    def inner(x):
        ops.linear(5)
        raise KeyError("inner failed")

    def outer(x):
        ops.linear(16, name="outer_a")
        with pytest.raises(KeyError):
            hndl.resolve_callable(inner, input_shape=("B", 3), output_shape=("B", 5), registry=REGISTRY)
        with pytest.raises(HNDLError) as caught:
            hndl.resolve("relu(", input_shape=("B", 3), output_shape=("B", 3), registry=REGISTRY)
        assert caught.value.code == "E_SYNTAX"
        return ops.relu(name="outer_b")

    plan = hndl.resolve_callable(outer, input_shape=("B", 4), output_shape=("B", 16), registry=REGISTRY)
    assert [node.id for node in plan.nodes] == ["outer_a", "outer_b"]
    assert plan.node("outer_b").inputs["x"] == "node:outer_a/out"


def test_an_outer_symbol_inside_a_nested_capture_is_e_capture():
    def outer(x):
        hidden = ops.linear(8)

        def inner(y):
            return ops.relu(hidden)  # a symbol of the outer capture

        with pytest.raises(HNDLError) as caught:
            hndl.resolve_callable(inner, input_shape=("B", 8), output_shape=("B", 8), registry=REGISTRY)
        assert caught.value.code == "E_CAPTURE"
        return ops.relu()

    plan = hndl.resolve_callable(outer, input_shape=("B", 4), output_shape=("B", 8), registry=REGISTRY)
    assert len(plan.nodes) == 2


# ---------------------------------------------------------------------------------------------
# A failing capture leaves no state
# ---------------------------------------------------------------------------------------------

class Boom(Exception):
    pass


@pytest.mark.parametrize("failure", ["exception", "hndl", "keyboard", "bad return"])
def test_a_failing_capture_leaves_no_state(failure):
    kept = {}

    def graph(x):
        kept["symbol"] = ops.linear(32, name="doomed")
        ops.relu()
        if failure == "exception":
            raise Boom("user code failed")
        if failure == "hndl":
            ops.linear(x, bias="yes")  # E_ARGUMENT from the binder
        if failure == "keyboard":
            raise KeyboardInterrupt
        return 3

    expected = {"exception": Boom, "hndl": HNDLError, "keyboard": KeyboardInterrupt, "bad return": HNDLError}[failure]
    with pytest.raises(expected) as caught:
        hndl.resolve_callable(graph, input_shape=("B", 4), output_shape=("B", 32), registry=REGISTRY)
    assert type(caught.value) is expected  # propagated unchanged
    assert capture_module._active.get() is None
    with pytest.raises(HNDLError) as outside:
        ops.relu()
    assert outside.value.code == "E_CAPTURE"
    # the dead capture's symbols are foreign to every later capture
    with pytest.raises(HNDLError) as foreign:
        hndl.resolve_callable(lambda x: ops.relu(kept["symbol"]), input_shape=("B", 4), output_shape=("B", 32),
                              registry=REGISTRY)
    assert foreign.value.code == "E_CAPTURE"
    # and the next capture starts from scratch: same ids, nothing left over
    plan = hndl.resolve_callable(lambda x: ops.linear(32), input_shape=("B", 4), output_shape=("B", 32),
                                 registry=REGISTRY)
    assert [node.id for node in plan.nodes] == ["n0"]


def test_failing_and_succeeding_captures_interleave_on_threads():
    def target(index):
        def graph(x):
            ops.linear(8 + index, name=f"k{index}")
            if index % 3 == 0:
                raise Boom(index)
            return ops.relu()
        return hndl.resolve_callable(graph, input_shape=("B", 4), output_shape=("B", 8 + index), registry=REGISTRY)

    for _ in range(3):
        results = run_threads(THREADS, target)
        for index, result in results.items():
            if index % 3 == 0:
                assert isinstance(result, Boom) and result.args == (index,)
            else:
                assert [node.id for node in result.nodes] == [f"k{index}", "n1"], result
                assert result.node(f"k{index}").args["out_features"] == 8 + index
    assert capture_module._active.get() is None


# ---------------------------------------------------------------------------------------------
# The persistent parser worker under concurrent resolve calls
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def process_isolation():
    saved = worker._settings
    worker.configure(mode="process", memory_bytes=1 << 30, cpu_seconds=10, timeout_seconds=30.0,
                     max_reply_bytes=16 << 20)
    yield
    with worker._lock:
        if worker._worker is not None:
            worker._worker.close()
            worker._worker = None
    worker._settings = saved


def _spec(index):
    """A distinct specification per thread: widths, names, depth and the error case all differ."""
    width, inputs = 3 + index, 5 + index
    if index % 5 == 4:
        return f"linear({width})\nrelu()\n" + "foo bar\n" * (index % 3 + 1), inputs, width, f"E_SYNTAX@{3}"
    if index % 7 == 6:
        return f"linear({width}, name='w{index}')\nrelu(undefined_{index})", inputs, width, f"E_NAME@{2}"
    lines = [line for layer in range(1 + index % 3)
             for line in (f"linear({width * 2}, name='a{index}_{layer}')", "relu()")]
    return "\n".join(lines + [f"out = linear({width}, name='z{index}')"]), inputs, width, None


def _check(index, result):
    source, inputs, width, failure = _spec(index)
    if failure is not None:
        code, line = failure.split("@")
        assert isinstance(result, HNDLError), (index, result)
        assert result.code == code and result.location.line == int(line), (index, result)
        return
    assert not isinstance(result, BaseException), (index, result)
    assert result.input_shape == ("B", inputs) and result.output_shape == ("B", width)
    assert result.node(f"z{index}").args["in_features"] == width * 2
    assert result.frontend["source"] == source


def test_the_parser_worker_serves_concurrent_resolve_calls_each_their_own_answer(process_isolation):
    hndl.resolve("linear(4)", input_shape=("B", 4), output_shape=("B", 4), registry=REGISTRY)
    pid = worker._worker.process.pid

    def target(index):
        answers = []
        for _ in range(5):
            source, inputs, width, _ = _spec(index)
            try:
                answers.append(hndl.resolve(source, input_shape=("B", inputs), output_shape=("B", width),
                                            registry=REGISTRY))
            except HNDLError as error:
                answers.append(error)
        return answers

    results = run_threads(24, target)
    for index, answers in results.items():
        assert not isinstance(answers, BaseException), answers
        for answer in answers:
            _check(index, answer)
    assert worker._worker.process.pid == pid  # one persistent worker served all 120 calls


def test_concurrent_calls_survive_a_bomb_and_a_killed_worker(process_isolation, kill_worker_mid_parse):
    """One thread sends the densest source the byte budget allows, the other threads call while it is
    being parsed (so they queue behind it), and the worker is killed mid-parse: the bomb's call gets
    E_RESOURCE, every other thread its own correct answer, served by a fresh worker."""
    bomb = "linear(8, v=[" + "0," * (((1 << 20) - 40) // 2) + "])"

    def start():
        hndl.resolve("linear(4)", input_shape=("B", 4), output_shape=("B", 4), registry=REGISTRY)

    def send():
        return hndl.resolve(bomb, input_shape=("B", 8), output_shape=("B", 8), registry=REGISTRY)

    def others(index):
        source, inputs, width, _ = _spec(index + 1)
        try:
            return hndl.resolve(source, input_shape=("B", inputs), output_shape=("B", width), registry=REGISTRY)
        except HNDLError as error:
            return error

    killed = kill_worker_mid_parse(start, send, while_parsing=lambda: run_threads(THREADS - 1, others))
    assert isinstance(killed.outcome, HNDLError) and killed.outcome.code == "E_RESOURCE", killed.outcome
    assert "stopped" in killed.outcome.message
    for index in range(THREADS - 1):
        _check(index + 1, killed.beside[index])
    # every other call came after the kill, so one of them started the worker that serves now
    assert worker._worker is not None and worker._worker.usable() and worker._worker.process.pid != killed.pid
