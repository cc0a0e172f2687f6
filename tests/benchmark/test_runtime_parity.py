"""Runtime parity with handwritten PyTorch (PyTorch backend issue, "Speed").

Every case runs HNDL and a handwritten module side by side in this process, on CPU with one
thread (restored afterwards), from identical parameters (copied into the handwritten module and
checked to give identical outputs before any timing). Timing: after generous warm-up, ROUNDS
interleaved rounds; each round times ``calls`` calls of one model and then ``calls`` calls of
the other, three times over, alternating which goes first, and keeps each model's fastest turn
(as timeit recommends), with the garbage collector paused.
Reported per case: the median µs per call of each, the ratio of those medians, and the median
of the per-round ratios. The per-round ratio compares two measurements taken back to back, so
its median is the figure that is least disturbed by load from other processes; it is the one
asserted against the target. The torch.compile cases run this in three fresh worker processes
(this file executed as a script) and pool their rounds, since one process's memory layout alone
moves a compiled model's time by about a percent. The best (minimum) round of each model and their ratio are printed
too. ``HNDL_BENCHMARK_ROUNDS`` overrides the number of rounds (default 15).

Targets: forward in eval/no_grad, MLP (5 nodes) at batch 1 <= 1.08, 20 x relu at batch 1
<= 1.08, MLP at batch 32 <= 1.03; torch.compile'd HNDL vs torch.compile'd handwritten <= 1.02
(backend "eager", and "inductor" where it compiles on this machine); training-mode
forward + backward at batch 32 <= 1.05; construction of a wide MLP (8 x linear 4096):
``build(plan)`` <= 1.2 x handwritten construction (``network(source)``, resolution included,
is printed beside it).

Run with ``.venv/bin/python -m pytest -m benchmark tests/benchmark/test_runtime_parity.py -q -s``
to see the figures.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest
import torch
from torch import nn

import hndl
from hndl.collector import collector_paused
from hndl.torch import build, network

pytestmark = [pytest.mark.benchmark, pytest.mark.usefixtures("one_thread")]

ROUNDS = int(os.environ.get("HNDL_BENCHMARK_ROUNDS", "15"))
REPEATS = 3
#: Fresh processes per torch.compile case (see test_compiled_mlp_is_within_2_percent_of_compiled_handwritten).
COMPILE_WORKERS = 3
MLP = "linear(64)\nrelu()\nlinear(64)\nrelu()\nlinear(10)\n"
MLP_CONTRACT = {"input_shape": ("B", 32), "output_shape": ("B", 10)}
RELUS = "relu()\n" * 20
RELU_CONTRACT = {"input_shape": ("B", 64), "output_shape": ("B", 64)}
WIDE = "linear(4096)\n" * 8
WIDE_CONTRACT = {"input_shape": ("B", 4096), "output_shape": ("B", 4096)}


@contextmanager
def _gc_paused():
    """timeit's discipline: collect once, then no collection while timing."""
    gc.collect()
    with collector_paused():
        yield


# -- models -------------------------------------------------------------------------------------
def _handwritten_mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def _handwritten_relus() -> nn.Sequential:
    return nn.Sequential(*[nn.ReLU() for _ in range(20)])


def _pair(source, contract, handwritten):
    """An HNDL network and its handwritten twin with the same parameters, node by node."""
    model = network(source, device="cpu", **contract)
    reference = handwritten()
    built = list(model.nodes.children())
    written = list(reference.children())
    assert len(built) == len(written)
    for ours, theirs in zip(built, written):
        assert type(ours).__name__ == type(theirs).__name__ or not list(theirs.parameters())
        theirs.load_state_dict(ours.state_dict())
    return model, reference


def _same_outputs(model, reference, x):
    with torch.no_grad():
        ours, theirs = model(x), reference(x)
    assert torch.equal(ours, theirs), "the two models must compute the same thing before they are timed"


# -- timing -------------------------------------------------------------------------------------
def _loop(fn, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3  # µs per call


def _compare(label, ours, theirs, *, calls, target, warmup_rounds=3, rounds=ROUNDS, repeats=REPEATS, collect=None):
    """Interleaved rounds; returns the median of per-round ratios after printing every figure.

    Within a round the two models alternate ``repeats`` times (``calls`` calls each) and each keeps
    its fastest timing, so a preemption by another process that lands in one model's turn does not
    decide the round. ``collect``, a list, receives every per-round ratio.
    """
    for _ in range(warmup_rounds):
        _loop(ours, calls)
        _loop(theirs, calls)
    hndl_times, hand_times, ratios = [], [], []
    with _gc_paused():
        for index in range(rounds):
            a = b = float("inf")
            for turn in range(repeats):
                if (index + turn) % 2 == 0:
                    a = min(a, _loop(ours, calls))
                    b = min(b, _loop(theirs, calls))
                else:
                    b = min(b, _loop(theirs, calls))
                    a = min(a, _loop(ours, calls))
            hndl_times.append(a)
            hand_times.append(b)
            ratios.append(a / b)
    hndl_median, hand_median = statistics.median(hndl_times), statistics.median(hand_times)
    ratio = statistics.median(ratios)
    if collect is not None:
        collect.extend(ratios)
    print(
        f"\n{label}: hndl {hndl_median:.2f} µs/call, handwritten {hand_median:.2f} µs/call, "
        f"ratio of medians {hndl_median / hand_median:.3f}, median round ratio {ratio:.3f} "
        f"(rounds {min(ratios):.3f}..{max(ratios):.3f}; best {min(hndl_times):.2f} / {min(hand_times):.2f} µs = "
        f"{min(hndl_times) / min(hand_times):.3f}; {rounds} rounds x {repeats} turns x {calls} calls; "
        f"target <= {target})"
    )
    return ratio


def _eval_forward(label, source, contract, handwritten, batch, *, calls, target):
    model, reference = _pair(source, contract, handwritten)
    model.eval()
    reference.eval()
    x = torch.randn(batch, contract["input_shape"][1])
    _same_outputs(model, reference, x)
    with torch.no_grad():
        return _compare(label, lambda: model(x), lambda: reference(x), calls=calls, target=target)


# -- forward, eval, no_grad ---------------------------------------------------------------------
def test_mlp_batch_1_forward_is_within_8_percent_of_handwritten():
    ratio = _eval_forward("MLP (5 nodes), batch 1, eval/no_grad", MLP, MLP_CONTRACT, _handwritten_mlp, 1,
                          calls=2000, target=1.08)
    assert ratio <= 1.08


def test_twenty_relus_batch_1_forward_is_within_8_percent_of_handwritten():
    ratio = _eval_forward("20 x relu, batch 1, eval/no_grad", RELUS, RELU_CONTRACT, _handwritten_relus, 1,
                          calls=1000, target=1.08)
    assert ratio <= 1.08


def test_mlp_batch_32_forward_is_within_3_percent_of_handwritten():
    ratio = _eval_forward("MLP (5 nodes), batch 32, eval/no_grad", MLP, MLP_CONTRACT, _handwritten_mlp, 32,
                          calls=1000, target=1.03)
    assert ratio <= 1.03


# -- torch.compile --------------------------------------------------------------------------------
#: Words in a worker's error that mean the C++ toolchain or inductor's own machinery failed,
#: rather than either model.
ENVIRONMENTAL = ("CppCompileError", "InvalidCxxCompiler", "CalledProcessError", "No such file or directory",
                 "compiler", "OpenMP", "omp.h")


def _compiled_rounds(backend: str, batch: int) -> list[float]:
    """One worker process's share of a torch.compile case: its per-round ratios (printed too)."""
    torch._dynamo.reset()
    model, reference = _pair(MLP, MLP_CONTRACT, _handwritten_mlp)
    model.eval()
    reference.eval()
    x = torch.randn(batch, 32)
    _same_outputs(model, reference, x)
    ours = torch.compile(model, backend=backend, dynamic=False)
    theirs = torch.compile(reference, backend=backend, dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        compiled_ours = ours(x)
        middle = time.perf_counter()
        compiled_theirs = theirs(x)
    end = time.perf_counter()
    torch.testing.assert_close(compiled_ours, compiled_theirs)
    print(f"compile times ({backend}, batch {batch}): hndl {middle - start:.2f} s, handwritten {end - middle:.2f} s")
    ratios: list[float] = []
    with torch.no_grad():
        _compare(f"torch.compile(backend={backend!r}) MLP, batch {batch}, eval/no_grad",
                 lambda: ours(x), lambda: theirs(x), calls=1000, target=1.02, warmup_rounds=5, collect=ratios)
    return ratios


def _worker_main(backend: str, batch: str) -> int:
    """``python test_runtime_parity.py <backend> <batch>``: one worker, ratios as a JSON last line."""
    torch.set_num_threads(1)
    logging.getLogger("torch.__trace").propagate = False
    try:
        ratios = _compiled_rounds(backend, int(batch))
    except Exception as error:  # noqa: BLE001 - the parent decides whether it is environmental
        print(json.dumps({"error": f"{type(error).__name__}: {error}"[:2000]}))
        return 1
    print(json.dumps({"ratios": ratios}))
    return 0


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_mlp_is_within_2_percent_of_compiled_handwritten(backend, batch):
    """Each of COMPILE_WORKERS fresh processes builds, compiles and times its own pair side by side;
    the figure is the median of all their per-round ratios. A process's memory layout shifts such a
    small difference by about a percent either way (two identical compiled ``nn.Sequential`` differ
    that much in one process), so one process alone cannot resolve a 2 % target; several can (the
    reason pyperf spawns worker processes)."""
    pooled: list[float] = []
    for _ in range(COMPILE_WORKERS):
        worker = subprocess.run([sys.executable, __file__, backend, str(batch)], capture_output=True, text=True,
                                timeout=600, cwd=os.path.dirname(os.path.abspath(__file__)))
        lines = worker.stdout.strip().splitlines()
        result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"error": worker.stderr[-2000:]}
        if "error" in result:
            if backend == "inductor" and any(word in result["error"] for word in ENVIRONMENTAL):
                pytest.skip(f"inductor cannot compile on this machine: {result['error'][:300]}")
            pytest.fail(f"benchmark worker failed: {result['error']}")
        print("\n" + "\n".join(lines[:-1]))
        pooled.extend(result["ratios"])
    ratio = statistics.median(pooled)
    print(f"torch.compile(backend={backend!r}) MLP, batch {batch}: median round ratio over {COMPILE_WORKERS} "
          f"processes {ratio:.3f} ({len(pooled)} rounds, {min(pooled):.3f}..{max(pooled):.3f}; target <= 1.02)")
    assert ratio <= 1.02


# -- training ---------------------------------------------------------------------------------
def test_training_forward_and_backward_at_batch_32_is_within_5_percent_of_handwritten():
    model, reference = _pair(MLP, MLP_CONTRACT, _handwritten_mlp)
    model.train()
    reference.train()
    x = torch.randn(32, 32)
    _same_outputs(model, reference, x)

    def step(module):
        def run():
            module(x).sum().backward()  # gradients accumulate, the same work for both
        return run

    ratio = _compare("MLP (5 nodes), batch 32, train forward + backward", step(model), step(reference),
                     calls=500, target=1.05)
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad)
    assert ratio <= 1.05


# -- construction -----------------------------------------------------------------------------
def test_wide_mlp_construction_is_within_20_percent_of_handwritten():
    plan = hndl.resolve(WIDE, **WIDE_CONTRACT)

    def from_plan():
        return build(plan, device="cpu")

    def from_source():
        return network(WIDE, device="cpu", **WIDE_CONTRACT)

    def handwritten():
        return nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)])

    built = from_plan()
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in handwritten().parameters())
    del built
    cases = {"build(plan)": from_plan, "network(source)": from_source, "handwritten": handwritten}
    for fn in cases.values():  # warm-up: allocator, resolver worker, first-use imports
        fn()
    times = {name: [] for name in cases}
    order = list(cases)
    rounds = 7
    for index in range(rounds):
        for name in (order if index % 2 == 0 else order[::-1]):
            gc.collect()
            start = time.perf_counter()
            result = cases[name]()
            times[name].append(time.perf_counter() - start)
            del result
    medians = {name: statistics.median(values) for name, values in times.items()}
    plan_ratios = [a / b for a, b in zip(times["build(plan)"], times["handwritten"])]
    source_ratios = [a / b for a, b in zip(times["network(source)"], times["handwritten"])]
    ratio = statistics.median(plan_ratios)
    print(
        f"\nwide MLP construction (8 x linear 4096, {rounds} rounds): handwritten {medians['handwritten'] * 1e3:.0f} ms, "
        f"build(plan) {medians['build(plan)'] * 1e3:.0f} ms (median round ratio {ratio:.3f}, "
        f"ratio of medians {medians['build(plan)'] / medians['handwritten']:.3f}; target <= 1.2), "
        f"network(source) {medians['network(source)'] * 1e3:.0f} ms (median round ratio "
        f"{statistics.median(source_ratios):.3f}, not asserted)"
    )
    assert ratio <= 1.2


if __name__ == "__main__":
    sys.exit(_worker_main(*sys.argv[1:]))
