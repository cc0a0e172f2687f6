"""The PyTorch backend (§11): build a ResolvedPlan into ordinary, fully materialised modules."""

from .build import build, parameter_counts
from .network import network, network_file, network_from_callable

__all__ = ["build", "parameter_counts", "network", "network_file", "network_from_callable"]
