"""Every row of every table of a log's database: the evidence that a refusal changed nothing;
and what a follower's state file holds (``follower_state``).

A checkpoint that stays byte-identical says the signed state did not move; it does not say
that no registry row, index row or half-written leaf was left behind. ``table_rows`` reads
the database itself, on either backend, so a test can compare before and after. On SQLite
a file hash would also see page reuse and WAL checkpoints, which are not changes of the
log; rows are what the log is, so both backends are compared the same way.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

__all__ = ["Rows", "follower_state", "table_rows"]

Rows = dict[str, list[tuple[object, ...]]]
"""Table name -> its rows, in a stable order (rows sorted by their ``repr``)."""


def table_rows(db: str | Path) -> Rows:
    """Every row of every table of ``db`` (a SQLite path or a ``postgresql://`` URL)."""
    if isinstance(db, str) and db.startswith(("postgresql://", "postgres://")):
        return _postgres_rows(db)
    return _sqlite_rows(Path(db))


def _sorted(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return sorted((tuple(row) for row in rows), key=repr)


def _sqlite_rows(path: Path) -> Rows:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {name: _sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall()) for name in names}
    finally:
        conn.close()


def _postgres_rows(url: str) -> Rows:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        names = [
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
            )
        ]
        return {
            name: _sorted(conn.execute(f'SELECT * FROM "{name}"'.encode()).fetchall())
            for name in names
        }


def follower_state(path: Path) -> dict[str, object]:
    """What a follower's state file holds, but for the local times of processing: two
    syncs of the same log, however interrupted, must leave equal ones."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        state: dict[str, object] = {
            "trusted": conn.execute(
                "SELECT origin, size, root, frontier, registry FROM trusted"
            ).fetchall(),
            "notices": conn.execute(
                "SELECT idx, tool_id, notice FROM notices ORDER BY idx"
            ).fetchall(),
            "sequences": conn.execute("SELECT * FROM sequences ORDER BY 1, 2").fetchall(),
            "pending": conn.execute("SELECT done FROM pending").fetchall(),
        }
        # The tool-status map, kept beside the chunks (mapcheck rule 1), if any yet.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'map_state'").fetchone():
            state["map"] = conn.execute("SELECT size, root_hash FROM map_state").fetchall()
            state["map_records"] = conn.execute("SELECT * FROM map_record ORDER BY 1").fetchall()
        return state
