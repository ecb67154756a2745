"""The SQLite backend: the log in one file, its connections and its DDL.

The embedded default (``--data``'s ``log.db``); the queries every backend runs are in
``store``, ``tree`` and ``reader``.

Rules, cited by name:
  * **Durable.** WAL mode with ``synchronous=FULL``: a committed transaction survives a
    kill or a power cut.
  * **One writer.** One process writes it (the server holds ``authority.lock``), through
    one connection, ``BEGIN IMMEDIATE``; readers see committed snapshots, so the writer's
    plain reads agree without a transaction and it may hold the map's rows back.
  * **Schema at open.** ``prepare`` creates what is missing and never touches existing
    rows (no ``migrate``); a map of another record format is dropped and folded again.
  * **Faults by evidence.** A failure to open or read the file is classified by evidence
    (``client.plumbing.storage_faults``), and a file the failed attempt created is removed.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import sqlite_utils

from deplog.authority.storage.database import Database
from deplog.client.errors import CLIError
from deplog.client.map.sqlstore import STORE_FORMAT
from deplog.client.map.stored import StoredMap
from deplog.client.plumbing.dbapi import Connection, Query
from deplog.client.plumbing.storage_faults import database_fault, database_files, opening_database

BUSY_TIMEOUT_MS = 5000
WRITER_CACHE_KIB = 64 * 1024
"""SQLite's page cache on the writer's connection (64 MiB, against SQLite's default
2 MB): the pages of the map's paths and the tree's recent nodes stay in memory."""

_TREE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS leaves (
        idx INTEGER PRIMARY KEY,
        data BLOB NOT NULL,
        hash BLOB NOT NULL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS nodes (
        level INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        hash BLOB NOT NULL,
        PRIMARY KEY (level, idx)
    ) STRICT, WITHOUT ROWID""",
    # Append-only: contiguous indices are what make a leaf index meaningful.
    *(
        f"""CREATE TRIGGER IF NOT EXISTS {table}_append_only_{op.lower()} BEFORE {op} ON {table}
        BEGIN SELECT RAISE(ABORT, '{table} are append-only'); END"""
        for table in ("leaves", "nodes")
        for op in ("UPDATE", "DELETE")
    ),
)
"""The tree's tables (``tree.py``: leaves and stored subtree hashes), append-only."""


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection with explicit transactions (``BEGIN``/``COMMIT``) and durable commits."""
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    else:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _database(conn: sqlite3.Connection) -> sqlite_utils.Database:
    """sqlite-utils over our connection, no plugins, writes committed with ours."""
    return sqlite_utils.Database(conn, recursive_triggers=False, execute_plugins=False)


_TABLES: tuple[tuple[str, dict[str, type], str | tuple[str, ...], set[str], str], ...] = (
    (
        "checkpoints",
        {"size": int, "root": bytes, "note": bytes, "signed_at": str},
        "size",
        {"root", "note", "signed_at"},
        "",
    ),
    (
        "notices",
        {"publisher": str, "sequence": int, "idx": int, "digest": bytes},
        ("publisher", "sequence"),
        {"idx", "digest"},
        "CREATE INDEX IF NOT EXISTS notices_by_idx ON notices (idx)",
    ),
    ("tool_entries", {"tool_id": str, "idx": int}, ("tool_id", "idx"), set(), ""),
    ("tools", {"tool_id": str, "first_idx": int}, "tool_id", {"first_idx"}, ""),
    (
        "invalid_entries",
        {"idx": int, "code": str, "cause": str, "tool_id": str},
        "idx",
        {"code"},
        "CREATE INDEX IF NOT EXISTS invalid_by_tool ON invalid_entries (tool_id, idx)",
    ),
    ("published", {"id": int, "size": int, "note": bytes}, "id", {"size", "note"}, ""),
    ("registry", {"id": int, "size": int, "state": str}, "id", {"size", "state"}, ""),
)
"""The tables besides the tree's and the map's: name, columns, key, not-null, an index."""


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create every table that is missing (*Schema at open*); existing data is never touched."""
    for statement in _TREE_SCHEMA:
        conn.execute(statement)
    if StoredMap.create_schema(conn):
        logging.getLogger("deplog.authority").info(
            "dropped a tool-status map of another store format: it is folded again "
            "from the log in format %d",
            STORE_FORMAT,
        )
    db = _database(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        new_tools = db.table("tool_entries").exists() and not db.table("tools").exists()
        for name, columns, key, not_null, index in _TABLES:
            db.table(name).create(
                columns, pk=key, not_null=not_null, if_not_exists=True, strict=True
            )
            if index:
                conn.execute(index)
        if new_tools:  # a log from before the tools table
            conn.execute(
                "INSERT INTO tools SELECT tool_id, min(idx) FROM tool_entries GROUP BY tool_id"
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SqliteDatabase(Database):
    """The embedded default: one SQLite file in WAL mode, written by one process."""

    shared: ClassVar[bool] = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.errors = (sqlite3.Error,)

    def describe(self) -> str:
        return str(self.path)

    def passed_to_child(self, variable: str) -> tuple[str, dict[str, str]]:
        return str(self.path), {}

    def exists(self) -> bool:
        return self.path.exists()

    def cannot_create(self) -> str | None:
        return None if self.path.parent.is_dir() else f"{self.path.parent} is not a directory"

    def discard(self) -> None:
        for file in database_files(self.path):
            with contextlib.suppress(FileNotFoundError):
                file.unlink()

    def connect(self, readonly: bool = False) -> Connection:
        return _connect(self.path, readonly=readonly)

    def connect_writer(self) -> Connection:
        conn = _connect(self.path)
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        return conn

    def prepare(self, conn: Connection) -> None:
        _create_schema(conn)  # type: ignore[arg-type]

    def require_current(self, conn: Connection) -> None:
        found = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
            "('leaves', 'checkpoints', 'map_state')"
        ).fetchone()[0]
        if found != 3 or StoredMap.other_format(conn):  # type: ignore[arg-type]
            raise CLIError(
                f"{self.path} is not a log of this version: start the authority on it once "
                "(it brings the log up to date), then copy"
            )

    def begin_write(
        self, conn: Connection, reads: Sequence[Query] = ()
    ) -> tuple[int | None, list[list[Any]]]:
        conn.execute("BEGIN IMMEDIATE")
        return None, [conn.execute(sql, params).fetchall() for sql, params in reads]

    def begin_unordered(self, conn: Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def begin_read(self, conn: Connection) -> None:
        conn.execute("BEGIN")

    def limit_size(self, conn: Connection, max_bytes: int) -> None:
        """Writes past ``max_bytes`` fail like a full disk."""
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")

    def fault(self, err: Exception) -> CLIError:
        assert isinstance(err, sqlite3.Error | OSError)
        return database_fault(err, self.path)

    @contextlib.contextmanager
    def opening(self, close: Callable[[], None]) -> Iterator[None]:
        """*Faults by evidence*."""
        with opening_database(self.path, close):
            yield
