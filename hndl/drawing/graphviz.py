"""Graphviz, located and run within a budget: DOT text in, SVG or PNG bytes out, through a subprocess without a shell.

The program is the ``graphviz-pure`` wheel's ``graphviz-pure`` command (a core dependency: a
self-contained port of Graphviz's ``dot`` that writes the same bytes on every platform), looked
up beside the running interpreter first, so it is found in a virtual environment that was never
activated, then on PATH; a system Graphviz ``dot`` is the fallback.

Layout time and memory grow far faster than a plan (issue 29: 400 nodes took Graphviz over a
minute, 5,000 nodes grew it to 5.5 GiB), so every run is bounded like the configuration parser
worker: a small launcher caps the renderer's address space (``RLIMIT_AS``) and CPU time
(``RLIMIT_CPU``) and asks Linux to kill it with its parent, then becomes the renderer in a session
of its own; the renderer's whole process group is killed at the wall-clock deadline, on an
interrupt and on any other exception, and it is always waited for. The budget, including the
layout size :mod:`hndl.drawing.draw` refuses before Graphviz starts, is set with :func:`configure`.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import HNDLError, shown

#: The wheel's command, preferred for reproducible output; then Graphviz's own.
PREFERRED_PROGRAM = "graphviz-pure"
SYSTEM_PROGRAM = "dot"
FORMATS = ("svg", "png")

INSTALL_REMEDY = (
    "install the graphviz-pure wheel into this environment (`python -m pip install graphviz-pure`; "
    "hndl depends on it, so reinstalling hndl restores it), or install Graphviz so that `dot` is on PATH "
    "(e.g. `apt-get install graphviz`)"
)
SMALLER_REMEDY = (
    "draw a smaller part of the plan, or write DOT text (hndl graph -o plan.dot, or "
    "hndl.drawing.dot.plan_dot(plan)) and lay it out with your own Graphviz settings; the shape table "
    "(print(plan), hndl resolve) shows every node without a layout"
)


@dataclass(frozen=True)
class RenderBudget:
    """What drawing one plan may cost.

    ``max_layout_nodes`` bounds the layout :mod:`hndl.drawing.draw` accepts before Graphviz starts
    (the plan's boxes plus one per rank an edge crosses, see :func:`hndl.drawing.dot.layout_size`;
    2,000 lay out in about a second). Graphviz itself runs with ``memory_bytes`` of address space,
    ``cpu_seconds`` of CPU time and ``timeout_seconds`` of wall-clock time, and a notebook display
    waits at most ``notebook_timeout_seconds`` before it shows the shape table instead.
    """

    max_layout_nodes: int = 2_000
    memory_bytes: int = 1 << 30
    cpu_seconds: int = 60
    timeout_seconds: float = 60.0
    notebook_timeout_seconds: float = 10.0


_WHOLE = ("max_layout_nodes", "memory_bytes", "cpu_seconds")
#: The largest sizes and waits every platform's rlimits and timers accept.
_MOST_WHOLE, _MOST_SECONDS = 2**62, 1e6
_settings = RenderBudget()


def configure(**budgets: Any) -> RenderBudget:
    """Set some of the :class:`RenderBudget` fields for this process; returns the budget in force.

    Unknown names, and values that are not positive (integers for the sizes, finite numbers for
    the timeouts), are E_SCHEMA.
    """
    global _settings
    _settings = checked(replace(_settings, **_known(budgets)))
    return _settings


def current() -> RenderBudget:
    """The render budget in force (the defaults until :func:`configure` changes them)."""
    return _settings


def _known(budgets: dict) -> dict:
    names = [field.name for field in fields(RenderBudget)]
    for name in budgets:
        if name not in names:
            raise HNDLError("E_SCHEMA", f"unknown render budget {shown(name)}", field="render budget",
                            remedies=(f"Use only the keys {', '.join(names)}.",))
    return budgets


def checked(budget: RenderBudget) -> RenderBudget:
    """``budget`` when every field is positive (whole numbers up to 2**62 for sizes, numbers up
    to 10**6 for seconds), else E_SCHEMA."""
    for name, value in asdict(budget).items():
        whole = name in _WHOLE
        number = type(value) is int or (not whole and type(value) is float and math.isfinite(value))
        if not number or not 0 < value <= (_MOST_WHOLE if whole else _MOST_SECONDS):
            kind = "a positive integer up to 2**62" if whole else "a positive number of seconds up to 10**6"
            raise HNDLError("E_SCHEMA", f"render budget {name} must be {kind}, got {shown(value)}",
                            field=f"render budget.{name}", remedies=(f"Give {kind}.",))
    return budget


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


def render(dot_text: str, format: str = "svg", *, program: Optional[str] = None, timeout: Optional[float] = None,
           budget: Optional[RenderBudget] = None) -> bytes:
    """``dot_text`` laid out and drawn as ``format`` (``svg`` or ``png``) bytes by ``program``
    (default: :func:`graphviz_program`) within ``budget`` (default: :func:`current`), whose
    wall-clock deadline ``timeout`` replaces when given.

    Raises E_RESOURCE naming the budget the renderer ran out of, E_RUNTIME when it fails otherwise.
    """
    if format not in FORMATS:
        raise HNDLError("E_SCHEMA", f"cannot draw a plan as {format!r}",
                        remedies=(f"choose one of {', '.join(FORMATS)}",))
    budget = budget or current()
    budget = checked(budget if timeout is None else replace(budget, timeout_seconds=timeout))
    program = program or graphviz_program()
    returncode, output, errors = run_bounded([program, f"-T{format}"], dot_text.encode("utf-8"), budget)
    if returncode < 0:
        raise _stopped(program, -returncode, budget)
    detail = errors.decode("utf-8", "replace").strip()
    if returncode == _UNSTARTABLE and detail.startswith(_UNSTARTABLE_MARK):
        raise HNDLError("E_RUNTIME", f"Graphviz ({program}) could not be started: {detail[len(_UNSTARTABLE_MARK):]}",
                        remedies=(INSTALL_REMEDY,))
    if returncode != 0 or not output:
        detail = detail or f"exit status {returncode}, no output"
        raise HNDLError("E_RUNTIME", f"Graphviz ({program}) failed to draw the plan: {detail}",
                        remedies=(INSTALL_REMEDY,))
    return output


# -- the bounded subprocess ------------------------------------------------------------------------------
_UNSTARTABLE = 127
_UNSTARTABLE_MARK = "hndl-launcher: "
#: Run by this interpreter in the new session: death signal, then limits, then exec the renderer.
#: The address-space cap comes last so that only exec runs under it; the CPU hard limit is one
#: second above the soft one, so SIGXCPU (not SIGKILL) reports an exhausted CPU budget.
_LAUNCHER = f"""
import os, resource, sys
parent, memory, cpu = (int(value) for value in sys.argv[1:4])
if sys.platform.startswith("linux"):
    import ctypes, signal
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(1)
def cap(kind, soft, hard):
    ceiling = resource.getrlimit(kind)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(kind, (soft, hard))
cap(resource.RLIMIT_CPU, cpu, cpu + 1)
cap(resource.RLIMIT_AS, memory, memory)
try:
    os.execv(sys.argv[4], sys.argv[4:])
except OSError as error:
    os.write(2, ("{_UNSTARTABLE_MARK}" + (error.strerror or str(error))).encode("utf-8", "replace"))
    os._exit({_UNSTARTABLE})
"""


def run_bounded(command: list[str], data: bytes, budget: RenderBudget) -> tuple[int, bytes, bytes]:
    """Run ``command`` on ``data`` within ``budget``: ``(returncode, stdout, stderr)``, a negative
    return code naming the signal that stopped it. Past the deadline it is E_RESOURCE; the
    command's process group is killed and reaped on that and on any exception, interrupts included."""
    launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), str(budget.memory_bytes),
                str(budget.cpu_seconds), *command]
    try:
        process = subprocess.Popen(launcher, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, close_fds=True)
    except OSError as error:
        raise HNDLError("E_RUNTIME", f"Graphviz ({command[0]}) could not be started: {error.strerror or error}",
                        remedies=(INSTALL_REMEDY,)) from None
    with process:
        try:
            output, errors = process.communicate(data, timeout=budget.timeout_seconds)
        except subprocess.TimeoutExpired:
            stop_group(process)
            raise _late(command[0], budget) from None
        except BaseException:
            stop_group(process)
            raise
    return process.returncode, output, errors


def stop_group(process: subprocess.Popen) -> None:
    """Kill ``process`` and every process it started (it leads its own session) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _budget_remedy() -> str:
    return ("raise the budget with hndl.drawing.graphviz.configure(timeout_seconds=..., cpu_seconds=..., "
            "memory_bytes=...)")


def _late(program: str, budget: RenderBudget) -> HNDLError:
    return HNDLError(
        "E_RESOURCE",
        f"Graphviz ({program}) took longer than {budget.timeout_seconds:g} s to lay the plan out "
        f"(timeout_seconds={budget.timeout_seconds:g}) and was stopped",
        field="timeout_seconds", remedies=(SMALLER_REMEDY, _budget_remedy()),
    )


def _stopped(program: str, signal_number: int, budget: RenderBudget) -> HNDLError:
    if signal_number == signal.SIGXCPU:
        message = f"used up its CPU budget (cpu_seconds={budget.cpu_seconds}) before the layout was done"
        field = "cpu_seconds"
    else:  # graphviz-pure aborts (SIGABRT) when an allocation fails; Graphviz in C may crash instead
        message = (f"was stopped by {_signal_name(signal_number)} before the layout was done: it most likely "
                   f"outgrew its memory budget (memory_bytes={budget.memory_bytes}, "
                   f"{budget.memory_bytes / 2**20:g} MiB)")
        field = "memory_bytes"
    return HNDLError("E_RESOURCE", f"Graphviz ({program}) {message}", field=field,
                     remedies=(SMALLER_REMEDY, _budget_remedy()))


__all__ = ["graphviz_program", "render", "run_bounded", "stop_group", "interpreter_scripts", "configure",
           "current", "checked", "RenderBudget", "FORMATS", "PREFERRED_PROGRAM", "SYSTEM_PROGRAM",
           "INSTALL_REMEDY", "SMALLER_REMEDY"]
