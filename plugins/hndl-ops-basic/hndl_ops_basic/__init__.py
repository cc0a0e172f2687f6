"""hndl-ops-basic: the first-party pack of general-purpose operators (pack name ``basic``)."""

from hndl.packs import hookimpl

from .linear import Linear
from .relu import ReLU
from .tanh import Tanh

OPERATORS = (Linear, ReLU, Tanh)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
