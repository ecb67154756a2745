"""The classification of database failures (client/plumbing/storage_faults.py), rule by rule.

Real files and real SQLite errors; the syscall-level faults (EACCES, EIO,
ENOSPC from the kernel) are injected into real servers by
tests/integration/test_syscall_faults.py.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from deplog.client.plumbing.storage_faults import (
    CORRUPT,
    DISK_FULL,
    IO_ERROR,
    PERMISSION_DENIED,
    StorageFault,
    database_fault,
    database_files,
    disk_full,
    file_fault,
    integrity_problem,
    opening_database,
)


def sqlite_error(path: Path, sql: str) -> sqlite3.Error:
    """The error SQLite itself raises running ``sql`` on ``path``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql)
    except sqlite3.Error as err:
        return err
    finally:
        conn.close()
    raise AssertionError("the statement did not fail")


def healthy_database(path: Path) -> Path:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("INSERT INTO t VALUES (randomblob(50000))")
    conn.close()
    return path


def test_a_file_that_is_no_database_is_proven_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    path.write_bytes(b"not a database, not at all" * 200)
    fault = database_fault(sqlite_error(path, "SELECT * FROM sqlite_master"), path)
    assert (fault.kind, fault.exit_status) == (CORRUPT, 65)
    assert fault.evidence == "SQLITE_NOTADB; SQLITE_NOTADB"


def test_a_damaged_page_is_proven_corrupt_by_integrity_check(tmp_path: Path) -> None:
    path = healthy_database(tmp_path / "log.db")
    with open(path, "r+b") as f:  # the table's root page header, after the schema page
        f.seek(4096)
        f.write(b"\xff" * 16)
    assert integrity_problem(path) is not None
    error = sqlite3.DatabaseError("database disk image is malformed")
    error.sqlite_errorcode = sqlite3.SQLITE_CORRUPT  # type: ignore[attr-defined]
    assert database_fault(error, path).kind is CORRUPT


def test_sqlite_corrupt_without_proof_is_an_io_error_and_never_advises_a_restore(
    tmp_path: Path,
) -> None:
    """A failing read can make SQLite say SQLITE_CORRUPT: integrity_check decides."""
    path = healthy_database(tmp_path / "log.db")
    error = sqlite3.DatabaseError("database disk image is malformed")
    error.sqlite_errorcode = sqlite3.SQLITE_CORRUPT  # type: ignore[attr-defined]
    fault = database_fault(error, path)
    assert (fault.kind, fault.exit_status) == (IO_ERROR, 74)
    assert "integrity_check passes" in fault.evidence
    assert "do not restore a backup" in str(fault)


def test_sqlite_full_is_a_full_disk(tmp_path: Path) -> None:
    path = healthy_database(tmp_path / "log.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA max_page_count = 1")
    with pytest.raises(sqlite3.Error) as full:
        conn.execute("INSERT INTO t VALUES (randomblob(100000))")
    conn.close()
    fault = database_fault(full.value, path)
    assert (fault.kind, fault.exit_status, fault.evidence) == (DISK_FULL, 73, "SQLITE_FULL")


def test_a_write_failing_on_a_full_disk_is_told_from_other_failures(tmp_path: Path) -> None:
    """Rule 6: SQLite's SQLITE_FULL, ENOSPC and EDQUOT, SQLSTATE 53100; nothing else."""
    path = healthy_database(tmp_path / "log.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA max_page_count = 1")
    with pytest.raises(sqlite3.Error) as full:
        conn.execute("INSERT INTO t VALUES (randomblob(100000))")
    conn.close()
    locked = sqlite_error(tmp_path / "other.db", "SELECT * FROM missing")
    pg_full = pytest.importorskip("psycopg").errors.DiskFull("could not extend file")

    assert [
        disk_full(err)
        for err in (
            full.value,
            OSError(errno.ENOSPC, "full"),
            OSError(errno.EDQUOT, "quota"),
            pg_full,
            locked,
            OSError(errno.EIO, "io"),
            RuntimeError(),
        )
    ] == [True, True, True, True, False, False, False]


@pytest.mark.parametrize(
    ("number", "kind"),
    [
        (errno.EACCES, PERMISSION_DENIED),
        (errno.EPERM, PERMISSION_DENIED),
        (errno.EROFS, PERMISSION_DENIED),
        (errno.ENOSPC, DISK_FULL),
        (errno.EDQUOT, DISK_FULL),
        (errno.EIO, IO_ERROR),
    ],
)
def test_an_os_error_is_classified_by_its_errno(tmp_path: Path, number: int, kind: object) -> None:
    fault = database_fault(OSError(number, "x"), tmp_path / "log.db")
    assert fault.kind is kind
    assert fault.evidence == errno.errorcode[number]


@pytest.mark.parametrize(
    ("number", "status"),
    [
        (errno.EACCES, 77),
        (errno.EROFS, 77),
        (errno.ENOSPC, 73),
        (errno.EIO, 74),
        (errno.ENOTDIR, 2),  # a path that leads nowhere: a usage error, as in every command
        (errno.EBUSY, 1),
    ],
)
def test_an_unusable_file_is_one_line_naming_it_with_its_kinds_status(
    tmp_path: Path, number: int, status: int
) -> None:
    lock = tmp_path / "data" / "authority.lock"
    fault = file_fault(OSError(number, os.strerror(number), str(lock)))
    assert fault.exit_status == status
    assert fault.message.startswith(f"cannot use {lock}: {os.strerror(number)}")
    assert "\n" not in fault.message


def test_the_exit_statuses_are_distinct() -> None:
    statuses = [k.exit_status for k in (PERMISSION_DENIED, DISK_FULL, IO_ERROR, CORRUPT)]
    assert len(set(statuses)) == 4 and 1 not in statuses


def test_only_proven_corruption_mentions_restoring_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    for kind in (PERMISSION_DENIED, DISK_FULL, IO_ERROR):
        message = str(StorageFault(kind, path, "evidence"))
        assert "restore" not in message or "do not restore" in message
        assert "\n" not in message
    assert "restore only a backup holding every checkpoint" in str(
        StorageFault(CORRUPT, path, "leaf 2 does not match its stored hash")
    )


def test_a_failed_open_removes_the_files_it_created(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    opened: list[sqlite3.Connection] = []
    with pytest.raises(StorageFault), opening_database(path, lambda: opened[0].close()):
        conn = sqlite3.connect(path, isolation_level=None)
        opened.append(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("SELECT * FROM no_such_table")
    assert not any(file.exists() for file in database_files(path))


def test_a_failed_open_leaves_an_existing_database_alone(tmp_path: Path) -> None:
    path = healthy_database(tmp_path / "log.db")
    before = path.read_bytes()
    conn = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(StorageFault), opening_database(path, conn.close):
        conn.execute("SELECT * FROM no_such_table")
    assert path.read_bytes() == before
