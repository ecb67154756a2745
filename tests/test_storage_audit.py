"""The storage audit, run as the serving authority runs it: ``python -m`` on a real log file.

Its contract: one JSON line, exit 0 for storage exactly as appended, 1 naming the
first problem, 2 when the file cannot be audited at all; the file is never changed.
The findings run on both backends (a SQLite file and a PostgreSQL database).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deplog.authority.storage.audit import (
    DB_ENV,
    EXIT_CORRUPT,
    EXIT_OK,
    EXIT_UNREADABLE,
    NICENESS,
    audit_storage,
    lower_priority,
)
from deplog.authority.storage.backends import is_postgres_url
from tests.builders import LocalLog
from tests.conftest import Backend
from tests.dbrows import table_rows

NOTICES = 20  # with the registration, 21 leaves: subtree hashes up to level 4


COMMAND = [sys.executable, "-m", "deplog.authority.storage.audit"]


def run_audit(db: str | Path) -> subprocess.CompletedProcess[str]:
    """As the serving authority runs it: a path in argv, a PostgreSQL URL in the
    environment (``-`` in argv, so a password is never in argv)."""
    if is_postgres_url(str(db)):
        argv, env = [*COMMAND, "-"], dict(os.environ, **{DB_ENV: str(db)})
    else:
        argv, env = [*COMMAND, str(db)], None
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)


def niceness(pid: int) -> int:
    """The nice value of a running process (proc(5): field 19 of /proc/<pid>/stat)."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(after_name[16])


@pytest.fixture
def local(tmp_path: Path, backend: Backend) -> LocalLog:
    """The audit runs on both backends: a SQLite file, or a PostgreSQL database."""
    return LocalLog(tmp_path, None if backend.kind == "sqlite" else backend.db)


@pytest.fixture
def db(local: LocalLog) -> str:
    """A closed authority database: a registration and ``NOTICES`` notices."""
    for _ in range(NOTICES):
        local.publish()
    local.log.close()
    return local.db


_ON_POSTGRES = {
    "x'00'": "'\\x00'::bytea",
    "zeroblob(32)": "decode(repeat('00', 32), 'hex')",
}


def tamper(db: str, *statements: str) -> None:
    """Change stored rows behind the log's back (its append-only triggers set aside first)."""
    if is_postgres_url(db):
        import psycopg

        with psycopg.connect(db) as pg:
            pg.execute("ALTER TABLE leaves DISABLE TRIGGER USER")
            pg.execute("ALTER TABLE nodes DISABLE TRIGGER USER")
            for statement in statements:
                for sqlite_form, postgres_form in _ON_POSTGRES.items():
                    statement = statement.replace(sqlite_form, postgres_form)
                pg.execute(statement.encode())
        return
    conn = sqlite3.connect(db)
    for trigger in (
        "leaves_append_only_update",
        "leaves_append_only_delete",
        "nodes_append_only_update",
        "nodes_append_only_delete",
    ):
        conn.execute(f"DROP TRIGGER {trigger}")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored(db: str) -> object:
    """The database's state: the file's digest (SQLite), every row (PostgreSQL)."""
    return table_rows(db) if is_postgres_url(db) else digest(Path(db))


def test_a_log_as_appended_passes_and_is_left_unchanged(db: str) -> None:
    before = stored(db)
    done = run_audit(db)
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads(done.stdout) == {"size": NOTICES + 1, "problem": None}
    assert stored(db) == before


def test_an_altered_leaf_is_named_by_its_index(db: str) -> None:
    tamper(db, "UPDATE leaves SET data = x'00' WHERE idx = 13")
    done = run_audit(db)
    assert done.returncode == EXIT_CORRUPT
    assert json.loads(done.stdout) == {
        "size": NOTICES + 1,
        "problem": "leaf 13 does not match its stored hash",
    }


def test_an_altered_subtree_hash_is_named_by_its_leaves_and_level(db: str) -> None:
    tamper(db, "UPDATE nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 1")
    done = run_audit(db)
    assert done.returncode == EXIT_CORRUPT
    assert json.loads(done.stdout)["problem"] == "subtree hash over leaves 4.. (level 2) is wrong"


def test_a_missing_leaf_is_named(db: str) -> None:
    tamper(db, "DELETE FROM leaves WHERE idx = 7")
    done = run_audit(db)
    assert done.returncode == EXIT_CORRUPT
    assert json.loads(done.stdout)["problem"] == "leaf 7 is missing"


def test_a_hole_in_the_right_edge_is_a_finding_not_a_crash(db: str) -> None:
    # 21 leaves: the right edge is the level-4 subtree over leaves 0..15, then 16..19, then 20.
    tamper(db, "DELETE FROM nodes WHERE level = 4 AND idx = 0")
    assert audit_storage(db) == (
        NOTICES + 1,
        "a subtree hash of the tree's right edge is missing",
    )
    assert run_audit(db).returncode == EXIT_CORRUPT


def test_a_file_that_is_not_a_log_cannot_be_audited(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database, just bytes " * 100)
    done = run_audit(junk)
    assert done.returncode == EXIT_UNREADABLE
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


def test_a_missing_file_cannot_be_audited_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "absent.db"
    done = run_audit(missing)
    assert done.returncode == EXIT_UNREADABLE
    assert not missing.exists()


def test_the_audit_runs_at_low_priority_and_dies_when_killed(tmp_path: Path) -> None:
    # Opening a FIFO blocks until a writer comes: the audit is held mid-run.
    held = tmp_path / "held.db"
    os.mkfifo(held)
    process = subprocess.Popen([*COMMAND, str(held)], stdout=subprocess.PIPE)
    try:
        expected = min(19, os.nice(0) + NICENESS)
        deadline = time.monotonic() + 30
        while niceness(process.pid) != expected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert niceness(process.pid) == expected
        assert process.poll() is None
    finally:
        process.kill()
        out, _ = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert out == b""


def test_an_audit_whose_server_died_ends_quietly(db: Path) -> None:
    """SIGKILLed, the serving authority leaves its audit child a closed pipe: the child's
    result has nowhere to go, and no traceback goes to the log the two share."""
    child = subprocess.Popen([*COMMAND, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=60) == EXIT_OK
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_a_server_lowers_its_audit_childs_priority_once_and_for_all() -> None:
    """The server lowers it right after spawning (so the child's imports are niced too);
    the child lowering it again relative to the same parent changes nothing."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lower_priority(child.pid, os.getpid())
        expected = min(19, os.nice(0) + NICENESS)
        assert niceness(child.pid) == expected
        lower_priority(child.pid, os.getpid())
        assert niceness(child.pid) == expected
    finally:
        child.kill()
        child.wait()
