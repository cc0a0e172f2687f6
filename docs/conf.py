"""Sphinx configuration for the HNDL documentation site.

The operator catalog is not read from ``docs/operators`` (the checked-in output of
``python -m hndl.docs``): the ``hndl.sphinx`` extension regenerates it at build time, with
the same generator, for every pack installed in the environment.
"""

from importlib import metadata

project = "HNDL"
author = "The HNDL authors"
copyright = "the HNDL authors"
release = metadata.version("hndl")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.graphviz",
    "hndl.sphinx",
]

root_doc = "index"
source_suffix = {".md": "markdown"}
# docs/operators is the same catalog checked in for reading on the forge; the site renders the
# copy hndl.sphinx generates under _generated/ so that every installed pack appears.
exclude_patterns = ["_build", "operators"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Diagrams ({graphviz} DOT blocks, plan diagrams) are drawn to SVG files when the site is built,
# by the graphviz-pure wheel HNDL depends on (hndl.sphinx points graphviz_dot at it; a system
# `dot` is the fallback): no network and no JavaScript when a page is read.
graphviz_output_format = "svg"

# The API reference documents exactly the public names, in source order.
autodoc_member_order = "bysource"
autodoc_default_options = {"exclude-members": "__init__, __new__"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# hndl.sphinx: where the build-time catalog goes (git-ignored) and which packs it documents
# (None: every pack installed in this environment).
hndl_catalog_dir = "_generated/operators"
hndl_catalog_packs = None

html_theme = "furo"
html_title = f"HNDL {release}"
html_static_path = ["_static"]
html_css_files = ["hndl.css"]

