"""The tool-status map (``deplog-map/v1``) in SQL tables beside the log it folds.

One module for every holder of a map: the authority keeps it in its log
database, a follower in its state database, the auditor and a map-verifying
witness in theirs. Rules:

1. The tables are written only through ``StoredMap``, and never commit on their
   own: the caller's transaction covers a batch's rows, its records, its new
   root and the log size it reflects, so a crash leaves the map at the last
   committed size, never between two.
2. ``map_state.size`` is the number of log entries folded in. A map is only
   ever advanced from exactly that size (``advance`` refuses a gap), so its
   root always equals the root of a fold of the prefix ``[0, size)``.
3. Rows are rewritten in place (``docs/fold-spec.md`` section 7): the tables
   hold the map at one size. Readers that prove a lookup read the size and the
   rows in one read transaction (``snapshot``), so a proof and its size agree.
4. The SQL is the common subset of SQLite and PostgreSQL (``client.dbapi``); the
   DDL below is SQLite's, the authority keeps PostgreSQL's beside its own schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence

from deplog.client.dbapi import Connection
from deplog.client.errors import ErrorCode
from deplog.client.model.entries import NoticeEntry, decode_entry
from deplog.client.model.notice import Notice
from deplog.client.model.vmap import (
    ChildRef,
    InnerNode,
    MapFormatError,
    MapProof,
    StatusRecord,
    VerifiableMap,
    extend_record_bytes,
    map_key,
    record_item_bytes,
    value_hash,
)
from deplog.client.tlog.proofs import leaf_hash as log_leaf_hash

__all__ = [
    "SCHEMA",
    "SqliteNodeStore",
    "SqliteRecords",
    "StoredMap",
]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS map_inner (
        id BLOB PRIMARY KEY,
        bit INTEGER NOT NULL,
        left_id BLOB NOT NULL,
        left_bits INTEGER NOT NULL,
        left_hash BLOB NOT NULL,
        right_id BLOB NOT NULL,
        right_bits INTEGER NOT NULL,
        right_hash BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS map_leaf (
        key BLOB PRIMARY KEY,
        value BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS map_record (
        tool_id TEXT PRIMARY KEY,
        record BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    # One row: the log size folded in and the root reference (NULL id: the empty map).
    """CREATE TABLE IF NOT EXISTS map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        size INTEGER NOT NULL,
        root_id BLOB,
        root_bits INTEGER,
        root_hash BLOB
    ) STRICT""",
)


class SqliteNodeStore:
    """The ``NodeStore`` of a ``PrefixTree`` over ``map_inner``/``map_leaf``/``map_state``.

    A missing row raises ``KeyError``, as the in-memory store does; its holder
    reports that as altered storage.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map (or no map yet)."""
        row = self.conn.execute(
            "SELECT root_id, root_bits, root_hash FROM map_state WHERE id = 1"
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return ChildRef(bytes(row[0]), int(row[1]), bytes(row[2]))

    def inner(self, node: bytes) -> InnerNode:
        """The inner node row with this id."""
        row = self.conn.execute(
            "SELECT bit, left_id, left_bits, left_hash, right_id, right_bits, right_hash "
            "FROM map_inner WHERE id = ?",
            (node,),
        ).fetchone()
        if row is None:
            raise KeyError("map node missing")
        left = ChildRef(bytes(row[1]), int(row[2]), bytes(row[3]))
        right = ChildRef(bytes(row[4]), int(row[5]), bytes(row[6]))
        return InnerNode(node, int(row[0]), left, right)

    def leaf_value(self, key: bytes) -> bytes:
        """The value of the leaf with this key."""
        row = self.conn.execute("SELECT value FROM map_leaf WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError("map leaf missing")
        return bytes(row[0])

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch's rows and root in the caller's transaction."""
        self.conn.executemany(
            "INSERT INTO map_inner VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET bit = excluded.bit, left_id = excluded.left_id, left_bits = excluded.left_bits, "
            "left_hash = excluded.left_hash, right_id = excluded.right_id, "
            "right_bits = excluded.right_bits, right_hash = excluded.right_hash",
            [(n.id, n.bit, *_columns(n.left), *_columns(n.right)) for n in inners],
        )
        self.conn.executemany(
            "INSERT INTO map_leaf (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            leaves.items(),
        )
        ref = (None, None, None) if root is None else (root.id, root.bits, root.hash)
        self.conn.execute(
            "UPDATE map_state SET root_id = ?, root_bits = ?, root_hash = ? WHERE id = 1", ref
        )


def _columns(ref: ChildRef) -> tuple[bytes, int, bytes]:
    return ref.id, ref.bits, ref.hash


class SqliteRecords(MutableMapping[str, StatusRecord]):
    """Tool id -> status record in ``map_record``; records are decoded strictly on read, so
    an altered row is ``malformed_map_record``, never a wrong proof."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __getitem__(self, tool_id: str) -> StatusRecord:
        return StatusRecord.decode(self.raw(tool_id))

    def raw(self, tool_id: str) -> bytes:
        """The stored record bytes of a tool (KeyError if it is not in the map)."""
        row = self.conn.execute(
            "SELECT record FROM map_record WHERE tool_id = ?", (tool_id,)
        ).fetchone()
        if row is None:
            raise KeyError(tool_id)
        return bytes(row[0])

    def __setitem__(self, tool_id: str, record: StatusRecord) -> None:
        if record.tool_id != tool_id:
            raise MapFormatError(ErrorCode.MALFORMED_MAP_RECORD)
        self.put_raw(tool_id, record.encode())

    def get_raw(self, tool_id: str) -> bytes | None:
        """The stored record bytes of a tool, None if it is not in the map."""
        try:
            return self.raw(tool_id)
        except KeyError:
            return None

    def put_raw(self, tool_id: str, record: bytes) -> None:
        """Store a record's canonical bytes as they are (the append path's records)."""
        self.conn.execute(
            "INSERT INTO map_record (tool_id, record) VALUES (?, ?) "
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
            (tool_id, record),
        )

    def __delitem__(self, tool_id: str) -> None:
        raise TypeError("a tool never leaves the map")

    def __iter__(self) -> Iterator[str]:
        rows = self.conn.execute("SELECT tool_id FROM map_record ORDER BY tool_id").fetchall()
        return iter(str(row[0]) for row in rows)

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM map_record").fetchone()[0])


class StoredMap(VerifiableMap):
    """A ``VerifiableMap`` whose rows and records live in SQLite on ``conn``.

    The caller owns transactions (rule 1): ``advance`` writes but never commits.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.stored = SqliteRecords(conn)
        super().__init__(SqliteNodeStore(conn), self.stored)

    def record_bytes(self, tool_id: str) -> bytes:
        """The record as stored: its verifiers decode it strictly, the store need not."""
        return self.stored.raw(tool_id)

    @staticmethod
    def create_schema(conn: Connection) -> None:
        """Create the map's tables if missing; an existing map is never touched."""
        for statement in SCHEMA:
            conn.execute(statement)

    @staticmethod
    def drop_unless_at(conn: Connection, size: int) -> None:
        """Remove the map's tables (in the caller's transaction) unless the map is at
        ``size``: for a holder whose map went past the size it keeps, which cannot be
        rewound (rows are rewritten in place)."""
        tables = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'map_state'"
        ).fetchone()
        if tables is None or StoredMap(conn).size() in (None, size):
            return
        for table in ("map_inner", "map_leaf", "map_record", "map_state"):
            conn.execute(f"DROP TABLE {table}")

    def size(self) -> int | None:
        """The log size folded in, None if this database has no map yet."""
        row = self.conn.execute("SELECT size FROM map_state WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def advance(self, start: int, entries: Iterable[bytes]) -> bytes:
        """Fold the admitted entries ``start, start+1, ...`` (leaf bytes, in log order) in one
        batch and move the size past them; the new root. ``start`` must be the map's size
        (a map without one starts at 0): anything else is a gap, ``ValueError``."""
        leaves = list(entries)
        notices = []
        for index, leaf in enumerate(leaves, start):
            entry = decode_entry(leaf)
            if isinstance(entry, NoticeEntry):
                notices.append((index, log_leaf_hash(leaf), entry.envelope.notice))
        return self.advance_notices(start, start + len(leaves), notices)

    def advance_notices(
        self, start: int, end: int, notices: Iterable[tuple[int, bytes, Notice]]
    ) -> bytes:
        """``advance`` for a caller that holds the entries decoded: the notices among the
        entries ``[start, end)`` as ``(index, RFC 9162 leaf hash, notice)``, in log order.

        Records grow by splicing canonical bytes (``extend_record_bytes``), never by
        decoding and re-encoding them, so a batch costs its own notices, not the
        records' sizes; the entries are admitted, so every record folds.
        """
        size = self.size()
        if start != (size or 0) or end < start:
            raise ValueError("a map advances only from the size it has folded")
        if size is None:
            self.conn.execute("INSERT INTO map_state (id, size) VALUES (1, 0)")
        items: dict[str, list[bytes]] = {}
        for index, leaf_hash, notice in notices:
            if not start <= index < end:
                raise ValueError("a notice outside the entries folded")
            items.setdefault(notice.tool_id, []).append(record_item_bytes(index, leaf_hash, notice))
        changes = {}
        for tool_id, added in items.items():
            record = extend_record_bytes(self.stored.get_raw(tool_id), tool_id, added)
            self.stored.put_raw(tool_id, record)
            changes[map_key(tool_id)] = value_hash(record)
        root = self.tree.update(changes)
        self.conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (end,))
        return root

    def prove_at_size(self, tool_id: str) -> tuple[int, MapProof]:
        """``(size, proof)`` read in one read transaction (rule 3), so the proof is of the
        map at that size; for readers only: it opens and ends a transaction on ``conn``.
        KeyError if this database has no map yet."""
        with self.snapshot():
            size = self.size()
            if size is None:
                raise KeyError("no map")
            return size, self.prove(tool_id)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every read inside sees one committed state."""
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")
