"""The map's SQL tables and the two stores over them: the tree's rows and the records.

``SCHEMA`` is SQLite's DDL (PostgreSQL's is the authority's). Rules:

1. **Common SQL.** Queries are the common subset of SQLite and PostgreSQL
   (``client.plumbing.dbapi``); reads of many rows go ``_IN_CHUNK`` ids a query.
2. **The caller's transaction.** The stores write but never begin, commit or roll back.
3. **A row read is checked.** A missing or undecodable row is ``MapStorageError``; a
   record is decoded strictly (``malformed_map_record``): never a wrong proof.
4. **The cache first.** A writer's cache serves the rows it holds and keeps those read
   or written; one holding rows back keeps a batch's in its layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Final, TypeVar

from deplog.client.errors import ErrorCode
from deplog.client.map.cache import MapCache, MapState
from deplog.client.map.errors import MapFormatError, MapStorageError
from deplog.client.map.groups import (
    Group,
    Row,
    _encode_row,
    _find_in_group,
    decode_group,
    encode_group,
    group_id,
)
from deplog.client.map.hashing import KEY_BITS
from deplog.client.map.nodes import ChildRef, InnerNode
from deplog.client.map.record import StatusRecord
from deplog.client.plumbing.dbapi import Connection, insert_rows, write

STORE_FORMAT: Final = 3
"""The layout of these tables: 3, groups and binary records; 2 had a row per node and a
leaf table; 1 (no ``format`` column), the first draft's JSON records."""

SCHEMA: Final = (
    # One row per group of inner nodes (``encode_group``); a rowid table (architecture.md).
    """CREATE TABLE IF NOT EXISTS map_group (
        id BLOB PRIMARY KEY,
        nodes BLOB NOT NULL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS map_record (
        tool_id TEXT PRIMARY KEY,
        record BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    # The format, the size folded in, the root (NULL: empty; a leaf root's value).
    """CREATE TABLE IF NOT EXISTS map_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        format INTEGER NOT NULL,
        size INTEGER NOT NULL,
        root_id BLOB,
        root_bits INTEGER,
        root_hash BLOB,
        root_value BLOB
    ) STRICT""",
)


_IN_CHUNK: Final = 500
"""Ids per ``WHERE ... IN`` read, under every SQLite build's bound on parameters."""
_ROOT_COLUMNS: Final = "root_id = ?, root_bits = ?, root_hash = ?, root_value = ?"

K = TypeVar("K")
V = TypeVar("V")


class SqliteNodeStore:
    """The ``NodeStore`` of a ``PrefixTree`` over ``map_group`` and ``map_state`` (rules 3,
    4): a lookup decodes one row of a group, a batch whole groups."""

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache

    def state(self) -> MapState:
        """The ``map_state`` row, read once while a cache keeps it (``cache`` rule 5)."""
        cache = self.cache
        if cache is not None and cache.state is not None:
            return cache.state
        row = self.conn.execute(
            "SELECT size, root_id, root_bits, root_hash, root_value FROM map_state WHERE id = 1"
        ).fetchone()
        if row is None:
            state = MapState(None, None, None)
        else:
            size, node, bits, digest, value = row
            root = None if node is None else ChildRef(bytes(node), int(bits), bytes(digest))
            state = MapState(int(size), root, None if value is None else bytes(value))
        if cache is not None:
            cache.state = state
        return state

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map (or no map yet)."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.root
        return self.state().root

    def root_value(self) -> bytes | None:
        """The root leaf's value, None unless the root is a leaf."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.root_value
        return self.state().root_value

    def group(self, gid: bytes) -> bytes | None:
        """The stored bytes of group ``gid`` as the map has them now, or None."""
        cache = self.cache
        if cache is not None:
            blob = cache.group(gid)
            if blob is not None:
                return blob
        row = self.conn.execute("SELECT nodes FROM map_group WHERE id = ?", (gid,)).fetchone()
        if row is None:
            return None
        blob = bytes(row[0])
        if cache is not None:
            cache.groups.put(gid, blob)
        return blob

    def _row(self, node: bytes) -> Row:
        gid = group_id(node)
        blob = self.group(gid)
        if blob is None:
            raise MapStorageError(message="map node missing")
        cache = self.cache
        if cache is None or gid not in cache.decoded:
            return _find_in_group(blob, node)  # one row decoded, not fifteen
        row = self._decoded_group(gid, blob).get(node)
        if row is None:
            raise MapStorageError(message="map node missing")
        return row

    def _decoded_group(self, gid: bytes, blob: bytes) -> Group:
        return decode_group(blob) if self.cache is None else self.cache.decoded_group(gid, blob)

    def _groups(self, ids: Sequence[bytes]) -> dict[bytes, Group]:
        """The groups of ``ids`` that exist, decoded."""
        found, missing = _cached_and_missing(None if self.cache is None else self.cache.group, ids)
        for gid, blob in _rows_in(
            self.conn, "SELECT id, nodes FROM map_group WHERE id IN", missing
        ):
            found[bytes(gid)] = blob = bytes(blob)
            if self.cache is not None:
                self.cache.groups.put(bytes(gid), blob)
        return {gid: self._decoded_group(gid, blob) for gid, blob in found.items()}

    def inner(self, node: bytes) -> InnerNode:
        """The inner node with this id."""
        return self._row(node)[0]

    def held(self) -> Mapping[bytes, InnerNode]:
        """The nodes of the groups the cache holds (``_HeldNodes``), none without a cache."""
        return {} if self.cache is None else _HeldNodes(self.cache)

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner nodes with these ids, in their order."""
        ids = [group_id(node) for node in nodes]
        groups = self._groups(list(dict.fromkeys(ids)))
        try:
            return [groups[gid][node][0] for gid, node in zip(ids, nodes, strict=True)]
        except KeyError:
            raise MapStorageError(message="map node missing") from None

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key, kept in its parent's row (``groups``)."""
        if parent is None:
            root, value = self.root(), self.root_value()
            if root is None or value is None or root.id != key:
                raise MapStorageError(message="map leaf missing")
            return value
        node, lv, rv, _ = self._row(parent)
        value = lv if node.left.id == key else rv if node.right.id == key else None
        if value is None:
            raise MapStorageError(message="map leaf missing")
        return value

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch: each group it changed rewritten whole (``keep``)."""
        value = None
        if root is not None and root.bits == KEY_BITS:
            value = leaves[root.id]  # one key in the map: the batch just set it
        self.keep(root, value, self._rows(inners, leaves))

    def keep(
        self, root: ChildRef | None, value: bytes | None, groups: Mapping[bytes, bytes]
    ) -> None:
        """A batch's groups and root: into the cache's open layer, else written."""
        cache = self.cache
        if cache is not None and cache.layer is not None:
            layer = cache.live
            layer.root, layer.root_value = root, value
            cache.hold_groups(groups)
            return
        self.write_groups(groups)
        self.write_root(root, value)
        if cache is not None:  # after the writes: a failed one leaves the cache as it was
            cache.put_groups(groups)

    def _rows(
        self, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> dict[bytes, bytes]:
        """Each group a batch's nodes are in, rewritten with their rows: its stored bytes."""
        touched: dict[bytes, list[InnerNode]] = {}
        for node in inners:
            gid = group_id(node.id)
            nodes = touched.get(gid)
            if nodes is None:
                touched[gid] = [node]
            else:
                nodes.append(node)
        before = self._groups(list(touched))
        values = _LeafValues(self, leaves, before, touched)
        after: dict[bytes, bytes] = {}
        for gid, nodes in touched.items():
            kept = before.get(gid)
            group = {} if kept is None else kept.copy()
            for node in nodes:
                nid, _, left, right = node
                lv = values.of(left, group.get(nid)) if left.bits == KEY_BITS else None
                rv = values.of(right, group.get(nid)) if right.bits == KEY_BITS else None
                group[nid] = (node, lv, rv, _encode_row((node, lv, rv, None)))
            after[gid] = blob = encode_group(group)
            if self.cache is not None:  # what the next batch reads, decoded already
                self.cache.remember(gid, blob, group)
        return after

    def root_leaf(self) -> tuple[bytes, bytes] | None:
        """The root's key and value when the root is a leaf."""
        root, value = self.root(), self.root_value()
        return None if root is None or value is None else (root.id, value)

    def write_groups(self, groups: Mapping[bytes, bytes]) -> None:
        """Upsert ``groups`` (stored bytes) in the caller's transaction."""
        insert_rows(
            self.conn,
            "INSERT INTO map_group (id, nodes)",
            list(groups.items()),
            "ON CONFLICT (id) DO UPDATE SET nodes = excluded.nodes",
        )

    def write_root(
        self, root: ChildRef | None, value: bytes | None, size: int | None = None
    ) -> None:
        """Set ``map_state``'s root (and its size, unless None) in the caller's transaction."""
        row = (None, None, None, None) if root is None else (root.id, root.bits, root.hash, value)
        if self.cache is not None:
            known = self.cache.state
            if size is None and known is None:
                self.cache.state = None  # the size is not known here: read the row again
            else:
                folded = known.size if size is None and known is not None else size
                self.cache.state = MapState(folded, root, None if root is None else value)
        if size is None:
            write(self.conn, f"UPDATE map_state SET {_ROOT_COLUMNS} WHERE id = 1", row)
        else:
            write(
                self.conn,
                f"UPDATE map_state SET size = ?, {_ROOT_COLUMNS} WHERE id = 1",
                (size, *row),
            )

    def warm(self) -> int:
        """Fill the cache with the shallowest groups, each decoded once; how many."""
        cache = self.cache
        if cache is None:
            return 0
        read, after = 0, b""
        while cache.groups.total < cache.groups.capacity:
            rows = self.conn.execute(
                "SELECT id, nodes FROM map_group WHERE id > ? ORDER BY id LIMIT ?",
                (after, _IN_CHUNK),
            ).fetchall()
            for gid, blob in rows:
                if cache.groups.total + len(blob) > cache.groups.capacity:
                    return read
                decode_group(bytes(blob))
                if cache.group(bytes(gid)) is None:
                    cache.groups.put(bytes(gid), bytes(blob))
                read += 1
            if len(rows) < _IN_CHUNK:
                break
            after = bytes(rows[-1][0])
        return read


class _HeldNodes(Mapping[bytes, InnerNode]):
    """The inner nodes of a cache's groups by id, for one batch, each group indexed on
    first need: a cached path is walked without a query."""

    def __init__(self, cache: MapCache) -> None:
        self.cache = cache
        self.nodes: dict[bytes, InnerNode] = {}
        self.indexed: set[bytes] = set()

    def get(self, node: bytes, default: Any = None) -> Any:  # the batch's hot lookup
        found = self.nodes.get(node)
        if found is not None:
            return found
        gid = group_id(node)
        if gid in self.indexed or not self._index(gid):
            return default
        return self.nodes.get(node, default)

    def _index(self, gid: bytes) -> bool:
        blob = self.cache.group(gid)
        if blob is None:
            return False
        self.indexed.add(gid)
        for nid, row in self.cache.decoded_group(gid, blob).items():
            self.nodes[nid] = row[0]
        return True

    def __getitem__(self, node: bytes) -> InnerNode:
        found = self.get(node)
        if found is None:
            raise KeyError(node)
        return found  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[bytes]:
        layer = self.cache.layer
        for gid in [*self.cache.groups.entries, *([] if layer is None else layer.groups.keys())]:
            if gid not in self.indexed:
                self._index(gid)
        return iter(self.nodes)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _LeafValues:
    """The value of each leaf child a batch's nodes point at: the batch's own, else the one
    its previous parent (rewritten by the batch too, or the root) kept."""

    def __init__(
        self,
        store: SqliteNodeStore,
        changed: Mapping[bytes, bytes],
        groups: Mapping[bytes, Group],
        written: Mapping[bytes, list[InnerNode]],
    ) -> None:
        self.store = store
        self.changed = changed
        self.groups = groups
        self.written = written
        self.kept: dict[bytes, bytes] | None = None

    def of(self, ref: ChildRef, old: Row | None) -> bytes:
        """The value of the leaf ``ref``; ``old`` is its new parent's row before."""
        value = self.changed.get(ref.id)
        if value is None and old is not None:  # mostly: the same parent as before
            value = (
                old[1]
                if old[0].left.id == ref.id
                else old[2]
                if old[0].right.id == ref.id
                else None
            )
        if value is None:
            if self.kept is None:
                self.kept = self._kept()
            value = self.kept.get(ref.id)
        if value is None:
            raise MapStorageError(message="map leaf missing")
        return value

    def _kept(self) -> dict[bytes, bytes]:
        """The leaf values the batch's rewritten nodes kept before it."""
        kept: dict[bytes, bytes] = {}
        for gid, nodes in self.written.items():
            group = self.groups.get(gid)
            if group is None:
                continue
            for node in nodes:
                old = group.get(node.id)
                if old is None:
                    continue
                if old[1] is not None:
                    kept[old[0].left.id] = old[1]
                if old[2] is not None:
                    kept[old[0].right.id] = old[2]
        root = self.store.root_leaf()
        if root is not None:
            kept[root[0]] = root[1]
        return kept


def _cached_and_missing(
    get: Callable[[K], V | None] | None, keys: Iterable[K]
) -> tuple[dict[K, V], list[K]]:
    """What a cache's ``get`` (None: no cache) finds of ``keys``, and the keys it lacks."""
    found: dict[K, V] = {}
    missing: list[K] = []
    for key in keys:
        cached = None if get is None else get(key)
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


class SqliteRecords(MutableMapping[str, StatusRecord]):
    """Tool id -> status record in ``map_record``, decoded strictly on read (rule 3)."""

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache

    def __getitem__(self, tool_id: str) -> StatusRecord:
        return StatusRecord.decode(self.raw(tool_id), tool_id)

    def raw(self, tool_id: str) -> bytes:
        """The stored record bytes of a tool (KeyError if it is not in the map)."""
        if self.cache is not None:
            cached = self.cache.record(tool_id)
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
        """The stored record bytes of those of ``tool_ids`` in the map."""
        found, missing = _cached_and_missing(
            None if self.cache is None else self.cache.record, tool_ids
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
        raw = record.encode()
        self.write({tool_id: raw})
        if self.cache is not None:  # after the write: a failed one leaves it as it was
            self.cache.records.put(tool_id, raw)

    def write(self, records: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        """Upsert records' bytes in the caller's transaction, leaving the cache alone."""
        rows = list(records.items()) if isinstance(records, Mapping) else list(records)
        insert_rows(
            self.conn,
            "INSERT INTO map_record (tool_id, record)",
            rows,
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
        )

    def __delitem__(self, tool_id: str) -> None:
        raise TypeError("a tool never leaves the map")

    def __iter__(self) -> Iterator[str]:
        """The tools in the tables (a layer's not yet written are not)."""
        rows = self.conn.execute("SELECT tool_id FROM map_record ORDER BY tool_id").fetchall()
        return iter(str(row[0]) for row in rows)

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM map_record").fetchone()[0])
