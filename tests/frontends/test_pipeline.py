"""The public entry points hand every plan through one savability check (§10; issue 15, item 18).

A plan that resolves can always be saved and restored: ``resolve``, ``resolve_file`` and
``resolve_callable`` refuse, at resolution, a plan whose saved form would pass the 16 MiB plan
bound. The check lives in the pipeline, not in the resolver, so the resolver never imports
persistence (persist -> revalidate -> resolver would close a circle).
"""

from __future__ import annotations

import ast
import inspect

import pytest
from torch import nn

import hndl
from hndl import Arg, HNDLError
from hndl.persist import MAX_PLAN_BYTES
from hndl.resolve import resolver

CONTRACT = {"input_shape": ("B", 8), "output_shape": ("B", 8)}


@pytest.fixture(scope="module")
def registry():
    """An identity whose default tag is the longest text an argument may hold (16 KiB), so a
    few characters of source per call add 16 KB to the plan."""
    registry = hndl.Registry.from_packs("basic")

    @registry.operator("tag", summary="Identity carrying a long default tag.", category="test",
                       shape="x[B, ...] -> out[B, ...]", args={"tag": Arg(str, "t" * 16_000, help="Free text.")})
    class Tag(nn.Identity):
        """Passes its input through."""

        def __init__(self, *, tag: str) -> None:
            super().__init__()

    return registry


def _refused(call) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        call()
    error = caught.value
    assert error.code == "E_RESOURCE"
    assert "MAX_PLAN_BYTES" in error.message and "16 MiB" in error.message and error.remedies
    return error


def test_every_entry_point_refuses_a_plan_too_large_to_save(registry, tmp_path):
    source = "tag()\n" * 1_100  # 6.6 KB of source, 1,100 x 16 KB of plan
    path = tmp_path / "tags.hndl"
    path.write_text(source, encoding="utf-8")

    def graph(x):
        for _ in range(1_100):
            registry.ops.tag()

    _refused(lambda: hndl.resolve(source, **CONTRACT, registry=registry))
    _refused(lambda: hndl.resolve_file(path, **CONTRACT, registry=registry))
    _refused(lambda: hndl.resolve_callable(graph, **CONTRACT, registry=registry))
    plan = hndl.resolve("tag()\n" * 900, **CONTRACT, registry=registry)
    assert len(plan.to_json().encode("utf-8")) <= MAX_PLAN_BYTES


def test_the_resolver_does_not_import_persistence():
    tree = ast.parse(inspect.getsource(resolver))
    imported = set()
    for statement in ast.walk(tree):
        if isinstance(statement, ast.ImportFrom):
            imported.add(("." * statement.level) + (statement.module or ""))
        elif isinstance(statement, ast.Import):
            imported.update(alias.name for alias in statement.names)
    assert not any(name.endswith("persist") for name in imported), sorted(imported)
