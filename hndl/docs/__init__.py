"""The operator catalog, generated from the declarations (§6): ``python -m hndl.docs``.

One generator (:func:`hndl.docs.catalog.catalog_pages`) renders every page; the command
writes or checks ``docs/operators/`` and the Sphinx site renders the same pages, so the
published argument schema cannot drift from the code.
"""
