"""``python -m hndl.docs [--check] [--output DIR] [--packs a,b]``: write or verify the catalog."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from .catalog import catalog_pages, default_packs
from ..packs import split_pack_names
from .files import stale_pages, write_pages

DEFAULT_OUTPUT = Path("docs") / "operators"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hndl.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when a page is stale instead of writing")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="catalog directory (docs/operators)")
    parser.add_argument("--packs", help="comma-separated packs (default: the installed first-party packs)")
    options = parser.parse_args(argv)
    packs = split_pack_names(options.packs) if options.packs else default_packs()
    pages = catalog_pages(packs)
    if options.check:
        problems = stale_pages(pages, options.output)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("the catalog is out of date: run `python -m hndl.docs`", file=sys.stderr)
            return 1
        print(f"{len(pages)} catalog pages are current")
        return 0
    write_pages(pages, options.output)
    print(f"wrote {len(pages)} catalog pages to {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
