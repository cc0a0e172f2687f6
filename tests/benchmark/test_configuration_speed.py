"""Configuration through the isolated parser worker stays cheap (frontends issue):
the §7 MLP resolves from source in at most 5 ms median after the first call, and a
1,000-line configuration is parsed, validated and resolved in at most 300 ms.

Run with ``pytest -m benchmark tests/benchmark -s`` to see the figures.
"""

import statistics
import time

import pytest

import hndl
from hndl.frontends.config import worker

pytestmark = pytest.mark.benchmark

MLP = "linear(64)\nrelu()\nlinear()\n"


def _timed(source, **contract):
    start = time.perf_counter()
    hndl.resolve(source, **contract)
    return time.perf_counter() - start


def test_the_mlp_resolves_from_source_in_a_few_milliseconds():
    assert worker.current().mode == "process"
    worker.configure()  # a fresh worker, so the first call includes its start
    contract = {"input_shape": ("B", 128), "output_shape": ("B", 10)}
    first = _timed(MLP, **contract)
    later = [_timed(MLP, **contract) for _ in range(50)]
    median = statistics.median(later)
    print(f"\nMLP from source: first call {first * 1e3:.1f} ms, then median {median * 1e3:.2f} ms "
          f"(min {min(later) * 1e3:.2f} ms)")
    assert median <= 0.005


def test_a_thousand_line_configuration_resolves_in_300_ms():
    source = "linear(64)\nrelu()\n" * 500
    contract = {"input_shape": ("B", 32), "output_shape": ("B", 64)}
    _timed(MLP, input_shape=("B", 128), output_shape=("B", 10))  # worker warm
    timings = [_timed(source, **contract) for _ in range(5)]
    best, median = min(timings), statistics.median(timings)
    print(f"\n1,000-line configuration: median {median * 1e3:.1f} ms (best {best * 1e3:.1f} ms)")
    assert median <= 0.300
