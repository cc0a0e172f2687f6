"""hndl-pretrained: checkpoints as single nodes (pack name ``pretrained``, §9).

Its operators are listed in ``OPERATORS``; the hook adds them to whichever registry opted
this pack in. The heavy dependencies (transformers, timm, safetensors, huggingface_hub) are
this pack's own, exposed as the core's ``hndl[pretrained]`` extra, and are imported only when
a pretrained node is resolved or built: a missing one fails with E_PRETRAINED, never with an
ImportError.
"""

from hndl.packs import hookimpl

from .pretrained import Pretrained

OPERATORS: tuple[type, ...] = (Pretrained,)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
