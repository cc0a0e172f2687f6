"""Fixtures the side-by-side benchmarks share."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """Time on one intra-op thread, as the figures in IMPLEMENTATION.md are; restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
