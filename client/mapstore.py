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
4. ``map_state.format`` names the record format of the rows (``STORE_FORMAT``).
   Tables of another format (the JSON records of the spec's first draft have no
   such column) are never read or extended: ``discard_other_format`` drops them
   whole, so their holder folds the map again rather than mixing two formats.
5. A writer may keep a ``MapCache``: a bounded copy of rows and records it read
   or wrote on its own connection, so a batch reads its paths from memory. It is
   filled on read and updated on write, inside the writer's open transaction, so
   it holds exactly what that transaction sees. Whoever ends a transaction
   without committing it (a rollback, a failed commit) calls ``forget()`` before
   the next batch, and so does any writer that did not write the previous
   committed transaction itself (another process moved the tables): the cache
   never serves a row its tables do not hold. Readers keep no cache: the writer
   changes their tables under them.
6. The queries are the common subset of SQLite and PostgreSQL (``client.dbapi``);
   the DDL here is SQLite's, the authority keeps PostgreSQL's beside its own schema.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Generic, TypeVar

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

__all__ = [
    "DEFAULT_CACHE_RECORD_BYTES",
    "DEFAULT_CACHE_ROWS",
    "SCHEMA",
    "STORE_FORMAT",
    "MapCache",
    "SqliteNodeStore",
    "SqliteRecords",
    "StoredMap",
]

STORE_FORMAT = 2
"""The record format of these tables: 2 is the compact binary record of
``docs/fold-spec.md`` section 3; 1 (no ``format`` column) the first draft's JSON."""
_TABLES = ("map_state", "map_inner", "map_leaf", "map_record")

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
    # One row: the record format, the log size folded in and the root reference (NULL
    # id: the empty map).
    """CREATE TABLE IF NOT EXISTS map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        format INTEGER NOT NULL,
        size INTEGER NOT NULL,
        root_id BLOB,
        root_bits INTEGER,
        root_hash BLOB
    ) STRICT""",
)


DEFAULT_CACHE_ROWS = 1 << 16
"""Inner rows a writer's cache keeps: the top of the tree and the
paths of recent batches (2^16 rows measured at about 25 MB of Python objects)."""
DEFAULT_CACHE_RECORD_BYTES = 16 << 20
"""Record bytes a writer's cache keeps: records grow with their tool's notices."""
_IN_CHUNK = 500
"""Ids per ``WHERE ... IN`` read, under every SQLite build's bound on parameters."""

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """Least recently used entries up to a total weight (``None``: each weighs one);
    the oldest go first."""

    def __init__(self, capacity: int, weight: Callable[[V], int] | None = None) -> None:
        self.capacity = capacity
        self.weight = weight
        self.total = 0
        self.entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        entries, weight = self.entries, self.weight
        if weight is None:
            entries[key] = value
            entries.move_to_end(key)
            if len(entries) > self.capacity:
                entries.popitem(last=False)
            return
        old = entries.pop(key, None)
        self.total += weight(value) - (0 if old is None else weight(old))
        entries[key] = value
        while self.total > self.capacity:
            self.total -= weight(entries.popitem(last=False)[1])

    def clear(self) -> None:
        self.entries.clear()
        self.total = 0


class MapCache:
    """A writer's bounded copy of map rows and records (rule 5): inner rows by count,
    records by bytes, each least recently used first out. Leaf values are not kept:
    a batch never reads them (only proofs do, and readers keep no cache)."""

    def __init__(
        self,
        max_rows: int = DEFAULT_CACHE_ROWS,
        max_record_bytes: int = DEFAULT_CACHE_RECORD_BYTES,
    ) -> None:
        self.inners: _Lru[bytes, InnerNode] = _Lru(max_rows)
        self.records: _Lru[str, bytes] = _Lru(max_record_bytes, len)

    def forget(self) -> None:
        """Drop everything: the tables may hold other rows than the ones seen (rule 5)."""
        self.inners.clear()
        self.records.clear()


class SqliteNodeStore:
    """The ``NodeStore`` of a ``PrefixTree`` over ``map_inner``/``map_leaf``/``map_state``.

    A missing row raises ``KeyError``, as the in-memory store does; its holder
    reports that as altered storage. With a ``cache`` (writers only, rule 5), rows
    come from memory when it holds them.
    """

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache

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
        if self.cache is not None:
            cached = self.cache.inners.get(node)
            if cached is not None:
                return cached
        row = self.conn.execute(
            "SELECT bit, left_id, left_bits, left_hash, right_id, right_bits, right_hash "
            "FROM map_inner WHERE id = ?",
            (node,),
        ).fetchone()
        if row is None:
            raise KeyError("map node missing")
        left = ChildRef(bytes(row[1]), int(row[2]), bytes(row[3]))
        right = ChildRef(bytes(row[4]), int(row[5]), bytes(row[6]))
        found = InnerNode(node, int(row[0]), left, right)
        if self.cache is not None:
            self.cache.inners.put(node, found)
        return found

    def cached(self, node: bytes) -> bool:
        """True when the writer's cache holds the row."""
        return self.cache is not None and self.cache.inners.get(node) is not None

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner node rows with these ids, in their order: those the cache lacks in
        one query per 500 ids."""
        found, missing = _cached_and_missing(
            None if self.cache is None else self.cache.inners, nodes
        )
        select = (
            "SELECT id, bit, left_id, left_bits, left_hash, right_id, right_bits, right_hash "
            "FROM map_inner WHERE id IN"
        )
        for row in _rows_in(self.conn, select, missing):
            left = ChildRef(bytes(row[2]), int(row[3]), bytes(row[4]))
            right = ChildRef(bytes(row[5]), int(row[6]), bytes(row[7]))
            read = InnerNode(bytes(row[0]), int(row[1]), left, right)
            found[read.id] = read
            if self.cache is not None:
                self.cache.inners.put(read.id, read)
        if len(found) != len(set(nodes)):
            raise KeyError("map node missing")
        return [found[node] for node in nodes]

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
            [_row(n.id, n.bit, n.left, n.right) for n in inners],
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
        if self.cache is not None:  # after the writes: a failed one leaves it as it was
            put = self.cache.inners.put
            for node in inners:
                put(node.id, node)


def _cached_and_missing(cache: _Lru[K, V] | None, keys: Iterable[K]) -> tuple[dict[K, V], list[K]]:
    """What ``cache`` holds of ``keys``, and the keys it lacks, in their order."""
    found: dict[K, V] = {}
    missing: list[K] = []
    for key in keys:
        cached = None if cache is None else cache.get(key)
        if cached is None:
            missing.append(key)
        else:
            found[key] = cached
    return found, missing


def _rows_in(conn: Connection, select: str, keys: Sequence[object]) -> Iterator[Any]:
    """The rows of ``select`` (ending ``IN``) over ``keys``, ``_IN_CHUNK`` keys a query."""
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = keys[start : start + _IN_CHUNK]
        yield from conn.execute(f"{select} ({', '.join('?' * len(chunk))})", chunk).fetchall()


def _row(
    node: bytes, bit: int, left: ChildRef, right: ChildRef
) -> tuple[bytes, int, bytes, int, bytes, bytes, int, bytes]:
    return node, bit, left.id, left.bits, left.hash, right.id, right.bits, right.hash


class SqliteRecords(MutableMapping[str, StatusRecord]):
    """Tool id -> status record in ``map_record``; records are decoded strictly on read, so
    an altered row is ``malformed_map_record``, never a wrong proof."""

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache

    def __getitem__(self, tool_id: str) -> StatusRecord:
        return StatusRecord.decode(self.raw(tool_id), tool_id)

    def raw(self, tool_id: str) -> bytes:
        """The stored record bytes of a tool (KeyError if it is not in the map)."""
        if self.cache is not None:
            cached = self.cache.records.get(tool_id)
            if cached is not None:
                return cached
        row = self.conn.execute(
            "SELECT record FROM map_record WHERE tool_id = ?", (tool_id,)
        ).fetchone()
        if row is None:
            raise KeyError(tool_id)
        record = bytes(row[0])
        if self.cache is not None:
            self.cache.records.put(tool_id, record)
        return record

    def get_many_raw(self, tool_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored record bytes of those of ``tool_ids`` in the map: the cache's, and
        the rest read ``_IN_CHUNK`` at a time."""
        found, missing = _cached_and_missing(
            None if self.cache is None else self.cache.records, tool_ids
        )
        select = "SELECT tool_id, record FROM map_record WHERE tool_id IN"
        for tool_id, record in _rows_in(self.conn, select, missing):
            found[str(tool_id)] = bytes(record)
            if self.cache is not None:
                self.cache.records.put(str(tool_id), bytes(record))
        return found

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
        self.put_many_raw({tool_id: record})

    def put_many_raw(self, records: Mapping[str, bytes]) -> None:
        """``put_raw`` for many tools in one statement."""
        self.conn.executemany(
            "INSERT INTO map_record (tool_id, record) VALUES (?, ?) "
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
            records.items(),
        )
        if self.cache is not None:  # after the write: a failed one leaves it as it was
            for tool_id, record in records.items():
                self.cache.records.put(tool_id, record)

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
    A writer passes a ``cache`` and calls ``forget`` as rule 5 says.
    """

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache
        self.stored = SqliteRecords(conn, cache)
        super().__init__(SqliteNodeStore(conn, cache), self.stored)

    def forget(self) -> None:
        """Drop the cache (rule 5): after a transaction that did not commit, or one that
        another writer committed. Without a cache, nothing to drop."""
        if self.cache is not None:
            self.cache.forget()

    def record_bytes(self, tool_id: str) -> bytes:
        """The record as stored: its verifiers decode it strictly, the store need not."""
        return self.stored.raw(tool_id)

    @staticmethod
    def create_schema(conn: sqlite3.Connection) -> bool:
        """Create the map's tables if missing; an existing map of this format is never
        touched, one of another format is dropped first (rule 4). True if one was."""
        discarded = StoredMap.discard_other_format(conn)
        for statement in SCHEMA:
            conn.execute(statement)
        return discarded

    @staticmethod
    def discard_other_format(conn: sqlite3.Connection) -> bool:
        """Drop the map's tables, all in one savepoint (so inside or outside the caller's
        transaction), if they hold another record format; True if they did."""
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(map_state)")}
        if not columns:
            return False
        if "format" in columns:
            row = conn.execute("SELECT format FROM map_state WHERE id = 1").fetchone()
            if row is None or int(row[0]) == STORE_FORMAT:
                return False
        conn.execute("SAVEPOINT map_format")
        for table in _TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("RELEASE map_format")
        return True

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
        for table in _TABLES:
            conn.execute(f"DROP TABLE {table}")

    def size(self) -> int | None:
        """The log size folded in, None if this database has no map yet."""
        row = self.conn.execute("SELECT size FROM map_state WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def format(self) -> int:
        """The record format of the rows (rule 4): 1 for tables without the column."""
        try:
            row = self.conn.execute("SELECT format FROM map_state WHERE id = 1").fetchone()
        except sqlite3.OperationalError:  # the first draft's map_state has no such column
            return 1
        return STORE_FORMAT if row is None else int(row[0])

    def advance(self, start: int, entries: Iterable[bytes]) -> bytes:
        """Fold the admitted entries ``start, start+1, ...`` (leaf bytes, in log order) in one
        batch and move the size past them; the new root. ``start`` must be the map's size
        (a map without one starts at 0): anything else is a gap, ``ValueError``."""
        leaves = list(entries)
        notices = []
        for index, leaf in enumerate(leaves, start):
            entry = decode_entry(leaf)
            if isinstance(entry, NoticeEntry):
                notices.append((index, entry.envelope.notice))
        return self.advance_notices(start, start + len(leaves), notices)

    def advance_notices(self, start: int, end: int, notices: Iterable[tuple[int, Notice]]) -> bytes:
        """``advance`` for a caller that holds the entries decoded: the notices among the
        entries ``[start, end)`` as ``(index, notice)``, in log order.

        Records grow by appending items (``extend_record_bytes``), never by decoding
        and re-encoding them, so a batch costs its own notices, not the records'
        sizes; the entries are admitted, so every record folds.
        """
        size = self.size()
        if start != (size or 0) or end < start:
            raise ValueError("a map advances only from the size it has folded")
        if size is None:
            self.conn.execute(
                "INSERT INTO map_state (id, format, size) VALUES (1, ?, 0)", (STORE_FORMAT,)
            )
        items: dict[str, list[bytes]] = {}
        for index, notice in notices:
            if not start <= index < end:
                raise ValueError("a notice outside the entries folded")
            items.setdefault(notice.tool_id, []).append(record_item_bytes(index, notice))
        before = self.stored.get_many_raw(list(items))
        records = {
            tool_id: extend_record_bytes(before.get(tool_id), added)
            for tool_id, added in items.items()
        }
        self.stored.put_many_raw(records)
        root = self.tree.update({map_key(t): value_hash(r) for t, r in records.items()})
        self.conn.execute("UPDATE map_state SET size = ? WHERE id = 1", (end,))
        return root

    def prove_at_size(self, tool_id: str) -> tuple[int, MapProof]:
        """``(size, proof)`` read in one read transaction (rule 3), so the proof is of the
        map at that size; for readers only: it opens and ends a transaction on ``conn``.
        KeyError if this database has no map yet."""
        with self.snapshot():
            size = self.size()
            if size is None or self.format() != STORE_FORMAT:
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
