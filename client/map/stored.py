"""The tool-status map in SQL tables beside the log it folds: ``StoredMap``.

One facade for every holder of a map (the authority, a follower, the auditors, a
map-verifying witness); how it writes is told in ``docs/architecture.md``. Rules:

1. **One transaction.** The tables are written only through ``StoredMap`` and never
   commit on their own: a batch's rows, records, root and size go in the caller's
   transaction, so a crash leaves the map at the last committed size.
2. **One size.** ``map_state.size`` is the log entries folded in, and a map advances
   only from exactly that size: its root is the fold of ``[0, size)``.
3. **Proofs read one size.** A proof and its size are read in one read transaction
   (rows are rewritten in place); a database without a map proves nothing.
4. **One format.** ``map_state.format`` names the rows' layout (``STORE_FORMAT``); tables
   of another are never read or extended, only dropped whole and folded again.
5. **Rows held back.** A writer whose cache holds rows back folds batches into its layer
   and writes them later (``flush``); the tables stay a map at one committed size, and
   the entries past it are folded again at start. Readers in its process read the
   layer as committed above the tables.
6. **Slices.** A layer written in slices writes children before parents and moves
   ``map_state`` with its last slice; readers shadow the rows past the size with their
   view's layer, and a start after a kill folds again with ``repair``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from deplog.client.map.cache import MapCache, MapState
from deplog.client.map.errors import MapStorageError
from deplog.client.map.hashing import map_key, value_hash
from deplog.client.map.layer import CommittedLayer, MapView, ViewMoved
from deplog.client.map.proof import MapProof
from deplog.client.map.record import StatusRecord, extend_record_bytes, record_item_bytes
from deplog.client.map.sqlstore import SCHEMA, STORE_FORMAT, SqliteNodeStore, SqliteRecords
from deplog.client.map.verifiable import VerifiableMap
from deplog.client.model.notice import Notice
from deplog.client.model.status import InvalidMark
from deplog.client.plumbing.dbapi import Connection, write

_TABLES: Final = ("map_state", "map_group", "map_record")
_OLD_TABLES: Final = ("map_inner", "map_leaf")  # format 2's (rule *one format*)


class StoredMap(VerifiableMap):
    """A ``VerifiableMap`` in SQL tables on ``conn`` (rule *one transaction*)."""

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache
        self.stored = SqliteRecords(conn, cache)
        self.nodes = SqliteNodeStore(conn, cache)
        super().__init__(self.nodes, self.stored)

    def forget(self) -> None:
        """Go back to the cache as last committed (``cache`` rule 1)."""
        if self.cache is not None:
            self.cache.forget()

    def committed(self) -> None:
        """The caller's transaction committed: what it folded is the map now."""
        if self.cache is not None:
            self.cache.commit()

    @property
    def layer(self) -> CommittedLayer | None:
        """The rows held back as of the last commit (rule *rows held back*), or None."""
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
        """Log entries folded into the layer and not yet written."""
        layer = None if self.cache is None else self.cache.layer
        return 0 if layer is None else layer.size - layer.base

    @contextlib.contextmanager
    def scoped_cache(self, cache: MapCache | None = None) -> Iterator[None]:
        """A cache for the block, for a holder without its own: each group is read once."""
        if self.cache is not None:
            yield
            return
        self.cache = self.stored.cache = self.nodes.cache = cache or MapCache()
        try:
            yield
        finally:
            self.cache = self.stored.cache = self.nodes.cache = None

    def record_bytes(self, tool_id: str) -> bytes:
        """The record of a present tool as stored (``MapStorageError`` if the tables lost it)."""
        try:
            return self.stored.raw(tool_id)
        except KeyError:
            raise MapStorageError(message="map record missing") from None

    def warm(self) -> int:
        """Fill a writer's cache with the shallowest groups (``SqliteNodeStore.warm``)."""
        return self.nodes.warm()

    @staticmethod
    def create_schema(conn: sqlite3.Connection) -> bool:
        """Create the map's tables if missing, first dropping another format's: True if so."""
        discarded = StoredMap.discard_other_format(conn)
        for statement in SCHEMA:
            conn.execute(statement)
        return discarded

    @staticmethod
    def other_format(conn: sqlite3.Connection) -> bool:
        """True if this database holds map tables of another format (rule *one format*)."""
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
        """Drop the map's tables in one savepoint if they are of another format; True if so."""
        if not StoredMap.other_format(conn):
            return False
        conn.execute("SAVEPOINT map_format")
        for table in (*_TABLES, *_OLD_TABLES):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("RELEASE map_format")
        return True

    @staticmethod
    def drop_unless_at(conn: Connection, size: int) -> None:
        """Remove the map's tables unless the map is at ``size`` (a map cannot be rewound)."""
        tables = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'map_state'"
        ).fetchone()
        if tables is None or StoredMap(conn).size() in (None, size):
            return
        for table in (*_TABLES, *_OLD_TABLES):  # whichever format's tables they are
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    def size(self) -> int | None:
        """The log size folded in (the layer's, if one is held), None without a map."""
        if self.cache is not None:
            if self.cache.layer is not None:
                return self.cache.layer.size
            return self.nodes.state().size
        return self._table_size()

    def _table_size(self) -> int | None:
        row = self.conn.execute("SELECT size FROM map_state WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def format(self) -> int:
        """The record format of the rows (rule *one format*)."""
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
        """Fold the entries ``[start, end)``, as ``fold_item`` made them, in one batch from the
        map's size (rule *one size*); the new root. ``hold``: write nothing now (rule *rows
        held back*); ``repair``: drop items at or past ``start`` from the records read (rule
        *slices*)."""
        size = self.size()
        if start != (size or 0) or end < start:
            raise ValueError("a map advances only from the size it has folded")
        if size is None:
            if hold:
                raise ValueError("a map's first row is written, never held")
            write(
                self.conn,
                "INSERT INTO map_state (id, format, size) VALUES (1, ?, 0)",
                (STORE_FORMAT,),
            )
            if self.cache is not None:
                self.cache.state = MapState(0, None, None)
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
        """Write the layer held back, if any, in the caller's transaction."""
        layer = None if self.cache is None else self.cache.layer
        if layer is None:
            return
        self.stored.write(layer.records)
        self.nodes.write_groups(layer.groups)
        self.nodes.write_root(layer.root, layer.root_value, layer.size)
        assert self.cache is not None
        self.cache.written()  # after the writes: a failed one leaves the cache as it was

    def write_slice(self, groups: int = 0, record_bytes: int = 0) -> bool:
        """Write the next slice of the committed layer (rule *slices*); True after the last."""
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
        """``(size, proof)`` read in a read transaction of its own (rule *proofs read one
        size*), above the tables the layer of a writer's ``view`` taken before; ``ViewMoved``
        if ``moved()`` says slices were written since (rule *slices*)."""
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
    """``records`` without their items at log ``index`` and after."""
    kept: dict[str, bytes] = {}
    for tool_id, raw in records.items():
        record = StatusRecord.decode(raw, tool_id)
        items = [item for item in record.notices if item.index < index]
        if len(items) == len(record.notices):
            kept[tool_id] = raw
        elif items:
            kept[tool_id] = StatusRecord.build(tool_id, items).encode()
    return kept
