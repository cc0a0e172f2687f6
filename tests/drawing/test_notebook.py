"""Jupyter display: a plan, a built Network and a GraphModule show the diagram above the shape table."""

from __future__ import annotations

import dataclasses
import html
import os
import subprocess
import time

import pytest

import hndl
import hndl.torch
from hndl.drawing import graphviz
from hndl.drawing.notebook import diagram_html, inline_svg
from hndl.plan import PlanNode, ResolvedPlan, shape_table
from hndl.torch.network import Network

SPEC = "linear(64)\nrelu()\nlinear()"


@pytest.fixture(scope="module")
def plan():
    return hndl.resolve(SPEC, input_shape=("B", 128), output_shape=("B", 10))


def _assert_diagram_then_table(text: str, plan) -> None:
    assert text.startswith('<div class="hndl-plan"><svg ')
    assert "<?xml" not in text and "<!DOCTYPE" not in text  # an HTML fragment, not a document
    svg_end = text.index("</svg>")
    table = f'<pre class="hndl-shape-table">{html.escape(shape_table(plan))}</pre>'
    assert text.index(table) > svg_end  # the picture above the table
    for node in plan.nodes:
        assert f">{node.id}</text>" in text and f">: {node.alias}</text>" in text.replace("&#45;", "-")
    (first,), (last,) = plan.inputs, plan.outputs
    shape = hndl.plan.format_shape
    assert f">{shape(first['shape'])} float32</text>" in text and f">{shape(last['shape'])}</text>" in text


def test_a_plan_displays_its_diagram_above_its_shape_table(plan):
    _assert_diagram_then_table(plan._repr_html_(), plan)


def test_a_built_network_displays_the_same(plan):
    model = hndl.torch.network(SPEC, input_shape=("B", 128), output_shape=("B", 10), device="cpu")
    assert isinstance(model, Network)
    assert model._repr_html_() == plan._repr_html_()
    _assert_diagram_then_table(model._repr_html_(), plan)


def test_a_graph_module_displays_the_same():
    plan = hndl.resolve("a = linear(x, 8)\nb = linear(x, 8)\ny = add(a, b)", input_shape={"x": ("B", 4)},
                        output_shape={"y": ("B", 8)})
    module = hndl.torch.build(plan, device="cpu")
    assert not isinstance(module, Network)
    _assert_diagram_then_table(module._repr_html_(), plan)


def test_when_drawing_fails_the_table_still_shows(plan):
    # A plan whose first node files its input shape under another port name: the table (which
    # reads a chain's shapes in order) still prints, the diagram (which looks shapes up by port) cannot.
    node = plan.nodes[0]
    (shape,) = node.input_shapes.values()
    broken_node = PlanNode(**{name: getattr(node, name) for name in PlanNode.__slots__ if name != "input_shapes"},
                           input_shapes={"elsewhere": shape})
    broken = ResolvedPlan(frontend=plan.frontend, batch=plan.batch, dtype=plan.dtype, inputs=plan.inputs,
                          outputs=plan.outputs, nodes=(broken_node, *plan.nodes[1:]))
    text = broken._repr_html_()
    assert text == f'<pre class="hndl-shape-table">{html.escape(shape_table(broken))}</pre>'


def test_graphviz_output_without_svg_is_refused():
    with pytest.raises(ValueError):
        inline_svg(b"<?xml version='1.0'?><html/>")


def test_diagram_html_escapes_the_table(plan):
    assert "&lt;tag&gt;" in diagram_html(plan, "<tag>")


# -- issue 29, item 6: a notebook never waits on a layout it cannot draw quickly --------------------------
def _branch_and_add(branches: int) -> str:
    """``branches`` ``relu(x)`` branches joined by a chain of ``add``s: a layout Graphviz needs minutes for."""
    lines = [f"r{index} = relu(x)" for index in range(branches)]
    lines += [f"s{index} = add({'r0' if index == 1 else f's{index - 1}'}, r{index})" for index in range(1, branches)]
    return "\n".join([*lines, f"y = relu(s{branches - 1})"])


#: Refusing reads the plan once (0.03 s at most measured on a loaded 2-core machine): 1 s is over 30x that.
TABLE_SECONDS = 1.0


def test_a_huge_plan_shows_its_table_without_running_graphviz(monkeypatch):
    plan = hndl.resolve(_branch_and_add(200), input_shape={"x": ("B", 4)}, output_shape={"y": ("B", 4)})
    started_processes = []
    real_popen = subprocess.Popen

    def recording(*args, **options):
        started_processes.append(args)
        return real_popen(*args, **options)

    monkeypatch.setattr(subprocess, "Popen", recording)
    started = time.perf_counter()
    text = plan._repr_html_()
    assert time.perf_counter() - started < TABLE_SECONDS
    assert text == f'<pre class="hndl-shape-table">{html.escape(shape_table(plan))}</pre>'
    assert started_processes == []


def test_a_renderer_that_hangs_shows_the_table_at_the_notebook_deadline(plan, tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    hanging = tmp_path / "dot"
    hanging.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\nexec sleep 60\n', encoding="utf-8")
    hanging.chmod(0o755)
    monkeypatch.setattr(graphviz, "graphviz_program", lambda: str(hanging))
    saved = graphviz.current()
    graphviz.configure(notebook_timeout_seconds=0.5)
    try:
        started = time.perf_counter()
        text = plan._repr_html_()
        elapsed = time.perf_counter() - started
    finally:
        graphviz.configure(**dataclasses.asdict(saved))
    assert text == f'<pre class="hndl-shape-table">{html.escape(shape_table(plan))}</pre>'
    assert elapsed < 0.5 + 10  # the deadline, then a kill and a wait (0.2 s at most measured)
    if pid_file.exists():  # started before its deadline: it must be gone now
        pid = int(pid_file.read_text(encoding="utf-8"))
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
