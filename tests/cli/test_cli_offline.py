"""Offline is the default (issue 29, item 5): with HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE unset and
the Hub unreachable, `hndl resolve` of an uncached hf:// source is E_PRETRAINED at once, without a
network request or huggingface_hub's retries, and names the opt-in (HNDL_PRETRAINED_DOWNLOAD=1).

Nothing here reaches the internet: HF_ENDPOINT points at a closed loopback port and HF_HOME at an
empty directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

HUB_SPEC = "pretrained('hf://acme/tiny')\n"
CONTRACT = ("--input-shape", "B,8", "--input-dtype", "int64", "--output-shape", "B,8,32")
#: Seconds the refusal may take once the command has loaded its packs. Measured: 0.11-0.22 s
#: (before issue 29: 23.5 s of huggingface_hub retrying a refused connection).
REFUSAL_BOUND_S = 5.0


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released), so a connection is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _hub_unreachable(tmp_path: Path) -> dict:
    """The environment with the offline variables unset, the Hub at a closed port and an empty cache."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HNDL_PRETRAINED_DOWNLOAD")}
    environment.update(HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", HF_HOME=str(tmp_path / "hf-home"),
                       PYTHONNOUSERSITE="1")
    return environment


def test_an_uncached_hub_source_is_e_pretrained_without_touching_the_network(tmp_path):
    """`echo "pretrained('hf://acme/tiny')" | hndl resolve - ...`, offline variables unset."""
    script = Path(sys.executable).parent / ("hndl.exe" if os.name == "nt" else "hndl")
    done = subprocess.run([str(script), "resolve", "-", *CONTRACT], input=HUB_SPEC, capture_output=True, text=True,
                          cwd=tmp_path, env=_hub_unreachable(tmp_path), timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("E_PRETRAINED (node n0; field source"), done.stderr
    assert "downloads are off" in done.stderr and "HNDL_PRETRAINED_DOWNLOAD=1" in done.stderr
    assert "Connection refused" not in done.stderr and "requesting HEAD" not in done.stderr  # no request was made


_TIMED_RESOLUTION = textwrap.dedent("""
    import contextlib, io, sys, time
    from hndl.cli import main

    linear, hub, contract = sys.argv[1], sys.argv[2], sys.argv[3:]
    with contextlib.redirect_stdout(io.StringIO()):  # loads every installed pack once
        assert main(["resolve", linear, "--input-shape", "B,8", "--output-shape", "B,4"]) == 0
    errors = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(errors):
        status = main(["resolve", hub, *contract])
    print(status, time.perf_counter() - started, errors.getvalue().split(" ")[0])
""")


def test_the_refusal_is_immediate_once_the_packs_are_loaded(tmp_path):
    """The time from the command's start on a loaded interpreter to its E_PRETRAINED answer."""
    (tmp_path / "linear.hndl").write_text("linear(4)\n", encoding="utf-8")
    (tmp_path / "hub.hndl").write_text(HUB_SPEC, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", _TIMED_RESOLUTION, "linear.hndl", "hub.hndl", *CONTRACT],
                          capture_output=True, text=True, cwd=tmp_path, env=_hub_unreachable(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    status, seconds, code = done.stdout.split()[-3:]
    assert (status, code) == ("2", "E_PRETRAINED")
    assert float(seconds) < REFUSAL_BOUND_S
