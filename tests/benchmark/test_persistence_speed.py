"""Saving and restoring stay cheap (plans issue): to_json + from_json, revalidation included,
of a 10,000-node plan in under a second; a signed plan past max_nodes is refused before it is checked.

Run with ``pytest -m benchmark tests/benchmark -s`` to see the figures.
"""

import time

import pytest

import hndl
from hndl import HNDLError, ResolvedPlan, ops

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


def _long_chain(x):
    for _ in range(47_999):
        ops.relu()
    ops.linear()


def test_a_signed_plan_of_48_000_nodes_is_refused_by_max_nodes_before_it_is_checked():
    """Issue 29, item 8: a validly signed 15 MiB plan of 48,000 nodes is refused for
    max_nodes once decoded, without the format, digest and rebuild passes (2-4 s before)."""
    plan = hndl.resolve_callable(_long_chain, input_shape=("B", 16), output_shape=("B", 10),
                                 limits={"max_nodes": 48_000})
    text = plan.to_json()
    assert len(text.encode("utf-8")) > 15 * 10**6
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        with pytest.raises(HNDLError) as caught:
            ResolvedPlan.from_json(text)
        best = min(best, time.perf_counter() - start)
        assert caught.value.code == "E_RESOURCE" and caught.value.location.field == "nodes"
        assert "48000 nodes, above max_nodes=10000" in caught.value.message
    print(f"\n48,000-node plan ({len(text) / 2**20:.1f} MiB) refused in {best * 1e3:.0f} ms")
    assert best < 1.5
