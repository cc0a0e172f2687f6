"""hndl-pretrained: checkpoints as single nodes (pack name ``pretrained``, §9).

Its operators are listed in ``OPERATORS``; the hook adds them to whichever registry opted
this pack in. The heavy dependencies (transformers, timm, safetensors, huggingface_hub) are
this pack's own, exposed as the core's ``hndl[pretrained]`` extra.
"""

from hndl.packs import hookimpl

OPERATORS: tuple[type, ...] = ()


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to ``registry``."""
    for cls in OPERATORS:
        registry.add(cls)
