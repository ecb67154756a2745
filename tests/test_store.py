"""The authority's schema and its rare writes, done through sqlite-utils on our own connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from deplog.authority.storage import store
from deplog.authority.storage.sqlite import SqliteDatabase


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = SqliteDatabase(tmp_path / "log.db")
    c = db.connect()
    db.prepare(c)
    yield c
    c.close()


def test_creating_the_schema_leaves_the_connection_settings_alone(
    conn: sqlite3.Connection,
) -> None:
    assert conn.execute("PRAGMA recursive_triggers").fetchone() == (0,)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL


def test_creating_the_schema_again_keeps_every_row(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    conn.execute(
        "INSERT INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?)",
        (0, b"\x00" * 32, b"note", "2026-01-01T00:00:00Z"),
    )
    store.save_registry_snapshot(conn, 1, "{}")
    SqliteDatabase(tmp_path / "log.db").prepare(conn)
    assert store.checkpoint_at(conn, 0) == store.StoredCheckpoint(0, b"\x00" * 32, b"note")
    assert store.registry_snapshot(conn) == (1, "{}")


def test_a_registry_snapshot_replaces_the_previous_one(conn: sqlite3.Connection) -> None:
    store.save_registry_snapshot(conn, 1, '{"a": 1}')
    store.save_registry_snapshot(conn, 2, '{"a": 2}')
    assert store.registry_snapshot(conn) == (2, '{"a": 2}')
    assert conn.execute("SELECT count(*) FROM registry").fetchone() == (1,)


def test_a_registry_snapshot_commits_only_with_the_callers_transaction(
    conn: sqlite3.Connection,
) -> None:
    store.save_registry_snapshot(conn, 1, '{"a": 1}')
    conn.execute("BEGIN IMMEDIATE")
    store.save_registry_snapshot(conn, 2, '{"a": 2}')
    assert conn.in_transaction
    conn.execute("ROLLBACK")
    assert store.registry_snapshot(conn) == (1, '{"a": 1}')
