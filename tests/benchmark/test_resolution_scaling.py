"""Resolution scales linearly: a 10,000-node chain whose last width comes only from the output
contract resolves in under a second, and t(10,000) / t(1,000) <= 12 (resolver issue).

Run with ``pytest -m benchmark tests/benchmark -s`` to see the figures.
"""

import time

import pytest

import hndl
from hndl import ops

pytestmark = pytest.mark.benchmark


def _chain(length):
    def network(x):
        for _ in range(length - 1):
            ops.relu()
        ops.linear()  # its width comes only from the output contract

    return network


def _best_of(repeats, length):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        plan = hndl.resolve_callable(_chain(length), input_shape=("B", 16), output_shape=("B", 10))
        best = min(best, time.perf_counter() - start)
    assert plan.nodes[-1].args["out_features"] == 10
    assert plan.nodes[-1].provenance["out_features"] == "inferred"
    return best


def test_ten_thousand_node_chain_resolves_in_linear_time():
    small = _best_of(5, 1_000)
    large = _best_of(3, 10_000)
    print(
        f"\nresolve_callable: 1,000 nodes {small * 1e3:.1f} ms ({small / 1_000 * 1e6:.1f} us/node); "
        f"10,000 nodes {large * 1e3:.1f} ms ({large / 10_000 * 1e6:.1f} us/node); ratio {large / small:.2f}"
    )
    assert large < 1.0
    assert large / small <= 12
