"""Files never seen half-written, and data directories owned by one process at a time.

Rules:

1. ``write_atomic``: a reader of ``path`` sees the old file or the complete new
   one, never a part of it. The bytes go to a temporary file in the same
   directory (so the rename cannot cross file systems), which is fsynced, renamed
   over ``path``, and the directory is fsynced, so once it returns the new file
   survives a crash. If writing fails, ``path`` is untouched and the temporary
   file is removed.
2. The written file's mode is exactly ``mode`` (0644 unless the caller asks for
   another): neither the umask nor the mode of the file it replaces changes it.
3. ``exclusive_lock``: at most one holder of a lock file at a time, across
   processes and across separate opens in one process (``flock`` locks an open
   file description). The lock goes with the holder: it is released when the
   ``with`` block ends or the process dies, so it is never left stale; the lock
   file itself stays and means nothing on its own.
4. ``output_closed``: a command whose standard output's reader went away (``| head``)
   ends quietly with ``EXIT_OUTPUT_CLOSED``, as a tool stopped by ``SIGPIPE`` would,
   and not with a "cannot use" message about a file nobody named.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

__all__ = [
    "EXIT_OUTPUT_CLOSED",
    "exclusive_lock",
    "output_closed",
    "require_writable",
    "write_atomic",
]

_BUFFER: Final = 1 << 16
EXIT_OUTPUT_CLOSED: Final = 141
"""128 + ``SIGPIPE``: what a shell shows for a command the signal stopped (rule 4)."""


def output_closed() -> int:
    """Standard output's reader is gone (rule 4): point the descriptor at the null device,
    so the interpreter's last flush has nowhere to fail, and return the exit status."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return EXIT_OUTPUT_CLOSED


def write_atomic(path: Path, chunks: Iterable[bytes], *, mode: int = 0o644) -> None:
    """Replace ``path`` with the concatenation of ``chunks``, all or nothing (rules 1, 2).

    ``chunks`` is consumed once, as it is written, so it may be a stream; if it
    raises, the exception propagates and ``path`` is unchanged.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)


def require_writable(*directories: Path) -> None:
    """Raise ``PermissionError`` naming the first of ``directories`` (or, for one not yet
    created, its nearest existing ancestor) this process may not create files in.

    Called before a command creates anything, so a directory it cannot write
    leaves nothing half-created elsewhere.
    """
    for directory in directories:
        existing = directory
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(existing))


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX keeps names in the directory)."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def exclusive_lock(lock_file: Path) -> Iterator[bool]:
    """Yield True if this holder now owns ``lock_file`` (rule 3), False if another does.

    Never waits: a caller that finds the lock taken decides what to do (refuse to
    start, or hand its work to the process that holds it). The file is created
    0600 if missing.
    """
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
