"""``hndl resolve``, ``hndl explain`` and ``hndl graph``: resolve a spec, then show the plan."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..docs.diagram import mermaid
from ..docs.dot import dot
from ..plan import shape_table
from .options import Failure, add_contract_options, resolve_spec, write_text

GRAPH_FORMATS = (".mmd", ".dot", ".svg")
#: How long Graphviz may take to lay out one plan.
DOT_TIMEOUT_SECONDS = 120

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
        "graph", help="resolve a spec and draw its graph (.svg, .mmd Mermaid, .dot Graphviz)",
        description="Resolve SPEC and draw the plan: one box per node, edges labelled with resolved shapes. "
        "The format follows the -o suffix: .mmd (Mermaid), .dot (Graphviz DOT), .svg (rendered by "
        "Graphviz `dot`, which must be installed); -o - prints Mermaid to stdout.",
        epilog=_CONTRACT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_contract_options(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="out.svg, out.mmd, out.dot, or - for Mermaid on stdout")
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
        raise Failure(f"cannot tell the graph format of {target!r}: use a .svg, .mmd or .dot file, or - for stdout")
    dot_program = shutil.which("dot") if suffix == ".svg" else None
    if suffix == ".svg" and dot_program is None:
        # Checked before resolving, so a missing tool is reported without any other work.
        raise Failure(
            "rendering .svg needs the Graphviz `dot` executable, which is not on PATH; install Graphviz "
            "(e.g. `apt-get install graphviz`), or write -o out.dot or -o out.mmd instead"
        )
    plan = resolve_spec(options)
    if target == "-":
        print(mermaid(plan))
    elif suffix == ".mmd":
        write_text(target, mermaid(plan) + "\n")
    elif suffix == ".dot":
        write_text(target, dot(plan))
    else:
        render_svg(dot_program, dot(plan), target)
    return 0


def render_svg(program: str, text: str, target: str) -> None:
    """Run ``dot -Tsvg`` into a temporary file beside ``target``, then move it into place."""
    folder = os.path.dirname(os.path.abspath(target))
    try:
        handle, partial = tempfile.mkstemp(suffix=".svg", dir=folder)
    except OSError as error:
        raise Failure(f"cannot write {target}: {error.strerror or error}") from None
    os.close(handle)
    try:
        try:
            done = subprocess.run([program, "-Tsvg", "-o", partial], input=text, text=True,
                                  capture_output=True, timeout=DOT_TIMEOUT_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise Failure(f"Graphviz `dot` ({program}) could not render {target}: {error}") from None
        if done.returncode != 0:
            detail = done.stderr.strip() or f"exit status {done.returncode}"
            raise Failure(f"Graphviz `dot` ({program}) failed to render {target}: {detail}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
