"""``hndl resolve``, ``hndl explain`` and ``hndl graph``: resolve a spec, then show the plan."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..docs.diagram import mermaid
from ..drawing.dot import plan_dot
from ..drawing.draw import draw_plan
from ..drawing.graphviz import graphviz_program
from ..plan import shape_table
from .options import Failure, add_contract_options, resolve_spec, write_bytes, write_text

GRAPH_FORMATS = (".mmd", ".dot", ".svg", ".png")
#: The formats Graphviz draws (graphviz-pure, a dependency, or a system `dot`).
RENDERED = (".svg", ".png")

_CONTRACT_EXAMPLES = """\
shape syntax:
  A shape is comma-separated: the batch symbol (e.g. B) first, then positive integers.
  One unnamed shape is the single input x / output; NAME=SHAPE, repeated, declares named ports:
    --input-shape image=B,3,64,64 --input-shape labels=B,10 --output-shape score=B,1
"""


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "resolve", help="resolve a spec against contracts and print its shape table",
        description="Resolve SPEC against the tensor contracts and print the plan's shape table.",
        epilog=_CONTRACT_EXAMPLES + "example:\n  hndl resolve mlp.hndl --input-shape B,128 --output-shape B,10"
        " --save plan.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_contract_options(parser)
    parser.add_argument("--save", metavar="PLAN.json", help="also write the plan as JSON (ResolvedPlan.to_json)")
    parser.set_defaults(run=run_resolve)

    parser = commands.add_parser(
        "explain", help="resolve a spec and print plan.describe(): where every value came from",
        description="Resolve SPEC and print plan.describe(): the shape table, the semantic digest and, "
        "per node, each argument's value, origin and derivation plus initialization and trainability.",
        epilog=_CONTRACT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_contract_options(parser)
    parser.set_defaults(run=run_explain)

    parser = commands.add_parser(
        "graph", help="resolve a spec and draw its graph (.svg, .png, .mmd Mermaid, .dot Graphviz)",
        description="Resolve SPEC and draw the plan top-down: named inputs, one box per node with its "
        "operator and output shapes, named outputs, edges labelled with resolved shapes. The format follows "
        "the -o suffix: .svg or .png (drawn by the bundled graphviz-pure, else a system Graphviz `dot`), "
        ".dot (Graphviz DOT text), .mmd (Mermaid text); -o - prints Mermaid to stdout.",
        epilog=_CONTRACT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_contract_options(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="out.svg, out.png, out.mmd, out.dot, or - for Mermaid on stdout")
    parser.set_defaults(run=run_graph)


def run_resolve(options: argparse.Namespace) -> int:
    plan = resolve_spec(options)
    if options.save:  # saved before anything is printed, so a failed save prints no table
        write_text(options.save, plan.to_json())
    print(shape_table(plan))
    if options.save:
        print(f"saved plan to {options.save} ({plan.semantic_digest})")
    return 0


def run_explain(options: argparse.Namespace) -> int:
    print(resolve_spec(options).describe())
    return 0


def run_graph(options: argparse.Namespace) -> int:
    target = options.output
    suffix = Path(target).suffix.lower()
    if target != "-" and suffix not in GRAPH_FORMATS:
        raise Failure(f"cannot tell the graph format of {target!r}: use a .svg, .png, .mmd or .dot file, "
                      "or - for stdout")
    # Located before resolving, so a missing Graphviz is reported without any other work.
    program = graphviz_program() if suffix in RENDERED else None
    plan = resolve_spec(options)
    if target == "-":
        print(mermaid(plan))
    elif suffix == ".mmd":
        write_text(target, mermaid(plan) + "\n")
    elif suffix == ".dot":
        write_text(target, plan_dot(plan))
    else:
        write_bytes(target, draw_plan(plan, suffix[1:], program=program))
    return 0
