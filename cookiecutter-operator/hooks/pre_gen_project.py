"""Validate the template variables before anything is written; exit 1 with a clear message.

Cookiecutter runs this hook with its own interpreter, which must be able to import hndl:
the checks below use HNDL's own reserved names and first-party catalog, and the
post-generation hook renders the catalog page with HNDL's generator.
"""

import keyword
import re
import sys

PACK_NAME = {{ cookiecutter.pack_name | tojson }}
OPERATOR_ALIAS = {{ cookiecutter.operator_alias | tojson }}
CLASS_NAME = {{ cookiecutter.__class_name | tojson }}

NAME = re.compile(r"[a-z][a-z0-9_]*")
MAX_CHARS = 64
#: Names the generated modules import next to the operator class.
IMPORTED_NAMES = {"Arg", "Example", "HNDLError", "Registry"}


def lowercase_identifier_problem(what, value):
    if not NAME.fullmatch(value):
        return (f"{what} {value!r} must be a lowercase identifier: a letter a-z, then letters a-z, digits "
                "and underscores (for example 'acme' or 'scaled_tanh')")
    if keyword.iskeyword(value):
        return f"{what} {value!r} is a Python keyword"
    if len(value) > MAX_CHARS:
        return f"{what} {value!r} is longer than {MAX_CHARS} characters"
    return None


def problems():
    found = [problem for problem in (lowercase_identifier_problem("pack_name", PACK_NAME),
                                     lowercase_identifier_problem("operator_alias", OPERATOR_ALIAS)) if problem]
    if found:
        return found
    try:
        from hndl.declaration import INITIALIZER_NAMES, RESERVED_ALIASES, RESERVED_METADATA
        from hndl.packs import FIRST_PARTY, installed_packs
        from hndl.registry import Registry
    except ImportError as error:
        return [f"hndl is not importable by the interpreter running cookiecutter ({sys.executable}): {error}. "
                "Run cookiecutter from the environment where hndl is installed (pip install 'hndl[dev]' "
                "includes cookiecutter)"]
    if PACK_NAME in FIRST_PARTY:
        found.append(f"pack_name {PACK_NAME!r} is a first-party pack name ({', '.join(FIRST_PARTY)}); choose another")
    if OPERATOR_ALIAS in RESERVED_ALIASES:
        found.append(f"operator_alias {OPERATOR_ALIAS!r} is reserved for the external input x / output out")
    elif OPERATOR_ALIAS in RESERVED_METADATA:
        found.append(f"operator_alias {OPERATOR_ALIAS!r} is reserved node metadata ({', '.join(RESERVED_METADATA)})")
    elif OPERATOR_ALIAS in INITIALIZER_NAMES:
        found.append(f"operator_alias {OPERATOR_ALIAS!r} shadows an initializer scheme name")
    elif CLASS_NAME in IMPORTED_NAMES:
        found.append(f"operator_alias {OPERATOR_ALIAS!r} would name its class {CLASS_NAME}, which the generated "
                     "modules import from HNDL; choose another")
    else:
        for pack in (name for name in FIRST_PARTY if name in installed_packs()):
            if OPERATOR_ALIAS in Registry.from_packs(pack).aliases():
                found.append(f"operator_alias {OPERATOR_ALIAS!r} is already an operator of the first-party pack "
                             f"{pack!r}, so the two packs could not be used together; choose another")
    return found


def main():
    found = problems()
    for problem in found:
        print(f"ERROR: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
