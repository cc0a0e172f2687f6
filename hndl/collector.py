"""Pause Python's cyclic garbage collector around allocation-heavy, cycle-free work.

Resolving, saving and restoring large plans allocate many small records that never form
cycles; generational collections over them make the work superlinear. Pausing the collector
for the duration (and restoring its previous state) keeps these paths linear.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
