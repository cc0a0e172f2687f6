"""The ``hndl`` command: resolve, explain, diff, draw and document specs without writing Python.

Success output goes to stdout with exit status 0 (``hndl diff`` exits 1 when the plans differ,
like diff(1)). Every HNDLError is printed to stderr as its full text (code, location, chain and
remedies) with exit status 2, never as a traceback; usage errors exit 2 as argparse does.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from ..errors import HNDLError
from . import pack_commands, plan_commands, spec_commands
from .options import Failure

PROG = "hndl"
USAGE_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="HNDL: resolve partial network specs against tensor contracts into plans, "
        "and inspect, compare, draw and document them.",
        epilog="Run `hndl COMMAND --help` for a command's options. Exit status: 0 success, "
        "1 `hndl diff` found differences, 2 error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    spec_commands.register(commands)
    plan_commands.register(commands)
    pack_commands.register(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; returns (and, as a console script, exits with) its status."""
    parser = build_parser()
    options = parser.parse_args(argv)
    try:
        status = options.run(options)
        sys.stdout.flush()  # inside the try: a reader that went away is reported here, not at exit
        return status
    except HNDLError as error:
        _flush_stdout()
        print(str(error), file=sys.stderr)
        return USAGE_ERROR
    except Failure as error:
        _flush_stdout()
        print(f"{PROG} {options.command}: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; stop quietly, as command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass


__all__ = ["main", "build_parser"]
