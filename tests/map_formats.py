"""A map in the first draft's record format (RFC 8785 JSON records that carry each notice
as signed, and no ``map_state.format`` column), for the tests that check every holder of
a map drops such a map and folds again rather than mixing two formats."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from deplog.client.mapstore import SqliteNodeStore
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.model.notice import Notice
from deplog.client.model.vmap import PrefixTree, map_key, value_hash
from deplog.client.tlog.note import encode_base64
from deplog.client.tlog.proofs import leaf_hash

__all__ = ["first_draft_record", "write_first_draft_map"]

_FIRST_DRAFT_SCHEMA = (
    """CREATE TABLE map_inner (
        id BLOB PRIMARY KEY, bit INTEGER NOT NULL,
        left_id BLOB NOT NULL, left_bits INTEGER NOT NULL, left_hash BLOB NOT NULL,
        right_id BLOB NOT NULL, right_bits INTEGER NOT NULL, right_hash BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    "CREATE TABLE map_leaf (key BLOB PRIMARY KEY, value BLOB NOT NULL) STRICT, WITHOUT ROWID",
    """CREATE TABLE map_record (tool_id TEXT PRIMARY KEY, record BLOB NOT NULL)
        STRICT, WITHOUT ROWID""",
    """CREATE TABLE map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1), size INTEGER NOT NULL,
        root_id BLOB, root_bits INTEGER, root_hash BLOB
    ) STRICT""",
)


def first_draft_record(tool_id: str, notices: Sequence[tuple[int, bytes, Notice]]) -> bytes:
    """The first draft's record of ``(index, RFC 9162 leaf hash, notice)`` items."""
    items = [
        {"index": index, "leaf_hash": encode_base64(digest), "notice": notice.to_json()}
        for index, digest, notice in notices
    ]
    return canonical.dumps({"notices": items, "tool_id": tool_id, "type": "deplog.tool_status/v1"})


def _first_draft_records(leaves: Sequence[bytes]) -> dict[str, bytes]:
    items: dict[str, list[tuple[int, bytes, Notice]]] = {}
    for index, leaf in enumerate(leaves):
        entry = decode_entry(leaf)
        if isinstance(entry, NoticeEntry):
            notice = entry.envelope.notice
            items.setdefault(notice.tool_id, []).append((index, leaf_hash(leaf), notice))
    return {tool_id: first_draft_record(tool_id, found) for tool_id, found in items.items()}


def write_first_draft_map(conn: sqlite3.Connection, leaves: Sequence[bytes]) -> bytes:
    """Replace the map tables on ``conn`` by the first draft's map of ``leaves`` (the log's
    first ``len(leaves)`` entries), committed; its root."""
    for table in ("map_inner", "map_leaf", "map_record", "map_state"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in _FIRST_DRAFT_SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO map_state (id, size) VALUES (1, ?)", (len(leaves),))
    records = _first_draft_records(leaves)
    conn.executemany("INSERT INTO map_record VALUES (?, ?)", records.items())
    root = PrefixTree(SqliteNodeStore(conn)).update(
        {map_key(t): value_hash(record) for t, record in records.items()}
    )
    conn.commit()
    return root
