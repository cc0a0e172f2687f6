"""Sphinx extension: the operator catalog of every installed pack, plus live plans and errors.

Add ``"hndl.sphinx"`` to ``extensions`` in ``conf.py``.

**The catalog.** When the builder starts, the extension renders the catalog with
:func:`hndl.docs.catalog.catalog_pages`, the generator behind ``python -m hndl.docs``, for
every pack registered under the ``hndl.packs`` entry-point group (or for
``hndl_catalog_packs`` when set), and writes the pages under ``hndl_catalog_dir`` (default
``_generated/operators``) in the source directory. Only changed pages are rewritten and pages
of packs no longer installed are removed, so incremental builds stay incremental. Include
``<hndl_catalog_dir>/index`` in a toctree: when Sphinx reads the index and each pack's page,
the extension appends a hidden toctree (:func:`hndl.docs.catalog.catalog_toctrees`), so the
navigation groups operators by pack and a newly installed third-party pack appears in it
without editing any page. The files on disk stay byte-for-byte what ``python -m hndl.docs``
writes.

**Diagrams.** Plan diagrams are Graphviz DOT (``{graphviz}`` blocks), drawn when the site is
built: the extension loads ``sphinx.ext.graphviz`` and, when ``graphviz_dot`` is left at its
default, points it at the program :func:`hndl.drawing.graphviz.graphviz_program` finds (the
``graphviz-pure`` wheel HNDL depends on, else a system ``dot``). Set
``graphviz_output_format = "svg"`` for vector pictures; nothing is fetched when a page is read.

**Worked examples.** ``hndl-plan`` resolves its content (configuration text) at build time and
shows the source, the resolved shape table and a diagram of the plan::

    ```{hndl-plan}
    :input-shape: ("B", 128)
    :output-shape: ("B", 10)

    linear(64)
    relu()
    linear()
    ```

Options take Python literals: ``input-shape`` and ``output-shape`` (required), ``input-dtype``,
``dtype`` and ``packs`` (comma-separated; default: every installed first-party pack).

**Errors.** ``hndl-error CODE`` runs its content (trusted Python from the documentation itself)
and shows it with the text of the :class:`~hndl.HNDLError` it raises. The build fails unless
the code raises an ``HNDLError`` with exactly that code, so the page can only show what ships.
"""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.ext.graphviz import Graphviz
from sphinx.util.docutils import SphinxDirective

from .docs.catalog import all_packs, catalog_pages, catalog_toctrees, diagram_alt
from .docs.files import write_pages
from .drawing.dot import plan_dot
from .drawing.graphviz import graphviz_program
from .errors import CODES, HNDLError
from .frontends.pipeline import resolve
from .packs import split_pack_names
from .plan import shape_table
from .registry import Registry

__all__ = ["setup", "generate_catalog", "PlanDirective", "ErrorDirective"]

DEFAULT_DIRECTORY = "_generated/operators"


# -- the catalog ----------------------------------------------------------------------------------------
def _directory(app: Any) -> PurePosixPath:
    directory = PurePosixPath(app.config.hndl_catalog_dir)
    if directory.is_absolute() or ".." in directory.parts:
        raise ValueError(f"hndl_catalog_dir must be relative to the documentation sources, not {directory}")
    return directory


def generate_catalog(app: Any) -> None:
    """``builder-inited``: write the catalog pages of the configured (default: all installed) packs."""
    packs = app.config.hndl_catalog_packs
    packs = tuple(packs) if packs is not None else all_packs()
    pages = catalog_pages(packs)
    write_pages(pages, Path(app.srcdir) / _directory(app))
    app.hndl_catalog_pages = tuple(pages)


def _catalog_toctree(app: Any, docname: str, source: list[str]) -> None:
    """``source-read``: give the catalog index a hidden toctree over the pack pages, and each pack
    page one over its operators, so the navigation reads catalog -> pack -> operator."""
    directory = _directory(app)
    if not PurePosixPath(docname).is_relative_to(directory):
        return
    document = PurePosixPath(docname).relative_to(directory).as_posix()
    entries = catalog_toctrees(getattr(app, "hndl_catalog_pages", ())).get(document)
    if entries:
        listed = "\n".join(entries)
        source[0] = source[0].rstrip("\n") + f"\n\n```{{toctree}}\n:hidden:\n:titlesonly:\n\n{listed}\n```\n"


def _locate_graphviz(app: Any, config: Any) -> None:
    """``config-inited``: a ``graphviz_dot`` left at its default becomes the located program, so
    the site draws with the graphviz-pure wheel on a machine without system Graphviz."""
    if config.graphviz_dot == "dot":
        config.graphviz_dot = graphviz_program()


# -- directives -----------------------------------------------------------------------------------------
def _literal(text: str, language: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = language
    return block


class PlanDirective(SphinxDirective):
    """``hndl-plan``: resolve configuration text at build time; show source, shape table and diagram."""

    has_content = True
    option_spec = {
        "input-shape": directives.unchanged_required,
        "output-shape": directives.unchanged_required,
        "input-dtype": directives.unchanged,
        "dtype": directives.unchanged,
        "packs": directives.unchanged,
    }

    def _literal_option(self, name: str, default: Any = None) -> Any:
        if name not in self.options:
            if default is ...:
                raise self.error(f"hndl-plan needs the :{name}: option")
            return default
        try:
            return ast.literal_eval(self.options[name])
        except (ValueError, SyntaxError) as error:
            raise self.error(f"hndl-plan :{name}: must be a Python literal: {error}") from error

    def run(self) -> list[nodes.Node]:
        source = "\n".join(self.content)
        packs = split_pack_names(self.options.get("packs", ""))
        try:
            registry = Registry.from_packs(*packs) if packs else Registry.builtins()
            plan = resolve(source, input_shape=self._literal_option("input-shape", ...),
                           output_shape=self._literal_option("output-shape", ...),
                           dtype=self._literal_option("dtype", "float32"),
                           input_dtype=self._literal_option("input-dtype"), registry=registry)
        except HNDLError as error:
            raise self.error(f"hndl-plan does not resolve:\n{error}") from error
        diagram = Graphviz("graphviz", [], {"alt": diagram_alt(plan)}, plan_dot(plan).splitlines(), self.lineno,
                           self.content_offset, self.block_text, self.state, self.state_machine).run()
        return [_literal(source, "python"), _literal(shape_table(plan), "text"), *diagram]


class ErrorDirective(SphinxDirective):
    """``hndl-error CODE``: run the example; show it and the error, which must carry CODE."""

    has_content = True
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        expected = self.arguments[0]
        if expected not in CODES:
            raise self.error(f"hndl-error: {expected!r} is not in the error catalog (hndl.errors.CODES)")
        code = "\n".join(self.content)
        try:
            exec(compile(code, f"<{self.env.docname}: {expected} example>", "exec"), {"__name__": "__hndl_example__"})
        except HNDLError as error:
            if error.code != expected:
                raise self.error(f"hndl-error: the {expected} example raised {error.code}:\n{error}") from error
            blocks = [_literal(code, "python"), _literal(f"hndl.errors.HNDLError: {error}", "text")]
            for block in blocks:  # hndl.css wraps these long lines instead of scrolling them
                block["classes"].append("hndl-error")
            return blocks
        except Exception as error:
            raise self.error(f"hndl-error: the {expected} example raised {type(error).__name__}: {error}") from error
        raise self.error(f"hndl-error: the {expected} example raised nothing")


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("hndl_catalog_dir", DEFAULT_DIRECTORY, "env", types=(str,))
    app.add_config_value("hndl_catalog_packs", None, "env")
    app.setup_extension("sphinx.ext.graphviz")
    app.connect("config-inited", _locate_graphviz)
    app.connect("builder-inited", generate_catalog)
    app.connect("source-read", _catalog_toctree)
    app.add_directive("hndl-plan", PlanDirective)
    app.add_directive("hndl-error", ErrorDirective)
    from . import __version__

    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True}
