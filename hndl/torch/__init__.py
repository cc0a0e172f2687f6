"""The PyTorch backend (§11): build a ResolvedPlan into ordinary, fully materialised modules.

``build`` / ``parameter_counts`` construct (``device="meta"`` allocates nothing; ``initialize``
gives a meta-built model its plan's values after ``to_empty``); the network constructors
resolve and build in one step; ``restore`` rebuilds a saved plan and loads a checked state
dictionary (§12); ``dry_run`` and ``preflight`` are the meta-device and numerical inspection
modes of §13 (static resolution, the third, is ``hndl.resolve``). ``unsealed`` turns a built
network into a plain ``nn.Module`` over the same layers, for tools that restructure a model.
"""

from .build import build, initialize, parameter_counts
from .network import network, network_file, network_from_callable
from .plain import unsealed
from .preflight import dry_run, preflight
from .restore import restore

__all__ = [
    "build", "initialize", "parameter_counts", "network", "network_file", "network_from_callable",
    "restore", "dry_run", "preflight", "unsealed",
]
