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
   rows in one read transaction (``prove_at_size``), so a proof and its size agree.
4. ``map_state.format`` names the layout and record format of the rows
   (``STORE_FORMAT``). Tables of another format (the JSON records of the spec's
   first draft have no such column) are never read or extended:
   ``discard_other_format`` drops them whole, so their holder folds the map again
   rather than mixing two formats.
5. A writer may keep a ``MapCache``: a bounded copy of groups (their stored bytes) and
   records it read or wrote on its own connection, so a batch reads its paths from
   memory. It is filled on read and updated on write, inside the writer's open
   transaction, so it holds exactly what that transaction sees. Whoever ends a
   transaction without committing it (a rollback, a failed commit) calls ``forget()``
   before the next batch, and so does any writer that did not write the previous
   committed transaction itself (another process moved the tables): the cache never
   serves a row its tables do not hold. Readers keep no cache: the writer changes their
   tables under them. A holder without a cache (a follower, a map-verifying witness, a
   reader) keeps one for a single ``advance`` or a single read transaction
   (``scoped_cache``), and drops it when that returns or fails.
6. The queries are the common subset of SQLite and PostgreSQL (``client.dbapi``);
   the DDL here is SQLite's, the authority keeps PostgreSQL's beside its own schema.
7. Inner nodes are stored in groups, one row each: the nodes splitting on bits
   ``4g .. 4g+3`` under one ``4g``-bit prefix (at most 15), keyed by the id the
   node at bit ``4g`` would have (``group_id``). A leaf's value is kept with its
   parent (the root leaf's in ``map_state``), so there is no leaf table. A batch
   rewrites about a quarter as many rows as it changes nodes: a commit's cost is
   its dirty pages, and one-node rows spread a batch over more than twice as many.
   A batch writes its rows in a few multi-row upserts (``client.dbapi.insert_rows``),
   not a statement per row. In memory too a group is its stored bytes (the cache, the
   layer): a batch walks the groups on its paths decoded (the cache keeps the last
   ``DECODED_GROUPS`` so) and hands back the bytes of the groups it changed.
8. A writer whose cache holds rows back (``MapCache`` with ``layer_entries``, the
   authority's on SQLite, where it is the one process writing and reading) folds each
   batch into memory only: the batch's groups, records, root and size go to the
   cache's ``MapLayer``, above the tables, and are written (``StoredMap.flush``) in a
   later transaction of the caller's, once the layer holds more than its bounds, when
   the caller chooses (an idle sequencer, a close), coalesced: a group rewritten by
   ten batches is written once. The tables stay a map at one committed size (rules 2
   and 3), at or below the log's; the map is a function of the log's prefix, so a
   crash loses nothing that a fold of the entries after ``map_state.size`` does not
   give back (the authority folds them at start). After each commit the caller calls
   ``committed()``: the layer as committed (``CommittedLayer``) is kept, read-only,
   for rollbacks (``forget`` undoes the changes since) and for readers in the writer's
   process, whose proofs read it above the tables when the tables are at its base size
   (``prove_at_size``). It shares the live layer's dicts, which record each change
   before they make it (``client.history``): a commit costs O(1), not a copy of the
   layer, and a reader in another thread never sees a later batch's rows.
   Without ``layer_entries`` a layer lives for one ``advance`` and is written at its
   end, in the caller's transaction, as every other holder does.
9. With ``slice_groups`` the layer as committed is written in slices instead, once it
   is past three quarters of a bound: each ``advance`` writes the next groups, deepest
   first (children before parents), and the next records, paced (``MapCache.pace``) so
   the write is over before the live layer reaches a bound; the last slice moves
   ``map_state``. Until then the tables hold rows past their size: readers in the
   writer's process shadow them with their view's layer and read again (``ViewMoved``)
   if a slice came after their view, and a start after a kill folds the entries past
   ``map_state.size`` again with ``repair``, dropping from records the items a slice
   wrote.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Final, Generic, TypeVar

from deplog.client.dbapi import Connection, insert_rows
from deplog.client.errors import ErrorCode
from deplog.client.history import History, Snapshot
from deplog.client.model.notice import Notice
from deplog.client.model.status import InvalidMark
from deplog.client.model.vmap import (
    KEY_BITS,
    ChildRef,
    InnerNode,
    MapFormatError,
    MapProof,
    StatusRecord,
    VerifiableMap,
    extend_record_bytes,
    leaf_hash,
    map_key,
    record_item_bytes,
    value_hash,
)

__all__ = [
    "DEFAULT_CACHE_GROUP_BYTES",
    "DEFAULT_CACHE_RECORD_BYTES",
    "SCHEMA",
    "STORE_FORMAT",
    "CommittedLayer",
    "MapCache",
    "MapLayer",
    "MapView",
    "SqliteNodeStore",
    "SqliteRecords",
    "StoredMap",
    "ViewMoved",
    "group_id",
]

STORE_FORMAT = 3
"""The layout of these tables: 3 stores inner nodes in groups (rule 7) with the compact
binary records of ``docs/fold-spec.md`` section 3; 2 had one row per inner node and a
leaf table; 1 (no ``format`` column) held the first draft's JSON records."""
_TABLES = ("map_state", "map_group", "map_record")
_OLD_TABLES = ("map_inner", "map_leaf")
"""Format 2's tables, dropped with the rest of a map of another format (rule 4)."""

SCHEMA = (
    # One row per group of inner nodes (rule 7): ``nodes`` is their ``_encode_group``. A
    # rowid table: its rows (up to about 1.1 KB) are too large for a WITHOUT ROWID
    # table's pages, where a batch's upserts measured about twice as slow.
    """CREATE TABLE IF NOT EXISTS map_group (
        id BLOB PRIMARY KEY,
        nodes BLOB NOT NULL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS map_record (
        tool_id TEXT PRIMARY KEY,
        record BLOB NOT NULL
    ) STRICT, WITHOUT ROWID""",
    # One row: the record format, the log size folded in and the root reference (NULL
    # id: the empty map; ``root_value`` is the leaf's value when the root is a leaf).
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


DEFAULT_CACHE_GROUP_BYTES = 24 << 20
"""Stored bytes of groups a writer's cache keeps: the top of the tree and the paths of
recent batches (100 to 130 bytes a node: about 200,000 nodes)."""
DEFAULT_CACHE_RECORD_BYTES = 16 << 20
"""Record bytes a writer's cache keeps: records grow with their tool's notices."""
_IN_CHUNK = 500
"""Ids per ``WHERE ... IN`` read, under every SQLite build's bound on parameters."""
GROUP_BITS = 4
"""Split bits per group (rule 7): a group holds at most 2^4 - 1 inner nodes."""
DECODED_GROUPS = 4096
"""Groups a cache keeps decoded beside their bytes, for batches (which walk and rewrite
rows as objects) and reads of whole groups."""

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K]):
    """Byte strings by key up to a total length, the least recently used first out."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.total = 0
        self.entries: OrderedDict[K, bytes] = OrderedDict()

    def get(self, key: K) -> bytes | None:
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key: K, value: bytes) -> None:
        entries = self.entries
        old = entries.pop(key, None)
        self.total += len(value) - (0 if old is None else len(old))
        entries[key] = value
        while self.total > self.capacity:
            self.total -= len(entries.popitem(last=False)[1])

    def clear(self) -> None:
        self.entries.clear()
        self.total = 0


_Row = tuple[InnerNode, bytes | None, bytes | None, bytes | None]
"""An inner node as its group keeps it: the node, the values of its children that are
leaves, and its stored bytes as read (None for a row a batch rewrote: ``_encode_row``),
so a group is re-encoded by a join of its rows' bytes."""
_Group = dict[bytes, _Row]
"""A decoded group: node id -> row (the Python's batch, and reads of whole groups)."""


def group_id(node: bytes) -> bytes:
    """The id of the group (rule 7) of the inner node with id ``node``: the ``node_id`` of
    the group's top split bit over the node's prefix."""
    bit = node[0]
    top = bit - bit % GROUP_BITS
    if top == bit:
        return node
    prefix = node[1 : 1 + (top + 7) // 8]
    if top % 8:  # GROUP_BITS divides 8: the last byte keeps its high half
        return bytes((top,)) + prefix[:-1] + bytes((prefix[-1] & 0xF0,))
    return bytes((top,)) + prefix


_CHILD_BITS: Final = tuple(bytes(((bits - 1) & 0xFF,)) for bits in range(KEY_BITS + 1))
"""A child's first byte by its split bit: ``bits - 1``, so a leaf's 256 is 0xFF."""


def _encode_row(row: _Row) -> bytes:
    """A row's bytes (``_decode_entry``'s inverse): the node's id, then each child as
    ``u8 bits-1``, its id after the first byte (a leaf's whole key), and its hash (a
    leaf's value instead: rule 7)."""
    (nid, _, left, right), lv, rv, _ = row
    return b"".join(
        (
            nid,
            _CHILD_BITS[left.bits],
            left.id[1:] if lv is None else left.id,
            left.hash if lv is None else lv,
            _CHILD_BITS[right.bits],
            right.id[1:] if rv is None else right.id,
            right.hash if rv is None else rv,
        )
    )


def _encode_group(group: _Group) -> bytes:
    """The group's stored bytes: its rows in the order they joined it (the stored order,
    then later batches' new nodes; decoding needs no order, and keeping it spares sorting
    every group), a row read and not rewritten as it was read."""
    return b"".join([_encode_row(row) if row[3] is None else row[3] for row in group.values()])


def _decode_child(blob: bytes, at: int) -> tuple[ChildRef, bytes | None, int]:
    bits = blob[at] + 1
    if bits == KEY_BITS:
        key, value, end = blob[at + 1 : at + 33], blob[at + 33 : at + 65], at + 65
        if len(value) != 32:
            raise KeyError("map group malformed")
        return ChildRef(key, bits, leaf_hash(key, value)), value, end
    cut = at + 1 + (bits + 7) // 8
    digest, end = blob[cut : cut + 32], cut + 32
    if len(digest) != 32:
        raise KeyError("map group malformed")
    return ChildRef(bytes((bits,)) + blob[at + 1 : cut], bits, digest), None, end


def _decode_entry(blob: bytes, at: int) -> tuple[_Row, int]:
    bit = blob[at]
    end = at + 1 + (bit + 7) // 8
    node = blob[at:end]
    left, lv, end = _decode_child(blob, end)
    right, rv, end = _decode_child(blob, end)
    return (InnerNode(node, bit, left, right), lv, rv, blob[at:end]), end


def _decode_group(blob: bytes) -> _Group:
    """The encoded group's rows; KeyError for bytes it did not write (altered storage)."""
    group: _Group = {}
    at = 0
    try:
        while at < len(blob):
            row, at = _decode_entry(blob, at)
            if row[0].id in group or len(group) == 2**GROUP_BITS - 1:
                raise IndexError  # a node twice, or more than a group holds
            group[row[0].id] = row
    except IndexError:
        raise KeyError("map group malformed") from None
    return group


def _find_in_group(blob: bytes, node: bytes) -> _Row:
    """The row of ``node`` in an encoded group, decoding only it (a lookup's read)."""
    at = 0
    try:
        while at < len(blob):
            size = 1 + (blob[at] + 7) // 8
            if blob[at : at + size] == node:
                return _decode_entry(blob, at)[0]
            at += size
            for _ in range(2):  # skip both children
                bits = blob[at] + 1
                at += 65 if bits == KEY_BITS else 33 + (bits + 7) // 8
    except IndexError:
        pass
    raise KeyError("map node missing")


@dataclass
class MapLayer:
    """The map's rows folded above its tables and not written yet (rule 8): the groups and
    records that differ from the tables at size ``base``, and the root and size they
    bring the map to. A writer's own layer changes batch by batch, its rows only through
    ``set_group``, ``set_record`` and ``drop_rows``; ``commit`` hands readers the layer as
    it is then (``CommittedLayer``), without a copy (``client.history``)."""

    base: int
    size: int
    root: ChildRef | None
    root_value: bytes | None
    """The root leaf's value when the root is a leaf (``map_state.root_value``)."""
    groups: dict[bytes, bytes] = field(default_factory=dict)
    """Group id -> the group's stored bytes (rule 7)."""
    records: dict[str, bytes] = field(default_factory=dict)
    record_bytes: int = 0
    _groups: History[bytes, bytes] = field(init=False, repr=False, compare=False)
    _records: History[str, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._groups = History(self.groups)
        self._records = History(self.records)

    def set_group(self, gid: bytes, group: bytes) -> None:
        self._groups.set(gid, group)

    def set_record(self, tool_id: str, record: bytes) -> None:
        old = self.records.get(tool_id)
        self.record_bytes += len(record) - (0 if old is None else len(old))
        self._records.set(tool_id, record)

    def drop_rows(self, written: MapLayer) -> tuple[dict[bytes, bytes], dict[str, bytes]]:
        """Drop the groups and records ``written`` (the tables hold them now) that this
        layer has not changed since; those dropped."""
        groups = {gid: g for gid, g in written.groups.items() if self.groups.get(gid) is g}
        records = {t: r for t, r in written.records.items() if self.records.get(t) is r}
        for gid in groups:
            self._groups.pop(gid)
        for tool_id, record in records.items():
            self._records.pop(tool_id)
            self.record_bytes -= len(record)
        return groups, records

    def commit(self) -> CommittedLayer:
        """The layer as it is now, for readers and rollbacks; it never changes."""
        return CommittedLayer(
            self.base,
            self.size,
            self.root,
            self.root_value,
            self._groups.commit(),
            self._records.commit(),
            self.record_bytes,
        )

    def revert(self, committed: CommittedLayer) -> None:
        """Go back to ``committed``, this layer's last commit."""
        assert committed.of(self)
        self.base, self.size = committed.base, committed.size
        self.root, self.root_value = committed.root, committed.root_value
        self.record_bytes = committed.record_bytes
        self._groups.revert()
        self._records.revert()


@dataclass(frozen=True)
class CommittedLayer:
    """A writer's layer as of one of its commits (rule 8): what readers in its process read
    above the tables, and what a write in slices writes. It shares the live layer's dicts
    (``client.history``), so taking it costs nothing, and it never changes."""

    base: int
    size: int
    root: ChildRef | None
    root_value: bytes | None
    groups: Snapshot[bytes, bytes]
    records: Snapshot[str, bytes]
    record_bytes: int

    def of(self, layer: MapLayer) -> bool:
        """True if this is a commit of ``layer``."""
        return self.groups.of(layer.groups)

    def copy(self) -> MapLayer:
        """A new live layer as this one is (a writer's own)."""
        return MapLayer(
            self.base,
            self.size,
            self.root,
            self.root_value,
            self.groups.copy(),
            self.records.copy(),
            self.record_bytes,
        )


class ViewMoved(Exception):
    """The writer wrote slices of its layer since the reader took its view: take a new one."""


@dataclass(frozen=True)
class MapView:
    """What a reader in the writer's process takes before it reads (rule 8): the layer as
    of the writer's last commit (None: nothing held), and the slices the writer had
    written by then (``MapCache.slices``)."""

    layer: CommittedLayer | None = None
    slices: int = 0


@dataclass
class _Writing:
    """A write of the layer in slices under way (rule 9): the layer as committed when it
    began, its groups deepest first and its records, and how many of each are written.
    Children come before their parents, so the rows written at any moment are whole
    subtrees of that layer's map over the tables' older ones."""

    layer: MapLayer
    """A copy of the layer as committed then (plain dicts: many slices read it)."""
    groups: list[bytes]
    records: list[str]
    record_ends: list[int]
    """Bytes of ``records`` before each one (and all of them, last): what is left to
    write is ``record_ends[-1] - record_ends[next_record]``."""
    next_group: int = 0
    next_record: int = 0
    finished: bool = False
    """The last slice, with ``map_state``, is in the caller's open transaction."""


class MapCache:
    """A writer's bounded copy of map rows and records (rule 5): groups as their stored
    bytes and records, each bounded by bytes, least recently used first out; and, holding
    rows back (rule 8), the layer of rows not written yet, which is never evicted. A batch
    walks its paths through the groups kept decoded and hands back the new bytes of the
    groups it changed.

    ``layer_entries``, ``layer_groups`` and ``layer_record_bytes`` bound the layer: an
    ``advance`` that leaves it larger than any of them writes all of it. Zero (the
    default) writes every ``advance``'s rows at its end. With ``slice_groups``, the layer
    as committed is written in slices of at least that many groups (and
    ``slice_record_bytes`` of records) once it is past three quarters of a bound, one
    slice an ``advance``, so no batch writes all of it while the writer keeps up."""

    def __init__(
        self,
        max_group_bytes: int = DEFAULT_CACHE_GROUP_BYTES,
        max_record_bytes: int = DEFAULT_CACHE_RECORD_BYTES,
        *,
        layer_entries: int = 0,
        layer_groups: int = 0,
        layer_record_bytes: int = 0,
        slice_groups: int = 0,
        slice_record_bytes: int = 0,
    ) -> None:
        self.groups: _Lru[bytes] = _Lru(max_group_bytes)
        """Group id -> stored bytes, in the order loaded or written, not read: a batch
        rewrites every group it reads, so its paths are the most recent all the same."""
        self.records: _Lru[str] = _Lru(max_record_bytes)
        self.decoded: OrderedDict[bytes, tuple[bytes, _Group]] = OrderedDict()
        """Group id -> (bytes, rows), the ``DECODED_GROUPS`` last decoded or written:
        valid while the map's bytes of the group are those very bytes (one object, never
        equal bytes of another time), so no write or rollback has to update it."""
        self.layer_entries = layer_entries
        self.layer_groups = layer_groups
        self.layer_record_bytes = layer_record_bytes
        self.slice_groups = slice_groups
        self.slice_record_bytes = slice_record_bytes
        self.layer: MapLayer | CommittedLayer | None = None
        """The rows not written yet (rule 8), None when the tables are the whole map: a
        writer's own (``live``), or the one a reader's cache reads above the tables."""
        self.writing: _Writing | None = None
        """A write of the layer in slices under way."""
        self.slices = 0
        """Slices written so far, counted before their transaction commits: a reader whose
        view counted fewer may find rows its layer does not shadow, and reads again."""
        self.view = MapView()
        """The layer as of the caller's last commit, for ``forget`` and for readers."""
        self._committed_writing: tuple[_Writing, int, int] | None = None
        self._written_whole = False
        """The layer was written whole in the open transaction: the layer as last committed
        is older than the tables now, so no write in slices starts from it before a commit."""
        self._changed = False

    @property
    def holds(self) -> bool:
        """True if this cache holds rows back past the ``advance`` that folded them."""
        return self.layer_entries > 0

    @property
    def committed(self) -> CommittedLayer | None:
        """The layer as of the caller's last commit."""
        return self.view.layer

    @property
    def live(self) -> MapLayer:
        """A writer's own layer, which its batches change (one is open)."""
        layer = self.layer
        assert isinstance(layer, MapLayer)
        return layer

    def full(self) -> bool:
        """True if the layer is past one of its bounds: the ``advance`` that took it there
        writes all of it."""
        return _past(self.layer, self.layer_entries, self.layer_groups, self.layer_record_bytes)

    def due(self) -> bool:
        """True if the layer as committed is to be written in slices (past three quarters
        of a bound: late, so that the groups many batches rewrite are written once), or a
        write of it is under way."""
        if self.writing is not None:
            return not self.writing.finished
        if not self.slice_groups or self._written_whole:
            return False
        return _past(
            self.committed,
            self.layer_entries * 3 // 4,
            self.layer_groups * 3 // 4,
            self.layer_record_bytes * 3 // 4,
        )

    def group(self, gid: bytes) -> bytes | None:
        """The group with this id as the map has it now: the layer's, else the cached one
        (recency is not moved: a batch's write will)."""
        layer = self.layer
        if layer is not None:
            group = layer.groups.get(gid)
            if group is not None:
                return group
        return self.groups.entries.get(gid)

    def record(self, tool_id: str) -> bytes | None:
        """The record of a tool as the map has it now, if this cache has it."""
        layer = self.layer
        if layer is not None:
            record = layer.records.get(tool_id)
            if record is not None:
                return record
        return self.records.get(tool_id)

    def decoded_group(self, gid: bytes, blob: bytes) -> _Group:
        """The rows of group ``gid`` whose bytes are ``blob``, decoded once."""
        known = self.decoded.get(gid)
        if known is not None and known[0] is blob:
            self.decoded.move_to_end(gid)
            return known[1]
        group = _decode_group(blob)
        self.remember(gid, blob, group)
        return group

    def remember(self, gid: bytes, blob: bytes, group: _Group) -> None:
        """Keep ``group``, the rows of ``blob``, decoded."""
        self.decoded[gid] = (blob, group)
        self.decoded.move_to_end(gid)
        if len(self.decoded) > DECODED_GROUPS:
            self.decoded.popitem(last=False)

    def put_groups(self, groups: Mapping[bytes, bytes]) -> None:
        """Cache ``groups`` (read from the table, or a batch's written), each replacing the
        cached one with its id."""
        for gid, group in groups.items():
            self.groups.put(gid, group)

    def hold_groups(self, groups: Mapping[bytes, bytes]) -> None:
        """Keep a batch's groups in the layer (rule 8) instead of writing them: a group moves
        out of the least recently used ones, never evicted until it is written."""
        layer, cached = self.live, self.groups.entries
        for gid, group in groups.items():
            if gid not in layer.groups:
                old = cached.pop(gid, None)
                if old is not None:
                    self.groups.total -= len(old)
            layer.set_group(gid, group)
        self._changed = True

    def hold_records(self, records: Mapping[str, bytes]) -> None:
        """Keep a batch's records in the layer (rule 8) instead of writing them."""
        layer = self.live
        for tool_id, record in records.items():
            layer.set_record(tool_id, record)
        self._changed = True

    def open_layer(self, base: int, root: ChildRef | None, root_value: bytes | None) -> MapLayer:
        """The layer a batch folds into: the one held, else a new one over tables at size
        ``base`` whose root is ``root``."""
        if self.layer is None:
            self.layer = MapLayer(base, base, root, root_value)
            self._changed = True
        return self.live

    def pace(self, entries: int, groups: int, record_bytes: int) -> tuple[int, int]:
        """The groups and record bytes a slice writes so that the write under way (or about
        to start) is over before the layer reaches a bound, at the pace of a batch that
        added ``entries``, ``groups`` and ``record_bytes`` to it."""
        writing, layer = self.start_writing(), self.layer
        if writing is None or layer is None:
            return 0, 0
        room = [(self.layer_entries - (layer.size - layer.base)) // max(1, entries)]
        if groups > 0:
            room.append((self.layer_groups - len(layer.groups)) // groups)
        if record_bytes > 0:
            room.append((self.layer_record_bytes - layer.record_bytes) // record_bytes)
        batches = max(1, min(room) - 1)  # one batch to spare
        left_groups = len(writing.groups) - writing.next_group
        left_bytes = writing.record_ends[-1] - writing.record_ends[writing.next_record]
        return -(-left_groups // batches), -(-left_bytes // batches)

    def start_writing(self) -> _Writing | None:
        """The write in slices under way, or a new one of the layer as committed (None if
        nothing committed is held)."""
        if self.writing is None:
            committed = self.committed
            if committed is None or self._written_whole:
                return None
            layer = committed.copy()  # once a write, not a commit: many slices read it
            records = list(layer.records)
            self.writing = _Writing(
                layer,
                sorted(layer.groups, key=lambda gid: gid[0], reverse=True),
                records,
                list(accumulate((len(layer.records[t]) for t in records), initial=0)),
            )
            self._changed = True
        return self.writing

    def sliced(self) -> None:
        """A slice was written in the caller's transaction (counted before it commits)."""
        self.slices += 1
        self._changed = True

    def written(self) -> None:
        """The whole layer is in the tables now: cache it as read, least recently used first
        out again; a write in slices is moot."""
        layer = self.live
        self.layer = self.writing = None
        self._changed = self._written_whole = True
        self.put_groups(layer.groups)
        for tool_id, record in layer.records.items():
            self.records.put(tool_id, record)

    def _rebase(self, written: MapLayer) -> None:
        """The tables are at ``written``'s size now (its last slice committed): the layer is
        over them, and what it has not changed since is cached as read."""
        layer = self.live
        layer.base = written.size
        groups, records = layer.drop_rows(written)
        self.put_groups(groups)
        for tool_id, record in records.items():
            self.records.put(tool_id, record)
        if layer.size == layer.base and not layer.groups and not layer.records:
            self.layer = None

    def commit(self) -> None:
        """The caller committed: a write in slices whose last slice it held is over, and the
        layer as it is now is kept for ``forget`` and readers."""
        if not self._changed:
            return
        writing = self.writing
        if writing is not None and writing.finished:
            self._rebase(writing.layer)
            self.writing = writing = None
        self._committed_writing = (
            None if writing is None else (writing, writing.next_group, writing.next_record)
        )
        self._written_whole = False
        self.view = MapView(None if self.layer is None else self.live.commit(), self.slices)
        self._changed = False

    def forget(self) -> None:
        """Drop every cached row, which the tables may no longer hold (rule 5), and go back
        to the layer, and the write in slices, as last committed (rule 8)."""
        self.groups.clear()
        self.records.clear()
        self.decoded.clear()
        committed, layer = self.committed, self.layer
        if committed is None:
            self.layer = None
        elif isinstance(layer, MapLayer) and committed.of(layer):
            layer.revert(committed)  # the changes since, not the whole layer
        else:  # written whole since, or another layer opened
            self.layer = committed.copy()
        # A slice counted in the transaction undone is not in the tables: a view of the
        # layer as committed is current again (else every reader is told to read again
        # until the next commit).
        self.view = MapView(committed, self.slices)
        self.writing = None
        self._written_whole = False
        if self._committed_writing is not None:
            writing, next_group, next_record = self._committed_writing
            writing.next_group, writing.next_record = next_group, next_record
            writing.finished = False
            self.writing = writing
        self._changed = False

    @classmethod
    def over(cls, layer: CommittedLayer | None) -> MapCache:
        """A reader's cache for one read transaction, seeing ``layer`` above the tables."""
        cache = cls()
        cache.layer = layer
        return cache


def _past(
    layer: MapLayer | CommittedLayer | None, entries: int, groups: int, record_bytes: int
) -> bool:
    """True if ``layer`` holds more than one of these."""
    if layer is None:
        return False
    return (
        layer.size - layer.base > entries
        or len(layer.groups) > groups
        or layer.record_bytes > record_bytes
    )


class SqliteNodeStore:
    """The ``NodeStore`` of a ``PrefixTree`` over ``map_group``/``map_state``.

    A missing or unreadable row raises ``KeyError``, as the in-memory store does; its
    holder reports that as altered storage. With a ``cache`` (writers only, rule 5),
    groups come from memory when it holds them, and a cache that holds rows back keeps
    a batch's in its layer (rule 8). Rows are decoded as they are read: one row of a
    group for a lookup, whole groups (kept decoded by the cache) for a batch.
    """

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache

    def root(self) -> ChildRef | None:
        """The root reference, None for the empty map (or no map yet)."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.root
        row = self.conn.execute(
            "SELECT root_id, root_bits, root_hash FROM map_state WHERE id = 1"
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return ChildRef(bytes(row[0]), int(row[1]), bytes(row[2]))

    def root_value(self) -> bytes | None:
        """The root leaf's value, None unless the root is a leaf."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.root_value
        row = self.conn.execute("SELECT root_value FROM map_state WHERE id = 1").fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def group(self, gid: bytes) -> bytes | None:
        """The stored bytes of group ``gid`` as the map has them now (None: no such group):
        the cache's, else read (and cached)."""
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

    def _row(self, node: bytes) -> _Row:
        gid = group_id(node)
        blob = self.group(gid)
        if blob is None:
            raise KeyError("map node missing")
        cache = self.cache
        if cache is None or gid not in cache.decoded:
            return _find_in_group(blob, node)  # one row decoded, not fifteen
        row = self._decoded_group(gid, blob).get(node)
        if row is None:
            raise KeyError("map node missing")
        return row

    def _decoded_group(self, gid: bytes, blob: bytes) -> _Group:
        return _decode_group(blob) if self.cache is None else self.cache.decoded_group(gid, blob)

    def _groups(self, ids: Sequence[bytes]) -> dict[bytes, _Group]:
        """The groups of ``ids`` (those that exist) decoded: the cache's, the rest read in one
        query per 500 ids (and cached)."""
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
        """The nodes of the groups the cache holds, each group decoded on first need (the
        batch walks its paths here; none without a cache)."""
        return {} if self.cache is None else _HeldNodes(self.cache)

    def inner_many(self, nodes: Sequence[bytes]) -> list[InnerNode]:
        """The inner nodes with these ids, in their order: the groups the cache lacks in
        one query per 500."""
        ids = [group_id(node) for node in nodes]
        groups = self._groups(list(dict.fromkeys(ids)))
        try:
            return [groups[gid][node][0] for gid, node in zip(ids, nodes, strict=True)]
        except KeyError:
            raise KeyError("map node missing") from None

    def leaf_value(self, key: bytes, parent: bytes | None) -> bytes:
        """The value of the leaf with this key, kept in its parent's row (rule 7)."""
        if parent is None:
            root, value = self.root(), self.root_value()
            if root is None or value is None or root.id != key:
                raise KeyError("map leaf missing")
            return value
        node, lv, rv, _ = self._row(parent)
        value = lv if node.left.id == key else rv if node.right.id == key else None
        if value is None:
            raise KeyError("map leaf missing")
        return value

    def write(
        self, root: ChildRef | None, inners: Sequence[InnerNode], leaves: Mapping[bytes, bytes]
    ) -> None:
        """Store a batch: each group a node of the batch is in rewritten whole, with the
        values of its leaf children (``keep``)."""
        value = None
        if root is not None and root.bits == KEY_BITS:
            value = leaves[root.id]  # one key in the map: the batch just set it
        self.keep(root, value, self._rows(inners, leaves))

    def keep(
        self, root: ChildRef | None, value: bytes | None, groups: Mapping[bytes, bytes]
    ) -> None:
        """A batch's groups (stored bytes) and root: into the cache's layer when it has one
        open (rule 8: ``StoredMap.advance_notices`` opens it), else written in the caller's
        transaction."""
        cache = self.cache
        if cache is not None and cache.layer is not None:
            layer = cache.live
            layer.root, layer.root_value = root, value
            cache.hold_groups(groups)
            return
        self.write_groups(groups)
        self.conn.execute(
            f"UPDATE map_state SET {_ROOT_COLUMNS} WHERE id = 1", _root_row(root, value)
        )
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
            after[gid] = blob = _encode_group(group)
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


class _HeldNodes(Mapping[bytes, InnerNode]):
    """``SqliteNodeStore.held``: the inner nodes of the groups in a cache (its layer's and
    its least recently used ones), by id, for one batch: a group is decoded (through the
    cache's decoded groups) and its nodes indexed on first need, so the batch reads a
    cached path without a query. The map must not change meanwhile."""

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


_ROOT_COLUMNS: Final = "root_id = ?, root_bits = ?, root_hash = ?, root_value = ?"


def _root_row(root: ChildRef | None, value: bytes | None) -> tuple[bytes | int | None, ...]:
    """``_ROOT_COLUMNS``' parameters."""
    return (None, None, None, None) if root is None else (root.id, root.bits, root.hash, value)


class _LeafValues:
    """The value of each leaf child a batch's nodes point at: the batch's own, else the one
    its previous parent kept. That parent is in the batch too (its child changed), so its
    row before the batch is among the ones read before the write, or the leaf was the
    root."""

    def __init__(
        self,
        store: SqliteNodeStore,
        changed: Mapping[bytes, bytes],
        groups: Mapping[bytes, _Group],
        written: Mapping[bytes, list[InnerNode]],
    ) -> None:
        self.store = store
        self.changed = changed
        self.groups = groups
        self.written = written
        self.kept: dict[bytes, bytes] | None = None

    def of(self, ref: ChildRef, old: _Row | None) -> bytes:
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
            raise KeyError("map leaf missing")
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
    """What a cache's ``get`` (None: no cache) finds of ``keys``, and the keys it lacks, in
    their order."""
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
        """The stored record bytes of those of ``tool_ids`` in the map: the cache's, and
        the rest read ``_IN_CHUNK`` at a time."""
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
        insert_rows(
            self.conn,
            "INSERT INTO map_record (tool_id, record)",
            list(records.items()),
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
        )
        if self.cache is not None:  # after the write: a failed one leaves it as it was
            for tool_id, record in records.items():
                self.cache.records.put(tool_id, record)

    def __delitem__(self, tool_id: str) -> None:
        raise TypeError("a tool never leaves the map")

    def __iter__(self) -> Iterator[str]:
        """The tools in the tables (a layer's not yet written are not: rule 8)."""
        rows = self.conn.execute("SELECT tool_id FROM map_record ORDER BY tool_id").fetchall()
        return iter(str(row[0]) for row in rows)

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM map_record").fetchone()[0])


class StoredMap(VerifiableMap):
    """A ``VerifiableMap`` whose rows and records live in SQLite on ``conn``.

    The caller owns transactions (rule 1): ``advance`` and ``flush`` write but never
    commit. A writer passes a ``cache``, calls ``committed`` after each commit and
    ``forget`` as rule 5 says; one whose cache holds rows back (rule 8) calls ``flush``
    in a transaction of its own choosing, and before it closes.
    """

    def __init__(self, conn: Connection, cache: MapCache | None = None) -> None:
        self.conn = conn
        self.cache = cache
        self.stored = SqliteRecords(conn, cache)
        self.nodes = SqliteNodeStore(conn, cache)
        super().__init__(self.nodes, self.stored)

    def forget(self) -> None:
        """Drop the cache (rule 5) and go back to the layer last committed (rule 8): after
        a transaction that did not commit, or one that another writer committed. Without
        a cache, nothing to drop."""
        if self.cache is not None:
            self.cache.forget()

    def committed(self) -> None:
        """The caller's transaction committed: what it folded is the map now (rule 8)."""
        if self.cache is not None:
            self.cache.commit()

    @property
    def layer(self) -> CommittedLayer | None:
        """The rows not yet written as of the last commit (rule 8); None when the tables
        are the whole map."""
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
        """Log entries folded into the layer and not yet written (rule 8)."""
        layer = None if self.cache is None else self.cache.layer
        return 0 if layer is None else layer.size - layer.base

    @contextlib.contextmanager
    def scoped_cache(self, cache: MapCache | None = None) -> Iterator[None]:
        """For a holder without a cache, inside one transaction (rule 5): the groups and
        records read or folded in the block are kept until it ends, so a proof's path (up
        to four nodes a group) and a fold's path reads and write read each group once.
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
        """The record as stored: its verifiers decode it strictly, the store need not."""
        return self.stored.raw(tool_id)

    def warm(self) -> int:
        """Fill the cache with the tables' groups, shallowest first, up to its bound (a
        writer at start, so its first batches do not read their paths a query at a time);
        the number of groups read. Without a cache, nothing to fill."""
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
                _decode_group(bytes(blob))  # read whole once: altered bytes fail the start
                if cache.group(bytes(gid)) is None:
                    cache.groups.put(bytes(gid), bytes(blob))
                read += 1
            if len(rows) < _IN_CHUNK:
                break
            after = bytes(rows[-1][0])
        return read

    @staticmethod
    def create_schema(conn: sqlite3.Connection) -> bool:
        """Create the map's tables if missing; an existing map of this format is never
        touched, one of another format is dropped first (rule 4). True if one was."""
        discarded = StoredMap.discard_other_format(conn)
        for statement in SCHEMA:
            conn.execute(statement)
        return discarded

    @staticmethod
    def other_format(conn: sqlite3.Connection) -> bool:
        """True if this database holds map tables of another format (rule 4): told by the
        tables' columns, so also before their first row (an older ``authority init``
        creates them empty), and by ``map_state.format`` once there is one."""
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
        """The log size folded in (the layer's, rule 8), None if this database has no map
        yet."""
        if self.cache is not None and self.cache.layer is not None:
            return self.cache.layer.size
        return self._table_size()

    def _table_size(self) -> int | None:
        row = self.conn.execute("SELECT size FROM map_state WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def format(self) -> int:
        """The record format of the rows (rule 4): 1 for tables without the column."""
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
        the cache's layer, written at the end unless the cache holds rows back (rule 8):
        then all of it once the layer is past a bound, else a slice of it if one is due,
        unless ``hold`` (a caller outside a write transaction: the next advance writes).
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
        """Write the layer (rule 8) in the caller's transaction: its records, groups, root
        and size; nothing to do without one."""
        layer = None if self.cache is None else self.cache.layer
        if layer is None:
            return
        insert_rows(
            self.conn,
            "INSERT INTO map_record (tool_id, record)",
            list(layer.records.items()),
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
        )
        self.nodes.write_groups(layer.groups)
        self.conn.execute(
            f"UPDATE map_state SET size = ?, {_ROOT_COLUMNS} WHERE id = 1",
            (layer.size, *_root_row(layer.root, layer.root_value)),
        )
        assert self.cache is not None
        self.cache.written()  # after the writes: a failed one leaves the cache as it was

    def write_slice(self, groups: int = 0, record_bytes: int = 0) -> bool:
        """Write the next slice of the layer as committed (rule 9) in the caller's
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
        insert_rows(
            self.conn,
            "INSERT INTO map_record (tool_id, record)",
            records,
            "ON CONFLICT (tool_id) DO UPDATE SET record = excluded.record",
        )
        if writing.next_record < len(writing.records) or writing.next_group < len(writing.groups):
            return False
        self.conn.execute(
            f"UPDATE map_state SET size = ?, {_ROOT_COLUMNS} WHERE id = 1",
            (layer.size, *_root_row(layer.root, layer.root_value)),
        )
        writing.finished = True
        return True

    def prove_at_size(
        self, tool_id: str, view: MapView | None = None, moved: Callable[[], bool] | None = None
    ) -> tuple[int, MapProof]:
        """``(size, proof)`` read in one read transaction (rule 3), so the proof is of the
        map at that size; for readers only: it opens and ends a transaction on ``conn``.
        ``view``: the writer's, taken before (``StoredMap.view``, rule 8): its layer is read
        above the tables when they are at its base size (else the writer has written it
        since: the tables are at its size or past it). ``moved``: True if the writer has
        written slices since ``view`` was taken; asked once this transaction's snapshot is
        taken, and then ``ViewMoved`` (the tables may hold rows the layer does not
        shadow): read again with a new view. KeyError if this database has no map yet."""
        self.conn.execute("BEGIN")
        try:
            size = self._table_size()
            if size is None or self.format() != STORE_FORMAT:
                raise KeyError("no map")
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
