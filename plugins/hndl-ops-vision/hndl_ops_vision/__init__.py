"""hndl-ops-vision: the first-party pack of vision operators (pack name ``vision``).

Its operators are declared one module each and listed in ``OPERATORS``; the hook adds
them to whichever registry opted this pack in.
"""

from hndl.packs import hookimpl

from .adaptive_norm import AdaptiveNorm
from .conv import Conv
from .deconv import Deconv

OPERATORS = (Conv, Deconv, AdaptiveNorm)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
