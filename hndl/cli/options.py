"""What the subcommands share: contract and pack options, reading a spec, writing outputs.

Command-line text becomes exactly the keyword values ``hndl.resolve`` takes; every contract
check (rank, batch symbol, positive extents, dtypes, port names) stays in the contract parser,
so the command reports the same HNDLError a Python caller would get.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from typing import Optional, Sequence

from ..contracts import COMPUTE_DTYPES
from ..docs.catalog import all_packs
from ..errors import HNDLError, shown
from ..packs import split_pack_names
from ..registry import Registry

_INT = re.compile(r"[+-]?\d+\Z")
#: The most digits an extent can have: no int64, and so no dimension limit, has more.
_MAX_DIGITS = len(str(2**63 - 1))


#: What every command loads without --packs: the packs `hndl packs` lists.
DEFAULT_PACKS = "every installed pack, as `hndl packs` lists them"


class Failure(Exception):
    """A command-line failure outside HNDL's error catalog (bad option text, a missing tool)."""


# -- option groups --------------------------------------------------------------------------------------
def add_packs_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--packs", action="append", metavar="NAME[,NAME...]",
        help=f"operator packs to load, comma-separated or repeated (default: {default})",
    )


def add_contract_options(parser: argparse.ArgumentParser) -> None:
    """SPEC plus the contract keywords of hndl.resolve, as options."""
    parser.add_argument("spec", metavar="SPEC", help="configuration file, or - to read it from stdin")
    contract = parser.add_argument_group("contracts")
    contract.add_argument(
        "--input-shape", action="append", required=True, metavar="[NAME=]SHAPE",
        help="input contract such as B,128; repeat NAME=B,3,64,64 for named inputs",
    )
    contract.add_argument(
        "--output-shape", action="append", required=True, metavar="[NAME=]SHAPE",
        help="output contract such as B,10; repeat NAME=B,1 for named outputs",
    )
    contract.add_argument("--dtype", default="float32", choices=COMPUTE_DTYPES,
                          help="compute dtype (default: float32)")
    contract.add_argument(
        "--input-dtype", action="append", metavar="[NAME=]DTYPE",
        help="dtype of every input (e.g. int64 for token ids), or NAME=DTYPE per input, repeatable",
    )
    add_packs_option(parser, DEFAULT_PACKS)


# -- parsing option text --------------------------------------------------------------------------------
def parse_shape(text: str, option: str) -> tuple:
    """``B,128`` -> ``("B", 128)``; brackets are optional; entries that are not integers stay text."""
    body = text.strip()
    if len(body) >= 2 and (body[0], body[-1]) in (("[", "]"), ("(", ")")):
        body = body[1:-1]
    entries = [entry.strip() for entry in body.split(",")]
    if not body.strip() or any(not entry for entry in entries):
        raise Failure(f"{option} {shown(text)}: write comma-separated entries such as B,128")
    return tuple(_extent(entry, axis, text, option) if _INT.match(entry) else entry
                 for axis, entry in enumerate(entries))


def _extent(entry: str, axis: int, text: str, option: str) -> int:
    """An integer entry; a digit flood no extent can reach is refused before ``int()`` sees it
    (Python's own conversion raises ValueError beyond 4,300 digits)."""
    digits = len(entry.lstrip("+-"))
    if digits > _MAX_DIGITS:
        raise Failure(
            f"{option} {shown(text)}: axis {axis} is a {digits}-digit integer; an extent is a "
            f"positive integer of at most {_MAX_DIGITS} digits (and at most max_dimension)"
        )
    return int(entry)


def parse_contract(values: Sequence[str], option: str):
    """One unnamed shape (a tuple) or NAME=SHAPE entries (an ordered dict)."""
    named = [value for value in values if _named(value)]
    if named and len(named) != len(values):
        raise Failure(f"{option}: give either one unnamed shape or NAME=SHAPE for every port, not both")
    if not named:
        if len(values) > 1:
            raise Failure(f"{option} is given {len(values)} times without names; name each port as NAME=SHAPE")
        return parse_shape(values[0], option)
    contract = {}
    for value in values:
        name, _, shape = value.partition("=")
        name = name.strip()
        if name in contract:
            raise Failure(f"{option} names the port {shown(name)} twice")
        contract[name] = parse_shape(shape, f"{option} {name}")
    return contract


def _named(value: str) -> bool:
    return "=" in value


def parse_input_dtype(values: Optional[Sequence[str]]):
    """None, one dtype for every input, or NAME=DTYPE entries."""
    if not values:
        return None
    named = [value for value in values if _named(value)]
    if not named:
        if len(values) > 1:
            raise Failure("--input-dtype is given more than once without names; write NAME=DTYPE per input")
        return values[0].strip()
    if len(named) != len(values):
        raise Failure("--input-dtype: give either one dtype or NAME=DTYPE for every entry, not both")
    chosen = {}
    for value in values:
        name, _, dtype = value.partition("=")
        if name.strip() in chosen:
            raise Failure(f"--input-dtype names the input {shown(name.strip())} twice")
        chosen[name.strip()] = dtype.strip()
    return chosen


def pack_names(values: Optional[Sequence[str]]) -> Optional[tuple[str, ...]]:
    """``--packs a,b --packs c`` -> ``("a", "b", "c")``; None when the option was not given."""
    if values is None:
        return None
    names = tuple(name for value in values for name in split_pack_names(value))
    if not names:
        raise Failure("--packs names no pack; write e.g. --packs basic,vision")
    return names


def registry(values: Optional[Sequence[str]]) -> Registry:
    """The packs --packs names, else every installed pack (first-party ones first), as `hndl packs` lists."""
    names = pack_names(values)
    if names is not None:
        return Registry.from_packs(*names)
    installed = all_packs()
    try:
        return Registry.from_packs(*installed)
    except HNDLError as error:
        if error.code != "E_REGISTRY":
            raise
        raise _default_packs_failed(error, installed) from None


def _default_packs_failed(error: HNDLError, installed: Sequence[str]) -> HNDLError:
    """The installed packs do not load together (one fails to import, two claim an alias): the same
    error, with the exact --packs that leaves out each pack that fails on its own."""
    loadable = [name for name in installed if _loads(name)]
    remedy = (f"Choose the packs with --packs {','.join(loadable)}." if loadable
              else "Reinstall the packs, or install one that imports.")
    return HNDLError(error.code, error.message, field=error.location.field, chain=error.chain,
                     remedies=(*error.remedies, remedy))


def _loads(pack: str) -> bool:
    try:
        Registry.from_packs(pack)
    except HNDLError:
        return False
    return True


# -- resolving a spec -----------------------------------------------------------------------------------
def resolve_spec(options: argparse.Namespace):
    """The plan for SPEC under the command's contract options."""
    from .. import resolve, resolve_file

    keywords = dict(
        input_shape=parse_contract(options.input_shape, "--input-shape"),
        output_shape=parse_contract(options.output_shape, "--output-shape"),
        dtype=options.dtype,
        input_dtype=parse_input_dtype(options.input_dtype),
        registry=registry(options.packs),
    )
    if options.spec == "-":
        return resolve(read_stdin(), **keywords)
    return resolve_file(options.spec, **keywords)


def read_stdin() -> str:
    """The configuration on standard input: bounded and strict UTF-8, like a file."""
    from ..frontends.config.source import read_stream

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise Failure("SPEC is -, but standard input is closed; pipe the configuration in or pass a file")
    return read_stream(stream)


# -- files ------------------------------------------------------------------------------------------------
def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (see ``write_bytes``)."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, then a rename,
    so a failure (a full disk, an interrupt) never leaves a half-written plan or drawing."""
    try:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory")
        handle, partial = tempfile.mkstemp(prefix=".hndl-", suffix=".partial", dir=folder)
    except (OSError, ValueError) as error:  # ValueError: an embedded NUL in the path
        raise Failure(f"cannot write {shown(path)}: {getattr(error, 'strerror', None) or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(partial, 0o666 & ~_umask())  # mkstemp's 0600 would make the result private
        os.replace(partial, path)
    except OSError as error:
        raise Failure(f"cannot write {shown(path)}: {error.strerror or error}") from None
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
