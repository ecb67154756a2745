"""Why a SQLite database could not be opened, told apart so the operator does the right thing.

The log and both witnesses report a failed open through ``database_fault``. Rules:

1. Evidence decides, never the exception's class: SQLite's extended result code, then
   the ``errno`` of our own probe of the same files, then the free space.
2. Each kind has a stable name (the message's first word) and exit status (sysexits):
   permission 77, disk full 73, I/O 74, proven corruption 65; else
   ``storage_unavailable``, 1. A named path that leads to no file (``file_fault``) is a
   usage error, 2, in every command.
3. Corruption only when proven: ``SQLITE_CORRUPT`` alone is not (a failing read looks
   the same), so ``PRAGMA integrity_check`` must report a problem; the log's own checks
   against what it signed prove it too (``CORRUPT``).
4. Only proven corruption mentions backups: one holding every published checkpoint.
5. The message is one line naming files and evidence (codes, never data).
6. ``disk_full``: the same evidence for a write that failed while serving (SQLite's
   ``SQLITE_FULL``, ``ENOSPC``/``EDQUOT``, PostgreSQL's SQLSTATE 53100 ``disk_full``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from deplog.client.errors import CLIError

LOW_SPACE_BYTES = 64 * 1024
"""Free space below which a failed write is taken for a full file system."""


@dataclass(frozen=True)
class FaultKind:
    """One kind of storage failure: its stable code, exit status, summary and advice."""

    code: str
    exit_status: int
    summary: str
    advice: str


PERMISSION_DENIED = FaultKind(
    "storage_permission_denied",
    77,
    "permission denied",
    "give the user running this process read and write access to the directory and its "
    "database files (also -wal and -shm), then start again; the data is not damaged",
)
DISK_FULL = FaultKind(
    "storage_full",
    73,
    "the file system is full",
    "free space on it, then start again; nothing that was acknowledged is lost",
)
IO_ERROR = FaultKind(
    "storage_io_error",
    74,
    "an I/O error",
    "check the device and the kernel log (dmesg) and start again once it is healthy; do "
    "not restore a backup: nothing shows the data is damaged",
)
CORRUPT = FaultKind(
    "storage_corrupt",
    65,
    "the stored data is corrupt (proven)",
    "keep every file as it is, locate the damage ('authority check' for a log), and restore "
    "only a backup holding every checkpoint ever published: an older copy forks the log",
)
UNAVAILABLE = FaultKind(
    "storage_unavailable",
    1,
    "the database could not be opened",
    "read the evidence, fix its cause, then start again; do not restore a backup: nothing "
    "shows the data is damaged",
)

_PERMISSION_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_PERMISSION_CODES = frozenset({sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_AUTH})
_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class StorageFault(CLIError):
    """A database that cannot be used, classified by evidence (rules 1, 2)."""

    def __init__(self, kind: FaultKind, path: Path | str, evidence: str) -> None:
        self.kind = kind
        self.path = path
        self.evidence = evidence
        self.code = kind.code
        message = f"{kind.code}: {kind.summary} on {path} ({evidence}): {kind.advice}"
        super().__init__(message, kind.exit_status)


_FILE_ADVICE = {
    PERMISSION_DENIED.code: "give the user running this command access to it and its directory",
    DISK_FULL.code: "free space on its file system",
    IO_ERROR.code: "check the device and the kernel log (dmesg)",
}


def file_fault(err: OSError, doing: str = "use") -> CLIError:
    """A file an operator named that cannot be used: one line and its kind's status (rule 2)."""
    where = f" {err.filename}" if err.filename else ""
    reason = err.strerror or type(err).__name__
    kind = _kind_of(err.errno)
    if kind is None:
        usage = err.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
        return CLIError(f"cannot {doing}{where}: {reason}; check the path", 2 if usage else 1)
    evidence = _errno_name(err.errno)
    return CLIError(
        f"cannot {doing}{where}: {reason} ({evidence}); {_FILE_ADVICE[kind.code]}",
        kind.exit_status,
    )


def database_files(path: Path) -> tuple[Path, Path, Path]:
    """The database and the WAL-mode files SQLite keeps beside it."""
    return path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")


def integrity_problem(path: Path) -> str | None:
    """The first problem ``PRAGMA integrity_check`` reports on ``path``, or None."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            rows = conn.execute("PRAGMA integrity_check(1)").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:
        if _primary_code(err) in _CORRUPT_CODES:
            return _name(err)
        raise
    return None if rows == [("ok",)] else "integrity_check reports a problem"


def database_fault(err: sqlite3.Error | OSError, path: Path) -> StorageFault:
    """Classify a failure to open or read the database at ``path`` (rules 1-3)."""
    if isinstance(err, OSError):
        return _from_errno(err.errno, path, _errno_name(err.errno)) or StorageFault(
            UNAVAILABLE, path, _errno_name(err.errno)
        )
    code, name = _primary_code(err), _name(err)
    if code in _CORRUPT_CODES:
        return _prove_corruption(path, name)
    if code == sqlite3.SQLITE_FULL:
        return StorageFault(DISK_FULL, path, name)
    probed = _probe(path)
    if probed is not None:
        fault = _from_errno(probed, path, f"{name}, {_errno_name(probed)}")
        if fault is not None:
            return fault
    if _low_on_space(path.parent):
        return StorageFault(DISK_FULL, path, f"{name}, under {LOW_SPACE_BYTES} bytes free")
    if code in _PERMISSION_CODES:
        return StorageFault(PERMISSION_DENIED, path, name)
    if code in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN):
        return StorageFault(IO_ERROR, path, name)
    return StorageFault(UNAVAILABLE, path, name)


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` shows a full file system or quota (rule 6)."""
    if isinstance(err, StorageFault):
        return err.kind is DISK_FULL
    if isinstance(err, sqlite3.Error):
        return _primary_code(err) == sqlite3.SQLITE_FULL
    if isinstance(err, OSError):
        return err.errno in _FULL_ERRNOS
    return getattr(err, "sqlstate", None) == "53100"


def _prove_corruption(path: Path, name: str) -> StorageFault:
    try:
        problem = integrity_problem(path)
    except sqlite3.Error as check_failed:
        fault = database_fault(check_failed, path)  # never CORRUPT: those codes are returned
        return StorageFault(fault.kind, path, f"{name}; integrity_check failed: {fault.evidence}")
    if problem is not None:
        return StorageFault(CORRUPT, path, f"{name}; {problem}")
    return StorageFault(IO_ERROR, path, f"{name} on a read, but integrity_check passes")


def _kind_of(number: int | None) -> FaultKind | None:
    if number in _PERMISSION_ERRNOS:
        return PERMISSION_DENIED
    if number in _FULL_ERRNOS:
        return DISK_FULL
    return IO_ERROR if number == errno.EIO else None


def _from_errno(number: int | None, path: Path, evidence: str) -> StorageFault | None:
    kind = _kind_of(number)
    return None if kind is None else StorageFault(kind, path, evidence)


def _probe(path: Path) -> int | None:
    """The errno our own open of the database files (or of the directory) fails with."""
    directory = path.parent
    if not directory.is_dir():
        return errno.ENOENT
    if not os.access(directory, os.W_OK | os.X_OK):
        return errno.EACCES
    for file in database_files(path.absolute()):  # the very path SQLite opened
        try:
            fd = os.open(file, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as err:
            return err.errno
        try:
            os.pread(fd, 100, 0)
        except OSError as err:
            return err.errno
        finally:
            os.close(fd)
    return None


def _low_on_space(directory: Path) -> bool:
    try:
        stats = os.statvfs(directory)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < LOW_SPACE_BYTES


def _primary_code(err: sqlite3.Error) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _name(err: sqlite3.Error) -> str:
    return str(getattr(err, "sqlite_errorname", None) or type(err).__name__)


def _errno_name(number: int | None) -> str:
    return errno.errorcode.get(number, "errno unknown") if number is not None else "no errno"


@contextlib.contextmanager
def opening_database(path: Path, close: Callable[[], None]) -> Iterator[None]:
    """Open a database in this block: a failure is a ``StorageFault``, leaving no new file."""
    existed = {file for file in database_files(path) if file.exists()}
    try:
        yield
    except (sqlite3.Error, OSError) as err:
        fault = database_fault(err, path)
        close()
        if path not in existed:
            for file in database_files(path):
                if file not in existed:
                    with contextlib.suppress(FileNotFoundError):
                        file.unlink()
        raise fault from None
