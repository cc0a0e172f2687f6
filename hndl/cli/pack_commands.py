"""``hndl packs`` (every installed pack and its operators) and ``hndl catalog ALIAS`` (one page)."""

from __future__ import annotations

import argparse
import difflib
import sys

from ..docs.catalog import all_packs, example_registry, operator_page
from ..errors import HNDLError
from ..packs import installed_packs
from ..registry import Registry
from .options import DEFAULT_PACKS, add_packs_option, pack_names


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "packs", help="list the installed operator packs and their operators",
        description="List every operator pack installed in this environment (entry points in the "
        "hndl.packs group), one section per pack: each operator's alias, identity@version and summary.",
    )
    parser.set_defaults(run=run_packs)

    parser = commands.add_parser(
        "catalog", help="print one operator's catalog page (Markdown)",
        description="Print the catalog page of the operator ALIAS: the same Markdown `python -m hndl.docs` "
        "generates from its declaration (ports, arguments, policies, resolved examples).",
    )
    parser.add_argument("alias", metavar="ALIAS", help="operator alias such as linear or conv")
    add_packs_option(parser, DEFAULT_PACKS)
    parser.set_defaults(run=run_catalog)


def run_packs(options: argparse.Namespace) -> int:
    installed = installed_packs()
    status = 0
    sections = []
    for name in all_packs():
        try:
            specs = list(Registry.from_packs(name))
        except HNDLError as error:
            print(f"pack {name}: {error}", file=sys.stderr)
            status = 2
            continue
        sections.append(_section(name, installed[name], specs))
    if not installed:
        print("no operator packs are installed (entry-point group hndl.packs)")
    print("\n\n".join(sections))
    return status


def _section(name: str, entry, specs) -> str:
    dist = getattr(entry, "dist", None)
    origin = f"{dist.name} {dist.version}, " if dist is not None else ""
    count = f"{len(specs)} operator{'s' if len(specs) != 1 else ''}"
    lines = [f"{name}  ({origin}module {entry.value}, {count})"]
    if not specs:
        lines.append("  (this pack registers no operators)")
    rows = [(spec.alias, spec.qualified, spec.summary) for spec in specs]
    alias_width = max((len(row[0]) for row in rows), default=0)
    identity_width = max((len(row[1]) for row in rows), default=0)
    for alias, identity, summary in rows:
        lines.append(f"  {alias.ljust(alias_width)}  {identity.ljust(identity_width)}  {summary}".rstrip())
    return "\n".join(lines)


def run_catalog(options: argparse.Namespace) -> int:
    packs = pack_names(options.packs) or all_packs()
    known = []
    for pack in packs:
        for spec in Registry.from_packs(pack):
            if spec.alias == options.alias:
                sys.stdout.write(operator_page(spec, pack, example_registry(packs)))
                return 0
            known.append(spec.alias)
    close = difflib.get_close_matches(options.alias, known, n=3)
    remedies = [f"Did you mean {', '.join(close)}?"] if close else []
    remedies.append("Run `hndl packs` to list every operator, or opt its pack in with --packs.")
    raise HNDLError(
        "E_OPERATOR",
        f"no operator {options.alias!r} in the packs {', '.join(packs)}",
        remedies=remedies,
    )
