"""Construction speed against handwritten PyTorch (issue 19): a 199-node narrow MLP.

The network is ``linear(16)`` and ``relu()`` alternating, 199 nodes, input ``("B", 16)``; the
handwritten model is the same ``nn.Sequential`` of 100 ``nn.Linear(16, 16)`` and 99 ``nn.ReLU()``.
Each round times, back to back and with the garbage collector paused, the handwritten
construction, ``network(source)`` (resolution and build), ``hndl.resolve(source)`` alone and
``build(plan)`` alone (a plan resolved once), each the fastest of three turns; one thread, CPU.
The figure asserted is the median over the rounds of each round's ratio to the handwritten
time, the figure least disturbed by other load on the machine (as in test_runtime_parity).

Targets (issue 19): ``network()`` <= 2x handwritten, of which build is this file's part:
build <= 3x here (about 2.3x measured, 11x before the issue's build work, where the meta pass
built every node and ``nn.Linear`` ran under a device context). The whole call is asserted
only against a regression bound (8x; about 4.8x measured while resolution is 2.7x on its own):
the 2x target needs resolution sped up too, and the figures printed say how far it is.
``HNDL_BENCHMARK_ROUNDS`` overrides the number of rounds (default 15).

Run with ``.venv/bin/python -m pytest -m benchmark tests/benchmark/test_construction_speed.py -q -s``.
"""

from __future__ import annotations

import gc
import os
import statistics
import time

import pytest
import torch
from torch import nn

import hndl
from hndl.collector import collector_paused
from hndl.torch import build, network

pytestmark = [pytest.mark.benchmark, pytest.mark.usefixtures("one_thread")]

ROUNDS = int(os.environ.get("HNDL_BENCHMARK_ROUNDS", "15"))
TURNS = 3
NODES = 199
SOURCE = "".join("linear(16)\n" if index % 2 == 0 else "relu()\n" for index in range(NODES))
CONTRACT = {"input_shape": ("B", 16), "output_shape": ("B", 16)}
#: Issue 19's target for the whole call, printed beside the figure.
NETWORK_TARGET = 2.0
#: What this file asserts: build with headroom for a shared machine, the whole call against regression.
BUILD_BOUND = 3.0
NETWORK_BOUND = 8.0


def _handwritten() -> nn.Module:
    return nn.Sequential(*(nn.Linear(16, 16) if index % 2 == 0 else nn.ReLU() for index in range(NODES)))


def _fastest(make) -> float:
    best = float("inf")
    for _ in range(TURNS):
        start = time.perf_counter()
        make()
        best = min(best, time.perf_counter() - start)
    return best


def test_a_199_node_mlp_constructs_near_handwritten_speed():
    registry = hndl.Registry.builtins()
    plan = hndl.resolve(SOURCE, registry=registry, **CONTRACT)
    cases = {
        "handwritten": _handwritten,
        "network()": lambda: network(SOURCE, device="cpu", registry=registry, **CONTRACT),
        "resolve": lambda: hndl.resolve(SOURCE, registry=registry, **CONTRACT),
        "build": lambda: build(plan, device="cpu", registry=registry),
    }
    built = cases["network()"]()
    assert len(built) == NODES and sum(p.numel() for p in built.parameters()) == \
        sum(p.numel() for p in _handwritten().parameters())
    for make in cases.values():  # warm-up: imports, caches, the first compile of each program
        make()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(ROUNDS):
        gc.collect()
        with collector_paused():
            for name, make in cases.items():
                times[name].append(_fastest(make))
    hand = times["handwritten"]
    ratios = {name: statistics.median(a / b for a, b in zip(values, hand)) for name, values in times.items()}
    print(f"\n199-node narrow MLP, {ROUNDS} rounds (median ms; median per-round ratio to handwritten):")
    for name, values in times.items():
        print(f"  {name:12s} {statistics.median(values) * 1e3:7.2f} ms  {ratios[name]:5.2f}x")
    print(f"  target: network() <= {NETWORK_TARGET}x ({'met' if ratios['network()'] <= NETWORK_TARGET else 'not met'})")
    assert ratios["build"] <= BUILD_BOUND
    assert ratios["network()"] <= NETWORK_BOUND
