"""Plans drawn as pictures: DOT text for a plan, Graphviz rendering to SVG/PNG, notebook HTML.

Nothing here imports :mod:`hndl.plan`: the plan's own ``_repr_html_`` draws itself with these
modules, which read a plan's public fields (``inputs``, ``nodes``, ``outputs``) only.
"""
