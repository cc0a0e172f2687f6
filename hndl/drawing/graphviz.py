"""Graphviz, located and run: DOT text in, SVG or PNG bytes out, through a subprocess without a shell.

The program is the ``graphviz-pure`` wheel's ``graphviz-pure`` command (a core dependency: a
self-contained port of Graphviz's ``dot`` that writes the same bytes on every platform), looked
up beside the running interpreter first, so it is found in a virtual environment that was never
activated, then on PATH; a system Graphviz ``dot`` is the fallback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Iterable, Optional

from ..errors import HNDLError

#: The wheel's command, preferred for reproducible output; then Graphviz's own.
PREFERRED_PROGRAM = "graphviz-pure"
SYSTEM_PROGRAM = "dot"
FORMATS = ("svg", "png")
#: How long one layout may take (a plan of thousands of nodes lays out in well under a second).
RENDER_TIMEOUT_SECONDS = 60.0

INSTALL_REMEDY = (
    "install the graphviz-pure wheel into this environment (`python -m pip install graphviz-pure`; "
    "hndl depends on it, so reinstalling hndl restores it), or install Graphviz so that `dot` is on PATH "
    "(e.g. `apt-get install graphviz`)"
)


def interpreter_scripts() -> tuple[str, ...]:
    """Where pip puts console scripts for this interpreter: its environment's, then the user scheme's."""
    folders = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        folders.append(sysconfig.get_path("scripts", user_scheme))
    return tuple(dict.fromkeys(folder for folder in folders if folder))


def graphviz_program(*, path: Optional[str] = None, scripts: Optional[Iterable[str]] = None) -> str:
    """The program that renders DOT here: ``graphviz-pure`` from ``scripts`` (default: this
    interpreter's script folders) or ``path`` (default: PATH), else ``dot`` from ``path``.

    Raises HNDLError (E_RUNTIME) naming the fix when neither is installed.
    """
    folders = interpreter_scripts() if scripts is None else tuple(scripts)
    candidates = [shutil.which(PREFERRED_PROGRAM, path=os.pathsep.join(folders))] if folders else []
    candidates += [shutil.which(PREFERRED_PROGRAM, path=path), shutil.which(SYSTEM_PROGRAM, path=path)]
    for program in candidates:
        if program:
            return program
    raise HNDLError(
        "E_RUNTIME",
        f"drawing a plan needs Graphviz, and neither {PREFERRED_PROGRAM!r} nor {SYSTEM_PROGRAM!r} is installed "
        f"(looked beside this Python in {', '.join(folders) or 'no folder'} and on PATH)",
        remedies=(INSTALL_REMEDY,),
    )


def render(dot_text: str, format: str = "svg", *, program: Optional[str] = None,
           timeout: float = RENDER_TIMEOUT_SECONDS) -> bytes:
    """``dot_text`` laid out and drawn as ``format`` (``svg`` or ``png``) bytes by ``program``
    (default: :func:`graphviz_program`)."""
    if format not in FORMATS:
        raise HNDLError("E_SCHEMA", f"cannot draw a plan as {format!r}",
                        remedies=(f"choose one of {', '.join(FORMATS)}",))
    program = program or graphviz_program()
    try:
        done = subprocess.run([program, f"-T{format}"], input=dot_text.encode("utf-8"), capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise HNDLError("E_RESOURCE", f"Graphviz ({program}) took longer than {timeout:g} s to lay the plan out",
                        remedies=("draw a smaller plan, or write DOT text (hndl graph -o plan.dot) and lay it out "
                                  "with your own Graphviz settings",)) from None
    except OSError as error:
        raise HNDLError("E_RUNTIME", f"Graphviz ({program}) could not be started: {error.strerror or error}",
                        remedies=(INSTALL_REMEDY,)) from None
    if done.returncode != 0 or not done.stdout:
        detail = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}, no output"
        raise HNDLError("E_RUNTIME", f"Graphviz ({program}) failed to draw the plan: {detail}",
                        remedies=(INSTALL_REMEDY,))
    return done.stdout


__all__ = ["graphviz_program", "render", "interpreter_scripts", "FORMATS", "RENDER_TIMEOUT_SECONDS",
           "PREFERRED_PROGRAM", "SYSTEM_PROGRAM", "INSTALL_REMEDY"]
