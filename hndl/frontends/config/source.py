"""Bounded loading of declarative configuration source, with dedent and a source map (§7).

String and file entry points share this one pipeline. Byte and line budgets are applied
before anything is parsed; files are read as bounded UTF-8 without ever reading an unbounded
file first. Common indentation is removed exactly like ``textwrap.dedent`` so indented
triple-quoted examples work, and a per-line record of the removed characters maps every
dedented position back to the line and column the author actually wrote.

Line endings follow Python's own tokenizer: ``\\r\\n`` and a lone ``\\r`` both end a line.
They are normalized to ``\\n`` before dedenting so that the source map, the dedented text and
the line numbers the parser reports always describe the same lines.
"""

from __future__ import annotations

import bisect
import os
import re
import textwrap
from dataclasses import dataclass, field
from typing import BinaryIO, Mapping, Optional, Union

from ...bounded_read import read_bounded
from ...errors import HNDLError
from ...limits import SOURCE_BUDGETS, merge_bounds

__all__ = ["Source", "load_text", "load_file", "read_stream", "resolve_budgets"]

_WHITESPACE_ONLY = re.compile(r"[ \t]+")
_LEADING_WHITESPACE = re.compile(r"[ \t]*")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NUL = re.compile("\x00")
_BOM = "\ufeff"


def _normalize_newlines(text: str) -> str:
    """Turn ``\\r\\n`` and lone ``\\r`` into ``\\n``, as Python's tokenizer does."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _count_lines(text: str) -> int:
    """Number of lines in newline-normalized text; a final newline opens no new line."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _removed_per_line(original: str, text: str) -> tuple[int, ...]:
    """Characters dedent removed from the start of each line, derived from both texts.

    When ``text`` is not a line-by-line suffix of ``original`` (a hand-built Source), the
    map degrades to "nothing removed" rather than guessing.
    """
    original_lines = _normalize_newlines(original).split("\n")
    text_lines = text.split("\n")
    if len(original_lines) != len(text_lines):
        return ()
    removed = []
    for before, after in zip(original_lines, text_lines):
        if not before.endswith(after):
            return ()
        removed.append(len(before) - len(after))
    return tuple(removed)


@dataclass(frozen=True)
class Source:
    """Configuration text ready for parsing, plus the map back to what the author wrote.

    ``text`` is the dedented, newline-normalized text that is parsed; ``original`` is the
    text as supplied; ``file`` names the host-supplied path for file sources.
    """

    text: str
    original: str
    file: Optional[str] = None
    _removed: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())
    _lines: tuple[str, ...] = field(init=False, repr=False, compare=False, default=())
    _tables: dict = field(init=False, repr=False, compare=False, default_factory=dict)
    _ascii: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_removed", _removed_per_line(self.original, self.text))
        object.__setattr__(self, "_lines", tuple(self.text.split("\n")))
        # ASCII text (the common case) has byte offsets equal to character columns on every line.
        object.__setattr__(self, "_ascii", self.text.isascii())

    def position(self, line: int, column: int) -> tuple[int, int]:
        """Map a dedented (1-based line, 0-based character column) to the original
        (1-based line, 1-based column). Out-of-range lines are clamped, never raised."""
        line = max(1, int(line))
        column = max(0, int(column))
        index = line - 1
        removed = self._removed[index] if index < len(self._removed) else 0
        return line, column + removed + 1

    def char_column(self, line: int, byte_offset: int) -> int:
        """Convert an ``ast`` ``col_offset`` (UTF-8 bytes) on a dedented line to characters.

        ASCII lines need no work; other lines get a lazily built, cached table of where
        multi-byte characters end, so converting many offsets on one long line stays cheap.
        """
        index = max(1, int(line)) - 1
        offset = max(0, int(byte_offset))
        if index >= len(self._lines) or self._lines[index].isascii():
            return offset
        ends, extras = self._multibyte_table(index)
        position = bisect.bisect_right(ends, offset)
        return offset - (extras[position - 1] if position else 0)

    def _multibyte_table(self, index: int) -> tuple[list[int], list[int]]:
        """Byte offsets just past each multi-byte character and the extra bytes so far."""
        table = self._tables.get(index)
        if table is None:
            ends: list[int] = []
            extras: list[int] = []
            byte, extra = 0, 0
            for char in self._lines[index]:
                width = len(char.encode("utf-8", "surrogatepass"))
                byte += width
                if width > 1:
                    extra += width - 1
                    ends.append(byte)
                    extras.append(extra)
            table = (ends, extras)
            self._tables[index] = table
        return table

    def node_position(self, line: int, byte_offset: int) -> tuple[int, int]:
        """Original (line, column) of an ``ast`` node's ``lineno``/``col_offset``."""
        if self._ascii and type(line) is int and type(byte_offset) is int and line >= 1 and byte_offset >= 0:
            # The parser's own positions on ASCII text: bytes are characters, nothing to clamp.
            removed = self._removed
            return line, byte_offset + (removed[line - 1] if line <= len(removed) else 0) + 1
        return self.position(line, self.char_column(line, byte_offset))


def resolve_budgets(budgets: Optional[Mapping[str, int]] = None) -> Mapping[str, int]:
    """Merge caller budgets over ``SOURCE_BUDGETS``; unknown keys or non-positive ints fail.

    Accepting a partial mapping lets a host raise one limit explicitly without restating
    the others; every value is still checked so no budget is silently disabled.
    """
    return merge_bounds(budgets, SOURCE_BUDGETS, "budgets")


def _line_and_column(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of character ``index`` in ``text`` with any line endings."""
    prefix = _normalize_newlines(text[:index])
    line = prefix.count("\n") + 1
    return line, _index_in_line(prefix) + 1


def _index_in_line(prefix: str) -> int:
    """Characters between the last newline in ``prefix`` and its end."""
    return len(prefix) - (prefix.rfind("\n") + 1)


def _check_characters(text: str, file: Optional[str]) -> None:
    """Reject NUL and lone surrogates, which no UTF-8 source file can contain."""
    for pattern, what in ((_NUL, "a NUL character"), (_SURROGATE, "a lone surrogate")):
        match = pattern.search(text)
        if match is not None:
            line, column = _line_and_column(text, match.start())
            raise HNDLError(
                "E_SYNTAX",
                f"configuration source contains {what}",
                line=line,
                column=column,
                file=file,
                remedies=("Remove the character; source must be valid UTF-8 text.",),
            )


def _check_size(text: str, budgets: Mapping[str, int], file: Optional[str]) -> None:
    """Apply the byte and line budgets before anything is dedented or parsed."""
    limit = budgets["max_source_bytes"]
    # Every character is at least one UTF-8 byte, so a long string fails without encoding.
    size = len(text) if len(text) > limit else len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise HNDLError(
            "E_RESOURCE",
            f"configuration source is {'more than ' if len(text) > limit else ''}{size} "
            f"UTF-8 bytes; the limit is {limit}",
            file=file,
            remedies=("Shrink the source, or raise max_source_bytes explicitly.",),
        )


def _check_lines(normalized: str, budgets: Mapping[str, int], file: Optional[str]) -> None:
    """Apply the line budget to newline-normalized text."""
    limit = budgets["max_source_lines"]
    lines = _count_lines(normalized)
    if lines > limit:
        raise HNDLError(
            "E_RESOURCE",
            f"configuration source has {lines} lines; the limit is {limit}",
            line=limit + 1,
            file=file,
            remedies=("Shrink the source, or raise max_source_lines explicitly.",),
        )


def _load(text: object, budgets: Optional[Mapping[str, int]], file: Optional[str]) -> Source:
    """Shared string/file pipeline: type, bytes, characters, lines, then dedent."""
    if not isinstance(text, str):
        raise HNDLError(
            "E_SCHEMA",
            f"configuration source must be a str, not {type(text).__name__}",
            file=file,
            remedies=("Pass the source text as a str; use the file APIs for paths.",),
        )
    resolved = resolve_budgets(budgets)
    _check_size(text, resolved, file)
    _check_characters(text, file)
    normalized = _normalize_newlines(text)
    _check_lines(normalized, resolved, file)
    return Source(text=textwrap.dedent(normalized), original=text, file=file)


def load_text(text: str, *, budgets: Optional[Mapping[str, int]] = SOURCE_BUDGETS) -> Source:
    """Bound, check and dedent a configuration string; nothing is parsed here."""
    return _load(text, budgets, None)


def _decode(data: bytes, path: str, what: str = "configuration file") -> str:
    """Strict UTF-8 decoding; the first bad byte is reported by line and column."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start].decode("utf-8")
        line, column = _line_and_column(prefix, len(prefix))
        raise HNDLError(
            "E_SYNTAX",
            f"{what} is not valid UTF-8: byte 0x{data[exc.start]:02x} "
            f"at offset {exc.start} ({exc.reason})",
            line=line,
            column=column,
            file=path,
            remedies=("Save the file as UTF-8.",),
        ) from None
    return text[1:] if text.startswith(_BOM) else text


def load_file(
    path: Union[str, "os.PathLike[str]"], *, budgets: Optional[Mapping[str, int]] = SOURCE_BUDGETS
) -> Source:
    """Read a host-supplied path as bounded UTF-8, then run the string pipeline."""
    if not isinstance(path, (str, os.PathLike)):
        raise HNDLError(
            "E_SCHEMA",
            f"path must be a str or os.PathLike, not {type(path).__name__}",
            field="path",
            remedies=("Pass a filesystem path; source text goes to the string APIs.",),
        )
    name = os.fspath(path)
    if not isinstance(name, str):
        raise HNDLError(
            "E_SCHEMA",
            f"path must name a str path, not {type(name).__name__}",
            field="path",
            remedies=("Pass a str or a str-valued os.PathLike.",),
        )
    resolved = resolve_budgets(budgets)
    limit = resolved["max_source_bytes"]
    data = read_bounded(name, limit, what="configuration file",
                        remedy="Pass the path of an existing, readable regular file.")
    if len(data) > limit:
        raise _oversized(f"configuration file {name!r} is larger than {limit} bytes", name)
    return _load(_decode(data, name), resolved, name)


def read_stream(
    stream: BinaryIO, *, name: str = "standard input", budgets: Optional[Mapping[str, int]] = SOURCE_BUDGETS
) -> str:
    """Configuration text from a binary stream the host chose (``hndl resolve -`` reads stdin).

    Like a file, the stream is read only up to ``max_source_bytes`` and decoded as strict UTF-8,
    so an endless or oversized stream is E_RESOURCE after the bound, not a read without end.
    """
    limit = resolve_budgets(budgets)["max_source_bytes"]
    try:
        data = stream.read(limit + 1)
    except (OSError, ValueError) as exc:  # ValueError: the stream is closed
        raise HNDLError(
            "E_SCHEMA",
            f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}",
            file=name,
            remedies=("Pass configuration text on a readable stream, or the path of a file.",),
        ) from None
    if len(data) > limit:
        raise _oversized(f"{name} holds more than {limit} bytes of configuration", name)
    return _decode(data, name, name)


def _oversized(message: str, name: str) -> HNDLError:
    """E_RESOURCE for a file or stream that holds more than ``max_source_bytes``."""
    return HNDLError("E_RESOURCE", message, file=name,
                     remedies=("Shrink the source, or raise max_source_bytes explicitly.",))
