"""Files never seen half-written, and data directories owned by one process at a time.

Rules:

1. ``write_atomic``: a reader of ``path`` sees the old file or the complete new one (a
   temporary file beside it, fsynced, renamed over it, the directory fsynced); a failed
   write leaves ``path`` untouched and no temporary file.
2. The written file's mode is exactly ``mode`` (0644 unless asked), whatever the umask;
   ``exclusive`` never replaces an existing file (``FileExistsError``).
5. ``write_private``: a secret (a private key) is written as in rules 1 and 2 at 0600,
   exclusively, in a directory that is 0700: made so, or closed to group and others
   first (a checked-in ``keys/`` is 0755 in a fresh clone).
3. ``exclusive_lock``: one holder of a lock file at a time, across processes and opens
   (``flock``); the lock goes with its holder, so it is never left stale.
4. ``output_closed``: a command whose stdout's reader went away (``| head``) ends quietly
   with ``EXIT_OUTPUT_CLOSED``, as one stopped by ``SIGPIPE`` would.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

_BUFFER: Final = 1 << 16
EXIT_OUTPUT_CLOSED: Final = 141
"""128 + ``SIGPIPE``: what a shell shows for a command the signal stopped (rule 4)."""


def output_closed() -> int:
    """Standard output's reader is gone (rule 4): the last flush goes nowhere; the status."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return EXIT_OUTPUT_CLOSED


def write_atomic(
    path: Path, chunks: Iterable[bytes], *, mode: int = 0o644, exclusive: bool = False
) -> None:
    """Replace ``path`` with the concatenation of ``chunks``, all or nothing (rules 1, 2)."""
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
        if exclusive:
            os.link(tmp, path)  # FileExistsError rather than a rename over it
            tmp.unlink()
        else:
            tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_directory(path.parent)


def write_private(path: Path, chunks: Iterable[bytes]) -> None:
    """Create the secret file ``path`` (rule 5): 0600, all or nothing, never over another."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.parent.stat().st_mode)
    if mode & 0o077:
        path.parent.chmod(mode & 0o700)
    write_atomic(path, chunks, mode=0o600, exclusive=True)


def require_writable(*directories: Path) -> None:
    """Raise ``PermissionError`` naming the first of ``directories`` this process cannot write."""
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
    """Yield whether this holder now owns ``lock_file`` (rule 3); never waits."""
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
