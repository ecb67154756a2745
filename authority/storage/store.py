"""The authority's database: the tree, signed checkpoints and lookup indexes.

The queries here run unchanged on every backend (``client.plumbing.dbapi``); each
backend's DDL is its own. Only the log's writer writes. Tables besides the tree's
(``tree.py``) and the map's (``client/map/``):
  * ``checkpoints``: every signed checkpoint, keyed by size (one root per size).
  * ``notices``: (publisher, sequence) -> leaf index and digest, for idempotent
    resubmission and unique sequence numbers.
  * ``tool_entries``: (tool_id, leaf index), so a tool's status folds only its notices.
  * ``tools``: each tool id once, with its first leaf index: what the explorer searches.
  * ``invalid_entries``: entries that fail validation, found when the map is folded from
    the leaves (docs/fold-spec.md, "Entries that fail validation").
  * ``registry``: the publisher registry and the size it reflects.
  * ``published``: under a quorum, the last checkpoint that met it, with its cosignatures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from deplog.client.plumbing.dbapi import Connection, Query, insert_rows, write


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint as signed and persisted: its size, root and signed note bytes."""

    size: int
    root: bytes
    note: bytes


def latest_checkpoint(conn: Connection) -> StoredCheckpoint | None:
    row = conn.execute(
        "SELECT size, root, note FROM checkpoints ORDER BY size DESC LIMIT 1"
    ).fetchone()
    return None if row is None else StoredCheckpoint(row[0], bytes(row[1]), bytes(row[2]))


def checkpoint_at(conn: Connection, size: int) -> StoredCheckpoint | None:
    row = conn.execute(
        "SELECT size, root, note FROM checkpoints WHERE size = ?", (size,)
    ).fetchone()
    return None if row is None else StoredCheckpoint(row[0], bytes(row[1]), bytes(row[2]))


NOTICE_LOOKUP_CHUNK = 128
"""(publisher, sequence) pairs per statement of ``notices_by_sequence``."""


def notices_by_sequence(
    conn: Connection, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, bytes]]:
    """Index and digest of the logged notices among ``keys``, one statement a chunk."""
    lookups = notice_lookups(keys)
    return notices_found(conn.execute(sql, params).fetchall() for sql, params in lookups)


def notice_lookups(keys: Sequence[tuple[str, int]]) -> list[Query]:
    """The statements of ``notices_by_sequence``, to run where the caller wants them."""
    unique = list(dict.fromkeys(keys))
    lookups: list[Query] = []
    for start in range(0, len(unique), NOTICE_LOOKUP_CHUNK):
        chunk = unique[start : start + NOTICE_LOOKUP_CHUNK]
        where = " OR ".join(["(publisher = ? AND sequence = ?)"] * len(chunk))
        lookups.append(
            (
                f"SELECT publisher, sequence, idx, digest FROM notices WHERE {where}",
                [value for key in chunk for value in key],
            )
        )
    return lookups


def notices_found(
    results: Iterable[Sequence[Any]],
) -> dict[tuple[str, int], tuple[int, bytes]]:
    """The rows of ``notice_lookups``' statements, by (publisher, sequence)."""
    found: dict[tuple[str, int], tuple[int, bytes]] = {}
    for rows in results:
        for publisher, sequence, idx, digest in rows:
            found[(str(publisher), int(sequence))] = (int(idx), bytes(digest))
    return found


NoticeRow = tuple[str, int, int, bytes, str]
"""A logged notice's index rows: publisher, sequence, leaf index, digest, tool id."""


def insert_notices(conn: Connection, rows: Sequence[NoticeRow]) -> None:
    """The index rows of a batch's notices: few statements per table (``insert_rows``)."""
    insert_rows(
        conn, "INSERT INTO notices (publisher, sequence, idx, digest)", [r[:4] for r in rows]
    )
    insert_rows(conn, "INSERT INTO tool_entries (tool_id, idx)", [(r[4], r[2]) for r in rows])
    first: dict[str, int] = {}
    for row in rows:
        first.setdefault(row[4], row[2])
    insert_rows(
        conn,
        "INSERT INTO tools (tool_id, first_idx)",
        list(first.items()),
        "ON CONFLICT (tool_id) DO NOTHING",
    )


def registry_entry_indexes(conn: Connection, size: int) -> list[int]:
    """The indexes below ``size`` that hold no notice: gaps of ``notices_by_idx``."""
    gaps = conn.execute(
        "SELECT prev + 1, idx FROM (SELECT idx, LAG(idx, 1, -1) OVER (ORDER BY idx) AS prev "
        "FROM notices WHERE idx < ?) AS ordered WHERE idx > prev + 1",
        (size,),
    ).fetchall()
    (last,) = conn.execute(
        "SELECT COALESCE(MAX(idx), -1) FROM notices WHERE idx < ?", (size,)
    ).fetchone()
    spans = [(int(a), int(b)) for a, b in gaps] + [(int(last) + 1, size)]
    return [i for start, end in spans for i in range(start, end)]


def insert_invalid_entries(
    conn: Connection, rows: Sequence[tuple[int, str, str | None, str | None]]
) -> None:
    """Record entries that fail validation (idx, code, cause, tool id), once each."""
    for row in rows:
        write(
            conn,
            "INSERT INTO invalid_entries (idx, code, cause, tool_id) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (idx) DO NOTHING",
            row,
        )


def invalid_entries(
    conn: Connection, size: int, limit: int
) -> tuple[int, list[tuple[int, str, str | None, str | None]]]:
    """How many recorded entries below ``size`` fail validation, and the first ``limit``."""
    (count,) = conn.execute(
        "SELECT COUNT(*) FROM invalid_entries WHERE idx < ?", (size,)
    ).fetchone()
    rows = conn.execute(
        "SELECT idx, code, cause, tool_id FROM invalid_entries WHERE idx < ? ORDER BY idx LIMIT ?",
        (size, limit),
    ).fetchall()
    return int(count), [(int(i), str(c), cause, tool) for i, c, cause, tool in rows]


def invalid_entry_indexes(conn: Connection, tool_id: str, size: int) -> list[int]:
    """The indexes below ``size`` of entries that fail validation and name ``tool_id``."""
    rows = conn.execute(
        "SELECT idx FROM invalid_entries WHERE tool_id = ? AND idx < ? ORDER BY idx",
        (tool_id, size),
    ).fetchall()
    return [int(r[0]) for r in rows]


def published_note(conn: Connection) -> tuple[int, bytes] | None:
    """The last checkpoint published under a witness quorum, with its cosignatures."""
    row = conn.execute("SELECT size, note FROM published WHERE id = 1").fetchone()
    return None if row is None else (int(row[0]), bytes(row[1]))


def save_published_note(conn: Connection, size: int, note: bytes) -> None:
    """Replace the published note, never by one of a smaller size."""
    write(
        conn,
        "INSERT INTO published (id, size, note) VALUES (1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET size = excluded.size, note = excluded.note "
        "WHERE excluded.size >= published.size",
        (size, note),
    )


def registry_snapshot(conn: Connection) -> tuple[int, str] | None:
    row = conn.execute("SELECT size, state FROM registry WHERE id = 1").fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def save_registry_snapshot(conn: Connection, size: int, state: str) -> None:
    """Replace the snapshot, inside the caller's transaction (rare: publisher changes only)."""
    write(
        conn,
        "INSERT INTO registry (id, size, state) VALUES (1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET size = excluded.size, state = excluded.state",
        (size, state),
    )


def insert_checkpoint(
    conn: Connection, size: int, root: bytes, note: bytes, signed_at: str
) -> None:
    """Insert the checkpoint of a size new in the caller's transaction: one already stored
    for it fails the transaction, never a second root."""
    write(
        conn,
        "INSERT INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?)",
        (size, root, note, signed_at),
    )


def insert_checkpoint_once(
    conn: Connection, size: int, root: bytes, note: bytes, signed_at: str
) -> StoredCheckpoint:
    """Insert a checkpoint unless one of that size exists; the one stored (the only one)."""
    write(
        conn,
        "INSERT INTO checkpoints (size, root, note, signed_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (size) DO NOTHING",
        (size, root, note, signed_at),
    )
    stored = checkpoint_at(conn, size)
    assert stored is not None
    return stored
