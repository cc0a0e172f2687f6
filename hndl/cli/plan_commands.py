"""``hndl diff A.json B.json``: compare two saved plans, like diff(1) (0 same, 1 different, 2 trouble)."""

from __future__ import annotations

import argparse

from ..persist import read_plan_file
from ..plan import ResolvedPlan
from .options import DEFAULT_PACKS, add_packs_option, registry


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "diff", help="compare two saved plans (exit 0 identical, 1 different, 2 error)",
        description="Load two plans saved by `hndl resolve --save` (or ResolvedPlan.to_json), verify them "
        "against the registry, and print every node and field that differs with the origin of both values. "
        "Exit status: 0 identical, 1 different, 2 error.",
    )
    parser.add_argument("first", metavar="A.json", help="the plan before")
    parser.add_argument("second", metavar="B.json", help="the plan after")
    add_packs_option(parser, DEFAULT_PACKS)
    parser.set_defaults(run=run_diff)


def load_plan(path: str, packs) -> ResolvedPlan:
    return ResolvedPlan.from_json(read_plan_file(path), registry=packs)


def run_diff(options: argparse.Namespace) -> int:
    packs = registry(options.packs)
    first = load_plan(options.first, packs)
    second = load_plan(options.second, packs)
    changes = first.diff(second)
    if not changes:
        print("identical")
        print(f"{options.first}: {first.semantic_digest}")
        print(f"{options.second}: {second.semantic_digest}")
        return 0
    print(f"--- {options.first}  {first.semantic_digest}")
    print(f"+++ {options.second}  {second.semantic_digest}")
    for change in changes:
        print(change)
    print(f"{len(changes)} difference{'s' if len(changes) != 1 else ''}")
    return 1
