"""HNDL: describe a partial network plus tensor contracts; resolve, inspect and build it.

The public surface is deliberately small (§7): the three resolution entry points, the ``ops``
namespace for trusted capture, ``Registry``, ``ResolvedPlan``, ``HNDLError``, the declaration
types (``TorchSpelling`` is our addition: how torch writes an operator), and the eight initializer
schemes of §11. Construction lives in ``hndl.torch``.
"""

from .construction import (
    kaiming_normal,
    kaiming_uniform,
    normal,
    orthogonal,
    truncated_normal,
    uniform,
    xavier_normal,
    xavier_uniform,
)
from .declaration import Arg, Example, Policy, TorchSpelling, operator
from .errors import HNDLError
from .frontends.pipeline import resolve, resolve_callable, resolve_file
from .plan import ResolvedPlan
from .registry import Registry

__version__ = "0.1.0"

__all__ = [
    "resolve",
    "resolve_file",
    "resolve_callable",
    "ops",
    "Registry",
    "ResolvedPlan",
    "HNDLError",
    "operator",
    "Arg",
    "Example",
    "Policy",
    "TorchSpelling",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "truncated_normal",
    "normal",
    "uniform",
    "orthogonal",
]


def __getattr__(name: str):
    """``hndl.ops`` binds the built-in registry's operators on first use, not at import."""
    if name == "ops":
        namespace = Registry.builtins().ops
        globals()["ops"] = namespace
        return namespace
    raise AttributeError(f"module 'hndl' has no attribute {name!r}")
