"""External tensor contracts (§3): input_shape / output_shape, dtype and input_dtype.

A contract is one tuple (the single input ``x`` or output ``output``) or an ordered mapping
of named tuples. Axis 0 is the batch symbol, shared by every contract; all other entries are
positive integers. Everything here is validated once, before the graph is resolved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional

from .errors import HNDLError, shown

COMPUTE_DTYPES = ("float32", "float16", "bfloat16")
INTEGER_DTYPES = ("int64", "int32", "bool")
PORT_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
BATCH_MULTIPLE = re.compile(r"\s*\d+\s*\*")
MULTIPLE_ENTRY = re.compile(r"([1-9][0-9]*)\*(.+)\Z")
MAX_BATCH_MULTIPLE = 1024
#: Digits of the largest multiple; a longer spelling is malformed, not merely too large.
MULTIPLE_DIGITS = len(str(MAX_BATCH_MULTIPLE))
MAX_PORTS = 32


@dataclass(frozen=True)
class PortContract:
    """One external input or public output: its name, shape entries and dtype."""

    name: str
    shape: tuple  # (batch symbol, int, ...)
    dtype: Optional[str] = None  # inputs only


@dataclass(frozen=True)
class Contracts:
    """The validated external inputs and public outputs of one resolution request."""

    inputs: tuple[PortContract, ...]
    outputs: tuple[PortContract, ...]
    dtype: str
    batch: str

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(port.name for port in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(port.name for port in self.outputs)

    @property
    def named_outputs(self) -> bool:
        """True unless the only public output is the default ``output``."""
        return self.output_names != ("output",)


def parse_contracts(
    input_shape: Any,
    output_shape: Any,
    *,
    dtype: Any = "float32",
    input_dtype: Any = None,
    aliases: Collection[str] = (),
    max_dimension: int = 2**31 - 1,
) -> Contracts:
    """Validate the contract keywords every frontend accepts, returning ``Contracts``."""
    dtype = dtype_name(dtype)
    if dtype not in COMPUTE_DTYPES:
        raise HNDLError(
            "E_SCHEMA",
            f"dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {shown(dtype)}",
            field="dtype",
            remedies=('Use dtype="float32", "float16" or "bfloat16".',),
        )
    inputs = _named(input_shape, "input_shape", "x", aliases)
    outputs = _named(output_shape, "output_shape", "output", aliases)
    batch_symbols = {}
    parsed_inputs, parsed_outputs = [], []
    for side, named, parsed in (("input_shape", inputs, parsed_inputs), ("output_shape", outputs, parsed_outputs)):
        for name, shape in named.items():
            entries = _shape(shape, f"{side}[{name!r}]", max_dimension)
            batch_symbols.setdefault(entries[0], f"{side}[{name!r}]")
            parsed.append((name, entries))
    if len(batch_symbols) > 1:
        uses = ", ".join(f"{where} uses {shown(symbol)}" for symbol, where in batch_symbols.items())
        raise HNDLError(
            "E_CONSTRAINT",
            f"every contract must share one batch symbol: {uses}",
            field="input_shape",
            remedies=("Spell the batch axis the same way in every contract.",),
        )
    dtypes = _input_dtypes(input_dtype, [name for name, _ in parsed_inputs], dtype)
    return Contracts(
        inputs=tuple(PortContract(name, entries, dtypes[name]) for name, entries in parsed_inputs),
        outputs=tuple(PortContract(name, entries) for name, entries in parsed_outputs),
        dtype=dtype,
        batch=next(iter(batch_symbols)),
    )


def dtype_name(value: Any) -> Any:
    """The name of a torch dtype object (``torch.long`` -> ``"int64"``); any other value unchanged.

    PyTorch users write dtype objects; they mean exactly the dtype of the same name, so they lead
    to the same plan. torch is recognised by the type's module and never imported here.
    """
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        text = str(value)
        return text[len("torch."):] if text.startswith("torch.") else text
    return value


def _named(contract: Any, field: str, default_name: str, aliases: Collection[str]) -> dict[str, Any]:
    if isinstance(contract, (tuple, list)):
        return {default_name: contract}
    if not isinstance(contract, Mapping):
        raise HNDLError(
            "E_SCHEMA",
            f"{field} must be a tuple such as ('B', 128) or a mapping of names to tuples, "
            f"not {type(contract).__name__}",
            field=field,
        )
    if not contract:
        raise HNDLError("E_SCHEMA", f"{field} names no ports", field=field)
    if len(contract) > MAX_PORTS:
        raise HNDLError("E_SCHEMA", f"{field} declares {len(contract)} ports; at most {MAX_PORTS}", field=field)
    for name in contract:
        if not isinstance(name, str) or not PORT_NAME.match(name):
            raise HNDLError(
                "E_NAME",
                f"{field} port name {shown(name)} must match [a-z][a-z0-9_]*",
                field=field,
                remedies=("Use a lowercase identifier such as 'image' or 'labels'.",),
            )
        if name in aliases:
            raise HNDLError(
                "E_NAME",
                f"{field} port name {name!r} collides with the operator alias {name!r}",
                field=field,
                remedies=(f"Rename the port; {name!r} already calls an operator.",),
            )
    return dict(contract)


def _shape(shape: Any, field: str, max_dimension: int) -> tuple:
    if not isinstance(shape, (tuple, list)):
        raise HNDLError("E_SCHEMA", f"{field} must be a tuple of dimensions, not {shown(shape)}", field=field)
    entries = tuple(shape)
    if len(entries) == 1:
        raise HNDLError(
            "E_SCHEMA",
            f"{field} has rank 1; axis 0 must be the batch symbol such as 'B', followed by the "
            "extents of one example",
            field=field,
            remedies=(_batch_first(entries[0]),),
        )
    if len(entries) not in (2, 3, 4):
        raise HNDLError(
            "E_SCHEMA",
            f"{field} has rank {len(entries)}; supported ranks are 2 [B, F], 3 [B, T, D] and 4 [B, C, H, W]",
            field=field,
        )
    batch = entries[0]
    if not isinstance(batch, str) or not batch.isidentifier():
        extra = ""
        if isinstance(batch, str) and BATCH_MULTIPLE.match(batch):
            extra = "; external contracts hold exactly one plan batch, never a multiple"
        raise HNDLError(
            "E_SCHEMA",
            f"{field} axis 0 must be the batch symbol such as 'B', got {shown(batch)}{extra}",
            field=field,
            remedies=("Write the batch axis as a symbol, e.g. ('B', 128).",),
        )
    for axis, extent in enumerate(entries[1:], start=1):
        if type(extent) is not int or extent <= 0:
            raise HNDLError(
                "E_SCHEMA",
                f"{field} axis {axis} must be a positive integer, got {shown(extent)}",
                field=field,
                remedies=("Only the batch axis may stay symbolic; give every other extent as a positive int.",),
            )
        if extent > max_dimension:
            raise HNDLError(
                "E_RESOURCE",
                f"{field} axis {axis} is {shown(extent)}, above max_dimension={max_dimension}",
                field=field,
            )
    return entries


def _batch_first(entry: Any) -> str:
    """The rank-1 remedy: put the batch symbol in front of the one extent given (or after it)."""
    if isinstance(entry, str) and entry.isidentifier():
        return f"Give the extents of one example after the batch symbol, e.g. ({entry!r}, 128)."
    example = shown(entry) if type(entry) is int and entry > 0 else "128"
    return f"The batch symbol comes first: write ('B', {example}), not ({shown(entry)},)."


def _input_dtypes(input_dtype: Any, names: list[str], dtype: str) -> dict[str, str]:
    input_dtype = dtype_name(input_dtype)
    if input_dtype is None:
        chosen = {}
    elif isinstance(input_dtype, str):
        chosen = {name: input_dtype for name in names}
    elif isinstance(input_dtype, Mapping):
        chosen = dict(input_dtype)
        for name in chosen:
            if name not in names:
                raise HNDLError(
                    "E_SCHEMA",
                    f"input_dtype names {name!r}, which is not a declared input ({', '.join(names)})",
                    field="input_dtype",
                )
    else:
        raise HNDLError("E_SCHEMA", f"input_dtype must be a dtype name or a mapping, not {shown(input_dtype)}", field="input_dtype")
    result = {}
    for name in names:
        value = dtype_name(chosen.get(name, dtype))
        if value not in COMPUTE_DTYPES + INTEGER_DTYPES:
            raise HNDLError(
                "E_SCHEMA",
                f"input_dtype of {name!r} must be one of {', '.join(COMPUTE_DTYPES + INTEGER_DTYPES)}, got {shown(value)}",
                field="input_dtype",
            )
        if value in COMPUTE_DTYPES and value != dtype:
            raise HNDLError(
                "E_SCHEMA",
                f"floating input_dtype {value!r} of {name!r} must equal the compute dtype {dtype!r}",
                field="input_dtype",
                remedies=("Use the compute dtype for floating inputs, or an integer dtype for ids and masks.",),
            )
        result[name] = value
    return result


def batch_multiple(entry: Any, symbol: str, *, field: str = "shape") -> int:
    """k of an internal axis-0 entry: ``symbol`` is 1, ``k*symbol`` is k for 2 <= k <= 1024.

    ``1*B``, ``0*B``, ``B*2``, leading zeros, other symbols and multiples of more than four
    digits are E_SCHEMA; a four-digit multiple above 1024 is E_RESOURCE. External contracts
    never carry multiples (``parse_contracts``).
    """
    if entry == symbol:
        return 1
    match = MULTIPLE_ENTRY.match(entry) if isinstance(entry, str) else None
    # More digits than 1024 has is a spelling no plan writes, and never reaches int(): Python
    # refuses to convert more than 4300 digits, and a long run would only cost time.
    digits = match.group(1) if match is not None else ""
    if match is None or match.group(2) != symbol or len(digits) > MULTIPLE_DIGITS or int(digits) < 2:
        raise HNDLError(
            "E_SCHEMA",
            f"malformed batch entry {shown(entry)}: write {symbol!r} for one batch or k*{symbol} with 2 <= k <= "
            f"{MAX_BATCH_MULTIPLE}, without leading zeros",
            field=field,
            remedies=(f"Spell axis 0 as {symbol!r} or as k*{symbol}, e.g. 2*{symbol}.",),
        )
    multiple = int(digits)
    if multiple > MAX_BATCH_MULTIPLE:
        raise HNDLError(
            "E_RESOURCE",
            f"batch entry {entry!r} holds more than {MAX_BATCH_MULTIPLE} plan batches",
            field=field,
        )
    return multiple
