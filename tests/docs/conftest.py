"""Headless Chromium for the site tests: a page's rendered state as data, and screenshots as pixels.

The site is served from a local ``http.server`` (same origin for the probe page, its frame and
the diagram files, which ``file://`` would keep apart). Chromium is the Debian ``chromium``
package; ``make test`` installs it when it is missing.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=15000")

#: Loads a page of the site in a frame, waits for its diagrams, and writes what it sees as JSON.
PROBE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<pre id="result">pending</pre>
<iframe id="page" style="width:1280px;height:2400px;border:0"></iframe>
<script>
const frame = document.getElementById("page");
frame.addEventListener("load", () => {
  const doc = frame.contentDocument;
  const objects = [...doc.querySelectorAll("object")];
  const ready = objects.map(o => (o.contentDocument && o.contentDocument.querySelector("svg"))
      ? Promise.resolve() : new Promise(done => o.addEventListener("load", done)));
  Promise.all(ready).then(() => {
    const diagrams = objects.map(o => {
      const box = o.getBoundingClientRect();
      const svg = o.contentDocument && o.contentDocument.querySelector("svg");
      return {width: box.width, height: box.height, x: box.left, y: box.top + frame.contentWindow.scrollY,
              svg: Boolean(svg), texts: svg ? [...svg.querySelectorAll("text")].map(t => t.textContent) : []};
    });
    const inline = [...doc.querySelectorAll("svg")].filter(s => s.getBoundingClientRect().width > 0).length;
    document.getElementById("result").textContent = JSON.stringify(
        {title: doc.title, diagrams, inline, text: doc.body.innerText});
  });
});
frame.src = new URLSearchParams(location.search).get("page");
</script></body></html>
"""


def chromium_program() -> str:
    program = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None)
    if program is None:
        pytest.fail("the site tests need headless Chromium: `make test` installs it "
                    "(or run `apt-get install -y chromium`)")
    return program


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output clean
        pass


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """``browser(root) -> server``: ``server.probe(page)`` (what the page shows, as a dict) and
    ``server.screenshot(page, path)`` (the PNG written to ``path``, decoded)."""
    program = chromium_program()
    servers = []

    def start(root: Path) -> SimpleNamespace:
        (root / "_probe.html").write_text(PROBE, encoding="utf-8")
        handler = functools.partial(_QuietHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        base = f"http://127.0.0.1:{server.server_address[1]}"

        def run(*arguments: str) -> subprocess.CompletedProcess:
            with tempfile.TemporaryDirectory(dir=tmp_path_factory.getbasetemp()) as profile:
                return subprocess.run([program, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments],
                                      capture_output=True, text=True, timeout=90)

        def probe(page: str) -> dict:
            done = run("--dump-dom", f"{base}/_probe.html?page=/{page}")
            found = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
            assert found and found[1] != "pending", f"Chromium did not report on {page}:\n{done.stderr[-2000:]}"
            return json.loads(html.unescape(found[1]))

        def screenshot(page: str, target: Path, size: tuple[int, int] = (1280, 1400)) -> SimpleNamespace:
            """``page`` drawn at half scale (fewer pixels to decode) into ``target``; its pixels."""
            done = run(f"--screenshot={target}", f"--window-size={size[0]},{size[1]}",
                       "--force-device-scale-factor=0.5", f"{base}/{page}")
            assert target.is_file(), f"Chromium wrote no screenshot of {page}:\n{done.stderr[-2000:]}"
            width, height, rows = png_rgb(target.read_bytes())
            step = len(rows[0]) // width
            return SimpleNamespace(path=target, width=width, height=height, rows=rows, step=step,
                                   count=lambda rgb: count_colour(rows, width, rgb, step))

        return SimpleNamespace(probe=probe, screenshot=screenshot)

    yield start
    for server in servers:
        server.shutdown()


def png_rgb(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered RGB(A) rows of an 8-bit PNG (what a screenshot writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, header, compressed = 8, None, b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset:offset + 4])
        kind, body = data[offset + 4:offset + 8], data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed += body
        offset += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6), f"unexpected PNG format (depth {depth}, colour type {colour})"
    step = 3 if colour == 2 else 4
    raw, stride, rows, previous = zlib.decompress(compressed), width * step, [], bytes(width * step)
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                nearest = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
                line[i] = (line[i] + nearest[2]) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def count_colour(rows: list[bytes], width: int, rgb: tuple[int, int, int], step: int) -> int:
    """Pixels of exactly ``rgb``."""
    target = bytes(rgb)
    return sum(1 for row in rows for x in range(width) if row[x * step:x * step + 3] == target)
