"""Maps in earlier formats, for the tests that check every holder of a map drops such a
map and folds again rather than mixing two formats: the first draft's (RFC 8785 JSON
records that carry each notice as signed, and no ``map_state.format`` column) and format
2's (the compact records, one row per inner node and a leaf table)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from deplog.client.map.hashing import map_key, value_hash
from deplog.client.map.nodes import ChildRef, MemoryNodeStore
from deplog.client.map.tree import PrefixTree
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model import canonical
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.model.notice import Notice
from deplog.client.tlog.note import encode_base64
from deplog.client.tlog.proofs import leaf_hash
from tests.builders import admitted

__all__ = [
    "first_draft_record",
    "write_first_draft_map",
    "write_format_two_map",
    "write_format_two_tables",
]

_NODE_TABLES = (
    """CREATE TABLE map_inner (
        id BLOB PRIMARY KEY, bit INTEGER NOT NULL,
        left_id BLOB NOT NULL, left_bits INTEGER NOT NULL, left_hash BLOB NOT NULL,
        right_id BLOB NOT NULL, right_bits INTEGER NOT NULL, right_hash BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    "CREATE TABLE map_leaf (key BLOB PRIMARY KEY, value BLOB NOT NULL) STRICT, WITHOUT ROWID",
    """CREATE TABLE map_record (tool_id TEXT PRIMARY KEY, record BLOB NOT NULL)
        STRICT, WITHOUT ROWID""",
)
_FIRST_DRAFT_SCHEMA = (
    *_NODE_TABLES,
    """CREATE TABLE map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1), size INTEGER NOT NULL,
        root_id BLOB, root_bits INTEGER, root_hash BLOB
    ) STRICT""",
)
_FORMAT_TWO_SCHEMA = (
    *_NODE_TABLES,
    """CREATE TABLE map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1), format INTEGER NOT NULL, size INTEGER NOT NULL,
        root_id BLOB, root_bits INTEGER, root_hash BLOB
    ) STRICT""",
)
_OLD_TABLES = ("map_group", "map_inner", "map_leaf", "map_record", "map_state")


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


def _write_old_map(
    conn: sqlite3.Connection, schema: Sequence[str], records: dict[str, bytes]
) -> ChildRef:
    """Replace the map tables on ``conn`` by ``schema``'s with one row per inner node and
    a leaf table (map_state left to the caller); the root reference."""
    for table in _OLD_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in schema:
        conn.execute(statement)
    store = MemoryNodeStore()
    leaves = {map_key(t): value_hash(r) for t, r in records.items()}
    root = PrefixTree(store).update(leaves)
    conn.executemany(
        "INSERT INTO map_inner VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                n.id,
                n.bit,
                n.left.id,
                n.left.bits,
                n.left.hash,
                n.right.id,
                n.right.bits,
                n.right.hash,
            )
            for n in store.held().values()
        ],
    )
    conn.executemany("INSERT INTO map_leaf VALUES (?, ?)", leaves.items())
    conn.executemany("INSERT INTO map_record VALUES (?, ?)", records.items())
    ref = store.root()
    assert ref is not None and ref.hash == root
    return ref


def write_first_draft_map(conn: sqlite3.Connection, leaves: Sequence[bytes]) -> bytes:
    """Replace the map tables on ``conn`` by the first draft's map of ``leaves`` (the log's
    first ``len(leaves)`` entries), committed; its root."""
    ref = _write_old_map(conn, _FIRST_DRAFT_SCHEMA, _first_draft_records(leaves))
    conn.execute(
        "INSERT INTO map_state VALUES (1, ?, ?, ?, ?)", (len(leaves), ref.id, ref.bits, ref.hash)
    )
    conn.commit()
    return ref.hash


def write_format_two_map(conn: sqlite3.Connection, leaves: Sequence[bytes]) -> bytes:
    """Replace the map tables on ``conn`` by format 2's map of ``leaves``, committed; its
    root (the same as this format's: only the layout of the inner nodes differs)."""
    folded = VerifiableMap()
    folded.fold(admitted(leaves))
    records = {tool_id: record.encode() for tool_id, record in folded.records.items()}
    ref = _write_old_map(conn, _FORMAT_TWO_SCHEMA, records)
    conn.execute(
        "INSERT INTO map_state VALUES (1, 2, ?, ?, ?, ?)", (len(leaves), ref.id, ref.bits, ref.hash)
    )
    conn.commit()
    return ref.hash


def write_format_two_tables(conn: sqlite3.Connection) -> None:
    """Replace the map tables on ``conn`` by format 2's, empty (what an older ``authority
    init`` left: ``map_state`` gets its row at the first fold), committed."""
    for table in _OLD_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in _FORMAT_TWO_SCHEMA:
        conn.execute(statement)
    conn.commit()
