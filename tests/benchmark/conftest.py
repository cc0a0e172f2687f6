"""Fixtures the side-by-side benchmarks share."""

import gc
import os
import statistics
import time

import pytest
import torch

from hndl.collector import collector_paused

#: Interleaved timing rounds per comparison (``HNDL_BENCHMARK_ROUNDS``).
ROUNDS = int(os.environ.get("HNDL_BENCHMARK_ROUNDS", "21"))


@pytest.fixture
def one_thread():
    """Time on one intra-op thread, as the figures in IMPLEMENTATION.md are; restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _loop(fn, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3  # µs per call


def _round(first, second, calls: int, repeats: int) -> tuple[float, float]:
    """One round: the two models alternate ``repeats`` times; each keeps its fastest timing."""
    a, b = [], []
    for _ in range(repeats):
        a.append(_loop(first, calls))
        b.append(_loop(second, calls))
    return min(a), min(b)


def compare_side_by_side(label: str, ours, theirs, *, calls: int, target: float, reference: str = "handwritten",
                         repeats: int = 3, warmup_rounds: int = 3, rounds: int = ROUNDS) -> float:
    """The median per-round ratio of ``ours`` to ``theirs``: warm-up, then ``rounds`` interleaved
    rounds alternating which goes first, the garbage collector paused (timeit's discipline:
    collect once, then no collection while timing); every figure is printed."""
    for _ in range(warmup_rounds):
        _round(ours, theirs, calls, 1)
    hndl_times, their_times, ratios = [], [], []
    gc.collect()
    with collector_paused():
        for index in range(rounds):
            if index % 2 == 0:
                a, b = _round(ours, theirs, calls, repeats)
            else:
                b, a = _round(theirs, ours, calls, repeats)
            hndl_times.append(a)
            their_times.append(b)
            ratios.append(a / b)
    hndl_median, their_median = statistics.median(hndl_times), statistics.median(their_times)
    ratio = statistics.median(ratios)
    print(
        f"\n{label}: hndl {hndl_median:.1f} µs/call, {reference} {their_median:.1f} µs/call, "
        f"ratio of medians {hndl_median / their_median:.3f}, median round ratio {ratio:.3f} "
        f"(rounds {min(ratios):.3f}..{max(ratios):.3f}; best {min(hndl_times):.1f} / {min(their_times):.1f} µs = "
        f"{min(hndl_times) / min(their_times):.3f}; {rounds} rounds x {repeats} alternations x {calls} calls; "
        f"target <= {target})"
    )
    return ratio


@pytest.fixture
def side_by_side():
    """``compare_side_by_side``: time HNDL against a reference in one process, as a ratio."""
    return compare_side_by_side
