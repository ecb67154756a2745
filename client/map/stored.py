"""The tool-status map in SQL tables beside the log it folds: ``StoredMap``.

One facade for every holder of a map: the authority keeps it in its log database, a
follower in its state database, the auditor and a map-verifying witness in theirs.
How it writes (layers, slices, caches) is told in ``docs/architecture.md``. Rules:

1. **One transaction.** The tables are written only through ``StoredMap``, and never
   commit on their own: the caller's transaction covers a batch's rows, its records,
   its new root and the log size it reflects, so a crash leaves the map at the last
   committed size, never between two.
2. **One size.** ``map_state.size`` is the number of log entries folded in, and a map
   is only ever advanced from exactly that size (``advance_notices`` refuses a gap), so
   its root is always the fold of the prefix ``[0, size)``.
3. **Proofs read one size.** Rows are rewritten in place (``docs/fold-spec.md``
   section 7): the tables hold the map at one size, and a reader proves a lookup from
   the size and the rows read in one read transaction (``prove_at_size``), so a proof
   and its size agree. A database without a map proves nothing
   (``MapStorageError``).
4. **One format.** ``map_state.format`` names the layout and record format of the rows
   (``STORE_FORMAT``). Tables of another format are never read or extended:
   ``discard_other_format`` drops them whole, so their holder folds the map again
   rather than mixing two formats.
5. **Rows held back.** A writer whose cache holds rows back (``cache`` rule *held
   rows*: the authority's on SQLite, the one process writing and reading) folds
   each batch into the cache's layer only, and writes it later, coalesced, in a
   transaction of its own choosing (``flush``). The tables stay a map at one committed
   size, at or below the log's; the map is a function of the log's prefix, so a crash
   loses nothing that a fold of the entries past ``map_state.size`` does not give back
   (the authority folds them at start). After each commit the caller calls
   ``committed()``; readers in its process read the layer as committed above the
   tables when the tables are at its base size.
6. **Slices.** A layer written in slices (``write_slice``) writes children before
   parents and moves ``map_state`` with its last slice. Until then the tables hold rows
   past their size: readers in the writer's process shadow them with their view's
   layer and read again (``ViewMoved``) if a slice came after their view, and a start
   after a kill folds the entries past ``map_state.size`` again with ``repair``,
   dropping from records the items a slice wrote.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from deplog.client.map.cache import MapCache
from deplog.client.map.errors import MapStorageError
from deplog.client.map.hashing import map_key, value_hash
from deplog.client.map.layer import CommittedLayer, MapView, ViewMoved
from deplog.client.map.proof import MapProof
from deplog.client.map.record import StatusRecord, extend_record_bytes, record_item_bytes
from deplog.client.map.sqlstore import SCHEMA, STORE_FORMAT, SqliteNodeStore, SqliteRecords
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Notice
from deplog.client.model.status import InvalidMark
from deplog.client.plumbing.dbapi import Connection

__all__ = ["StoredMap"]

_TABLES: Final = ("map_state", "map_group", "map_record")
_OLD_TABLES: Final = ("map_inner", "map_leaf")
"""Format 2's tables, dropped with the rest of a map of another format (rule *one
format*)."""


class StoredMap(VerifiableMap):
    """A ``VerifiableMap`` whose rows and records live in SQLite on ``conn``.

    The caller owns transactions (rule *one transaction*): ``advance_notices`` and
    ``flush`` write but never commit. A writer passes a ``cache``, calls ``committed``
    after each commit and ``forget`` as ``cache`` rule *the cache holds what its
    transaction sees* says; one whose cache holds rows back (rule *rows held back*) calls
    ``flush`` in a transaction of its own choosing, and before it closes.
    """

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache
        self.stored = SqliteRecords(conn, cache)
        self.nodes = SqliteNodeStore(conn, cache)
        super().__init__(self.nodes, self.stored)

    def forget(self) -> None:
        """Drop the cache and go back to the layer last committed: after a transaction that
        did not commit, or one that another writer committed. Without a cache, nothing to
        drop."""
        if self.cache is not None:
            self.cache.forget()

    def committed(self) -> None:
        """The caller's transaction committed: what it folded is the map now."""
        if self.cache is not None:
            self.cache.commit()

    @property
    def layer(self) -> CommittedLayer | None:
        """The rows not yet written as of the last commit (rule *rows held back*); None when
        the tables are the whole map."""
        return None if self.cache is None else self.cache.committed

    @property
    def view(self) -> MapView:
        """What a reader in this process takes before it proves (``prove_at_size``)."""
        return MapView() if self.cache is None else self.cache.view

    @property
    def slices(self) -> int:
        """The slices of the layer written so far (``MapCache.slices``)."""
        return 0 if self.cache is None else self.cache.slices

    @property
    def unwritten(self) -> int:
        """Log entries folded into the layer and not yet written (rule *rows held back*)."""
        layer = None if self.cache is None else self.cache.layer
        return 0 if layer is None else layer.size - layer.base

    @contextlib.contextmanager
    def scoped_cache(self, cache: MapCache | None = None) -> Iterator[None]:
        """For a holder without a cache, inside one transaction: the groups and records
        read or folded in the block are kept until it ends, so a proof's path (up to four
        nodes a group) and a fold's path reads and write read each group once.
        ``cache``: the one to use (a reader's over a layer). A writer's own is kept."""
        if self.cache is not None:
            yield
            return
        self.cache = self.stored.cache = self.nodes.cache = cache or MapCache()
        try:
            yield
        finally:
            self.cache = self.stored.cache = self.nodes.cache = None

    def record_bytes(self, tool_id: str) -> bytes:
        """The record of a present tool as stored (its verifiers decode it strictly, the
        store need not); ``MapStorageError`` if the tables lost it."""
        try:
            return self.stored.raw(tool_id)
        except KeyError:
            raise MapStorageError(message="map record missing") from None

    def warm(self) -> int:
        """Fill the cache with the tables' groups, shallowest first, up to its bound (a
        writer at start, so its first batches do not read their paths a query at a time);
        the number of groups read. Altered group bytes fail it (``MapStorageError``).
        Without a cache, nothing to fill."""
        return self.nodes.warm()

    @staticmethod
    def create_schema(conn: sqlite3.Connection) -> bool:
        """Create the map's tables if missing; an existing map of this format is never
        touched, one of another format is dropped first (rule *one format*). True if one
        was."""
        discarded = StoredMap.discard_other_format(conn)
        for statement in SCHEMA:
            conn.execute(statement)
        return discarded

    @staticmethod
    def other_format(conn: sqlite3.Connection) -> bool:
        """True if this database holds map tables of another format (rule *one format*):
        told by the tables' columns, so also before their first row (an older ``authority
        init`` creates them empty), and by ``map_state.format`` once there is one."""
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(map_state)")}
        if not columns:
            placeholders = ", ".join("?" * len(_OLD_TABLES))
            found = conn.execute(
                f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN ({placeholders})",
                _OLD_TABLES,
            ).fetchone()
            return found is not None
        if "root_value" not in columns:  # format 2's map_state, or the first draft's
            return True
        row = conn.execute("SELECT format FROM map_state WHERE id = 1").fetchone()
        return row is not None and int(row[0]) != STORE_FORMAT

    @staticmethod
    def discard_other_format(conn: sqlite3.Connection) -> bool:
        """Drop the map's tables, all in one savepoint (so inside or outside the caller's
        transaction), if they are of another format; True if they were."""
        if not StoredMap.other_format(conn):
            return False
        conn.execute("SAVEPOINT map_format")
        for table in (*_TABLES, *_OLD_TABLES):
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
        for table in (*_TABLES, *_OLD_TABLES):  # whichever format's tables they are
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    def size(self) -> int | None:
        """The log size folded in (the layer's: rule *rows held back*), None if this database
        has no map yet."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.size
        return self._table_size()

    def _table_size(self) -> int | None:
        row = self.conn.execute("SELECT size FROM map_state WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def format(self) -> int:
        """The record format of the rows (rule *one format*): 1 for tables without the
        column."""
        try:
            row = self.conn.execute("SELECT format FROM map_state WHERE id = 1").fetchone()
        except sqlite3.OperationalError:  # the first draft's map_state has no such column
            return 1
        return STORE_FORMAT if row is None else int(row[0])

    def advance_notices(
        self,
        start: int,
        end: int,
        notices: Iterable[tuple[int, Notice | InvalidMark]],
        *,
        hold: bool = False,
        repair: bool = False,
    ) -> bytes:
        """Fold the entries ``[start, end)`` in one batch and move the size past them; the
        new root. ``notices`` are what the validator (``client.model.rules.fold_item``)
        made of them, as ``(index, notice or mark)`` in log order. ``start`` must be the
        map's size (a map without one starts at 0): anything else is a gap, ``ValueError``.

        Records grow by appending items (``extend_record_bytes``), never by decoding
        and re-encoding them, so a batch costs its own notices, not the records'
        sizes; the entries are admitted, so every record folds. The batch folds into
        the cache's layer, written at the end unless the cache holds rows back (rule
        *rows held back*): then all of it once the layer is past a bound, else a slice of
        it if one is due, unless ``hold`` (a caller outside a write transaction: the next
        advance writes).
        ``repair``: the tables may hold records written by slices past their size (a
        holder that stopped in the middle of a write in slices); items at or past
        ``start`` are dropped from the records read, so none is folded twice.
        """
        size = self.size()
        if start != (size or 0) or end < start:
            raise ValueError("a map advances only from the size it has folded")
        if size is None:
            if hold:
                raise ValueError("a map's first row is written, never held")
            self.conn.execute(
                "INSERT INTO map_state (id, format, size) VALUES (1, ?, 0)", (STORE_FORMAT,)
            )
        with self.scoped_cache():  # without one, path reads and write decode twice
            cache = self.cache
            assert cache is not None
            if hold and not cache.holds:
                raise ValueError("only a cache that holds rows back can hold a batch's")
            layer = cache.open_layer(start, self.nodes.root(), self.nodes.root_value())
            items: dict[str, list[bytes]] = {}
            for index, notice in notices:
                if not start <= index < end:
                    raise ValueError("a notice outside the entries folded")
                items.setdefault(notice.tool_id, []).append(record_item_bytes(index, notice))
            before = self.stored.get_many_raw(list(items))
            if repair:
                before = _records_before(before, start)
            records = {
                tool_id: extend_record_bytes(before.get(tool_id), added)
                for tool_id, added in items.items()
            }
            grown = (len(layer.groups), layer.record_bytes)
            cache.hold_records(records)
            root = self.tree.update({map_key(t): value_hash(r) for t, r in records.items()})
            layer.size = end
            if not cache.holds or (cache.full() and not hold):
                self.flush()
            elif not hold and cache.due():
                added = (end - start, len(layer.groups) - grown[0], layer.record_bytes - grown[1])
                self.write_slice(*cache.pace(*added))
        return root

    def flush(self) -> None:
        """Write the layer (rule *rows held back*) in the caller's transaction: its records,
        groups, root and size; nothing to do without one."""
        layer = None if self.cache is None else self.cache.layer
        if layer is None:
            return
        self.stored.write(layer.records)
        self.nodes.write_groups(layer.groups)
        self.nodes.write_root(layer.root, layer.root_value, layer.size)
        assert self.cache is not None
        self.cache.written()  # after the writes: a failed one leaves the cache as it was

    def write_slice(self, groups: int = 0, record_bytes: int = 0) -> bool:
        """Write the next slice of the layer as committed (rule *slices*) in the caller's
        transaction: its next groups, deepest first, and its next records (at least the
        cache's slice, or ``groups`` and ``record_bytes``: ``MapCache.pace``); with the
        last, the tables' size and root. True once that last slice is written."""
        cache = self.cache
        assert cache is not None
        writing = cache.start_writing()
        if writing is None or writing.finished:
            return writing is not None
        cache.sliced()  # before the commit: a reader that took an older view reads again
        layer = writing.layer
        count = max(groups, cache.slice_groups, 1)
        ids = writing.groups[writing.next_group : writing.next_group + count]
        self.nodes.write_groups({gid: layer.groups[gid] for gid in ids})
        writing.next_group += len(ids)
        records: list[tuple[str, bytes]] = []
        size, budget = 0, max(record_bytes, cache.slice_record_bytes, 1)
        while writing.next_record < len(writing.records) and size < budget:
            tool_id = writing.records[writing.next_record]
            records.append((tool_id, layer.records[tool_id]))
            size += len(records[-1][1])
            writing.next_record += 1
        self.stored.write(records)
        if writing.next_record < len(writing.records) or writing.next_group < len(writing.groups):
            return False
        self.nodes.write_root(layer.root, layer.root_value, layer.size)
        writing.finished = True
        return True

    def prove_at_size(
        self, tool_id: str, view: MapView | None = None, moved: Callable[[], bool] | None = None
    ) -> tuple[int, MapProof]:
        """``(size, proof)`` read in one read transaction (rule *proofs read one size*), so
        the proof is of the map at that size; for readers only: it opens and ends a
        transaction on ``conn``. ``view``: the writer's, taken before (``StoredMap.view``):
        its layer is read above the tables when they are at its base size (else the writer
        has written it since: the tables are at its size or past it). ``moved``: True if
        the writer has written slices since ``view`` was taken; asked once this
        transaction's snapshot is taken, and then ``ViewMoved`` (the tables may hold rows
        the layer does not shadow): read again with a new view. ``MapStorageError`` if this
        database has no map (of this format)."""
        self.conn.execute("BEGIN")
        try:
            size = self._table_size()
            if size is None or self.format() != STORE_FORMAT:
                raise MapStorageError(message="no map")
            if moved is not None and moved():
                raise ViewMoved()
            layer = None if view is None else view.layer
            above = layer if layer is not None and layer.base == size else None
            with self.scoped_cache(MapCache.over(above)):
                return self.size() or 0, self.prove(tool_id)
        finally:
            self.conn.execute("COMMIT")


def _records_before(records: Mapping[str, bytes], index: int) -> dict[str, bytes]:
    """``records`` with their items at log ``index`` and after dropped (a record without
    any left is no record)."""
    kept: dict[str, bytes] = {}
    for tool_id, raw in records.items():
        record = StatusRecord.decode(raw, tool_id)
        items = [item for item in record.notices if item.index < index]
        if len(items) == len(record.notices):
            kept[tool_id] = raw
        elif items:
            kept[tool_id] = StatusRecord.build(tool_id, items).encode()
    return kept
