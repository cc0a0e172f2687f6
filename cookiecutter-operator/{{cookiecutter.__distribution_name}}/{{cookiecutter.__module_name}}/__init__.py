"""{{ cookiecutter.__distribution_name }}: the HNDL operator pack `{{ cookiecutter.pack_name }}`.

Hosts opt in by name, `Registry.from_packs("{{ cookiecutter.pack_name }}")`; the entry point in
pyproject.toml (group `hndl.packs`) points here, and HNDL calls `hndl_register` with the
registry being built. Add each new operator class to `OPERATORS`.
"""

from hndl.packs import hookimpl

from .{{ cookiecutter.operator_alias }} import {{ cookiecutter.__class_name }}

OPERATORS: tuple[type, ...] = ({{ cookiecutter.__class_name }},)


@hookimpl
def hndl_register(registry) -> None:
    """Add every operator of this pack to `registry`."""
    for cls in OPERATORS:
        registry.add(cls)
