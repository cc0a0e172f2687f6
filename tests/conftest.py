"""Fixtures shared by the core's tests."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

from hndl.frontends.config import worker

#: Idle, the parser worker maps about 25 MiB; CPython's tree for a 1 MiB list literal takes ~500 MiB.
_PARSING_KIB = 150 * 1024
#: Growth past the idle size that shows the worker has started parsing the request.
_STARTED_KIB = 16 * 1024
#: Rounds before giving up: each repeats only when the watcher first ran after the parse had ended.
_ROUNDS = 8


@dataclass
class KilledRound:
    """One request during which the parser worker was killed mid-parse."""

    outcome: Any  # what ``send`` returned or raised
    pid: int  # the killed worker's
    beside: Any  # what ``while_parsing`` returned
    seconds: float  # how long ``send`` took, kill included


def _rss_kib(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return None


def _one_round(send: Callable[[], Any], while_parsing: Callable[[], Any]) -> tuple[Optional[KilledRound], Any]:
    worker_pid = worker._worker.process.pid
    idle = _rss_kib(worker_pid)
    started, answered, killed = threading.Event(), threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    def watch():
        while not answered.is_set():
            rss = _rss_kib(worker_pid)
            if rss is None:
                return
            if rss > idle + _STARTED_KIB:
                started.set()
            if rss > _PARSING_KIB:
                os.kill(worker_pid, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.002)

    def request():
        begun = time.perf_counter()
        try:
            result["outcome"] = send()
        except BaseException as error:  # the caller asserts on it
            result["outcome"] = error
        finally:
            result["seconds"] = time.perf_counter() - begun
            answered.set()
            started.set()

    watcher, sender = threading.Thread(target=watch), threading.Thread(target=request)
    watcher.start()
    sender.start()
    assert started.wait(timeout=120), "the parser worker never started on the request"
    beside = while_parsing()
    sender.join(timeout=120)
    watcher.join(timeout=120)
    assert not sender.is_alive() and not watcher.is_alive(), "the request or its watcher hung"
    if not killed.is_set():
        return None, result["outcome"]
    return KilledRound(outcome=result["outcome"], pid=worker_pid, beside=beside, seconds=result["seconds"]), result["outcome"]


@pytest.fixture
def kill_worker_mid_parse():
    """``kill(start, send, while_parsing=None) -> KilledRound``: SIGKILL the parser worker while it parses.

    ``start()`` leaves a live worker; ``send()`` makes the request that grows it (the caller's 1 MiB
    bomb). A watcher kills the worker once it maps more than 150 MiB, which it reaches only while
    parsing that request. ``while_parsing()`` runs once the worker is seen parsing, so whatever it
    starts is queued behind the doomed request. On a loaded machine the watcher may first run after the
    parse has ended; such a round proves nothing and is repeated, so the test never depends on luck.
    """

    def kill(start: Callable[[], Any], send: Callable[[], Any],
             while_parsing: Callable[[], Any] = lambda: None) -> KilledRound:
        outcomes = []
        for _ in range(_ROUNDS):
            start()
            round_, outcome = _one_round(send, while_parsing)
            if round_ is not None:
                return round_
            outcomes.append(outcome)
        pytest.fail(f"the worker finished parsing before the watcher saw it in {_ROUNDS} rounds: {outcomes!r}")

    return kill
