"""Reading a host-supplied file without trusting it: at most a bound, never blocking.

Configuration files and saved plans both come in by path. A path may name a directory, a FIFO,
a device or something that vanished, and each of those must become E_SCHEMA naming the path,
never a raw ``OSError`` or a read that waits forever.
"""

from __future__ import annotations

import os
import stat

from .errors import MAX_NAME_CHARS, HNDLError, echo

__all__ = ["read_bounded"]


def _unreadable(path: str, what: str, why: str, remedy: str) -> HNDLError:
    # the path is cut before the message is, so the reason at its end is always shown
    return HNDLError("E_SCHEMA", f"cannot read {what} '{echo(path, MAX_NAME_CHARS)}': {why}", file=path,
                     remedies=(remedy,))


def read_bounded(path: str, limit: int, *, what: str, remedy: str) -> bytes:
    """At most ``limit + 1`` bytes of the regular file ``path``, opened non-blocking.

    ``what`` names the file in the message ("configuration file", "the saved plan"). Anything
    but a readable regular file is E_SCHEMA; the caller compares the length with ``limit``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _unreadable(path, what, "no such file", remedy) from None
    except IsADirectoryError:
        raise _unreadable(path, what, "it is a directory", remedy) from None
    except ValueError:  # os.open's only ValueError: an embedded NUL, which no file name can hold
        raise _unreadable(path, what, "the name contains a NUL byte", remedy) from None
    except OSError as exc:
        raise _unreadable(path, what, exc.strerror or type(exc).__name__, remedy) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _unreadable(path, what, "it is a directory", remedy)
        if not stat.S_ISREG(info.st_mode):
            raise _unreadable(path, what, "it is not a regular file", remedy)
        chunks, remaining = [], limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _unreadable(path, what, exc.strerror or type(exc).__name__, remedy) from None
    finally:
        os.close(fd)
