"""hndl.drawing.graphviz: the bundled graphviz-pure (or a system dot) turns DOT into SVG and PNG bytes."""

from __future__ import annotations

import os
import struct
import sys
import zlib

import pytest

from hndl import HNDLError
from hndl.drawing.graphviz import (
    INSTALL_REMEDY, PREFERRED_PROGRAM, graphviz_program, interpreter_scripts, render,
)

DOT = 'digraph plan { "node:n0" [shape=box, label=<<b>n0</b>: linear>]; "node:n0" -> "output:y" [label="[B, 10]"]; }\n'


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed scanlines of a PNG (enough to see it is not blank)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, {}
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset:offset + 4]), data[offset + 4:offset + 8]
        chunks.setdefault(kind, []).append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][0][:8])
    return width, height, zlib.decompress(b"".join(chunks[b"IDAT"]))


def test_the_bundled_program_is_found_beside_this_python_without_path():
    program = graphviz_program(path=os.devnull)  # PATH holds nothing: the interpreter's scripts folder does
    assert os.path.basename(program) == PREFERRED_PROGRAM
    assert os.path.dirname(program) in interpreter_scripts()
    assert os.path.dirname(sys.executable) in interpreter_scripts()


def test_a_system_dot_is_the_fallback(tmp_path):
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    fake.chmod(0o755)
    assert graphviz_program(path=str(tmp_path), scripts=()) == str(fake)


def test_no_graphviz_at_all_names_the_fix(tmp_path):
    with pytest.raises(HNDLError) as caught:
        graphviz_program(path=str(tmp_path), scripts=())
    assert caught.value.code == "E_RUNTIME"
    assert "neither 'graphviz-pure' nor 'dot' is installed" in str(caught.value)
    assert INSTALL_REMEDY in caught.value.remedies and "pip install graphviz-pure" in INSTALL_REMEDY


def test_svg_bytes():
    svg = render(DOT, "svg").decode("utf-8")
    assert "<svg" in svg and "</svg>" in svg
    assert ">n0</text>" in svg and ">[B, 10]</text>" in svg


def test_the_same_bytes_every_time():
    assert render(DOT, "svg") == render(DOT, "svg")


def test_png_bytes_with_ink():
    width, height, rows = png_pixels(render(DOT, "png"))
    assert width > 20 and height > 40
    assert len(set(rows)) > 2  # more than one colour: the boxes and text are drawn


def test_an_unknown_format_is_refused():
    with pytest.raises(HNDLError) as caught:
        render(DOT, "gif")
    assert caught.value.code == "E_SCHEMA" and "svg, png" in caught.value.remedies[0]


def test_a_failing_program_reports_its_message(tmp_path):
    failing = tmp_path / "dot"
    failing.write_text("#!/bin/sh\necho 'Error: <stdin>: syntax error in line 1' >&2\nexit 1\n", encoding="utf-8")
    failing.chmod(0o755)
    with pytest.raises(HNDLError) as caught:
        render(DOT, "svg", program=str(failing))
    assert caught.value.code == "E_RUNTIME"
    assert "failed to draw the plan: Error: <stdin>: syntax error in line 1" in str(caught.value)


def test_invalid_dot_is_reported_by_the_real_program():
    with pytest.raises(HNDLError) as caught:
        render("digraph {", "svg")
    assert caught.value.code == "E_RUNTIME" and "syntax error" in str(caught.value)


def test_a_program_that_hangs_is_stopped(tmp_path):
    slow = tmp_path / "dot"
    slow.write_text("#!/bin/sh\nexec sleep 30\n", encoding="utf-8")
    slow.chmod(0o755)
    with pytest.raises(HNDLError) as caught:
        render(DOT, "svg", program=str(slow), timeout=0.5)
    assert caught.value.code == "E_RESOURCE" and "longer than 0.5 s" in str(caught.value)
