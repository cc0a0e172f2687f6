"""Saving and restoring stay cheap (plans issue): to_json + from_json, revalidation included,
of a 10,000-node plan in under a second.

Run with ``pytest -m benchmark tests/benchmark -s`` to see the figures.
"""

import time

import pytest

import hndl
from hndl import ResolvedPlan, ops

pytestmark = pytest.mark.benchmark


def _chain(x):
    for _ in range(9_999):
        ops.relu()
    ops.linear()


def test_a_ten_thousand_node_plan_round_trips_in_under_a_second():
    plan = hndl.resolve_callable(_chain, input_shape=("B", 16), output_shape=("B", 10))
    best_save = best_load = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        text = plan.to_json()
        saved = time.perf_counter()
        restored = ResolvedPlan.from_json(text)
        loaded = time.perf_counter()
        best_save, best_load = min(best_save, saved - start), min(best_load, loaded - saved)
    assert restored.to_json() == text
    print(f"\n10,000-node plan: to_json {best_save * 1e3:.0f} ms, from_json {best_load * 1e3:.0f} ms, "
          f"together {(best_save + best_load) * 1e3:.0f} ms ({len(text) / 2**20:.1f} MiB)")
    assert best_save + best_load < 1.0
