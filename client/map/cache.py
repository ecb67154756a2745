"""A writer's map cache: bounded copies of its rows, and the layer of rows it holds back.

Rules (the mechanism: ``docs/architecture.md``, "The writer's cache"):

1. **The cache holds what its transaction sees.** Filled on read and updated on write in
   the writer's open transaction; whoever ends one without committing it, or did not
   write the last committed one, calls ``forget()`` first: the cache never serves a row
   its tables do not hold. Readers keep none across transactions.
2. **Bounded.** Groups and records by bytes, least recently used first out, decoded
   groups by count; only the layer is never evicted, until written.
3. **Held rows.** With ``layer_entries`` a batch's rows go to the layer, written whole
   by the batch that takes it past a bound, or with ``slice_groups`` in paced slices.
4. **Commits and rollbacks.** ``commit`` keeps the layer (and a write in slices) as of
   the caller's commit; ``forget`` goes back to exactly that.
5. **The state row.** ``state`` is ``map_state`` as the writer's transaction sees it (read
   once, then changed by its writes) under rule 1: a batch reads it at most once, none
   while no other process wrote since (a round trip each, on a distant database).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Final, Generic, TypeVar

from deplog.client.map.groups import Group, decode_group
from deplog.client.map.layer import CommittedLayer, MapLayer, MapView
from deplog.client.map.nodes import ChildRef

DEFAULT_CACHE_GROUP_BYTES = 24 << 20
"""Stored bytes of groups a writer's cache keeps: about 200,000 nodes."""
DEFAULT_CACHE_RECORD_BYTES = 16 << 20
"""Record bytes a writer's cache keeps."""
DECODED_GROUPS: Final = 4096
"""Groups a cache keeps decoded beside their bytes, for batches and whole-group reads."""

K = TypeVar("K")


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


@dataclass
class _Writing:
    """A write of the layer in slices under way (``stored`` rule *slices*): a copy of the
    layer as committed when it began, its groups deepest first, its records with their
    running byte counts (``record_ends``), and how many of each are written; ``finished``
    once the last slice is in the caller's open transaction."""

    layer: MapLayer
    groups: list[bytes]
    records: list[str]
    record_ends: list[int]
    next_group: int = 0
    next_record: int = 0
    finished: bool = False


@dataclass(frozen=True)
class MapState:
    """The ``map_state`` row: entries folded (None: no map yet), the root, a root leaf's value."""

    size: int | None
    root: ChildRef | None
    root_value: bytes | None


class MapCache:
    """A writer's bounded copy of map rows and records, and the rows it holds back (rules 1
    to 3): ``layer_*`` bound them (zero: none held), ``slice_*`` the least a slice writes."""

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
        self.groups: _Lru[bytes] = _Lru(max_group_bytes)  # ordered as loaded or written
        self.records: _Lru[str] = _Lru(max_record_bytes)
        self.decoded: OrderedDict[bytes, tuple[bytes, Group]] = OrderedDict()
        """Group id -> (bytes, rows): valid while the map's bytes of the group are that very
        object, so no write or rollback has to update it."""
        self.layer_entries = layer_entries
        self.layer_groups = layer_groups
        self.layer_record_bytes = layer_record_bytes
        self.slice_groups = slice_groups
        self.slice_record_bytes = slice_record_bytes
        self.layer: MapLayer | CommittedLayer | None = None
        """The rows not written yet: a writer's own (``live``), or a reader's above the
        tables; None when the tables are the whole map."""
        self.writing: _Writing | None = None
        self.slices = 0
        """Slices written so far, counted before they commit (readers compare their view's)."""
        self.view = MapView()
        """The layer as of the caller's last commit, for ``forget`` and for readers."""
        self._committed_writing: tuple[_Writing, int, int] | None = None
        self._written_whole = False
        """Written whole in the open transaction: no slice starts from the older layer."""
        self._changed = False
        self.state: MapState | None = None
        """Rule 5: the ``map_state`` row, None until read."""

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
        """True if the layer is past one of its bounds (then written whole)."""
        return _past(self.layer, self.layer_entries, self.layer_groups, self.layer_record_bytes)

    def due(self) -> bool:
        """True if a slice of the layer as committed is due: past three quarters of a bound
        (late, so groups many batches rewrite are written once), or a write under way."""
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
        """The group with this id as the map has it now: the layer's, else the cached one."""
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

    def decoded_group(self, gid: bytes, blob: bytes) -> Group:
        """The rows of group ``gid`` whose bytes are ``blob``, decoded once."""
        known = self.decoded.get(gid)
        if known is not None and known[0] is blob:
            self.decoded.move_to_end(gid)
            return known[1]
        group = decode_group(blob)
        self.remember(gid, blob, group)
        return group

    def remember(self, gid: bytes, blob: bytes, group: Group) -> None:
        """Keep ``group``, the rows of ``blob``, decoded."""
        self.decoded[gid] = (blob, group)
        self.decoded.move_to_end(gid)
        if len(self.decoded) > DECODED_GROUPS:
            self.decoded.popitem(last=False)

    def put_groups(self, groups: Mapping[bytes, bytes]) -> None:
        """Cache ``groups`` read or written."""
        for gid, group in groups.items():
            self.groups.put(gid, group)

    def hold_groups(self, groups: Mapping[bytes, bytes]) -> None:
        """Keep a batch's groups in the layer (rule *held rows*), out of the evictable ones."""
        layer, cached = self.live, self.groups.entries
        for gid, group in groups.items():
            if gid not in layer.groups:
                old = cached.pop(gid, None)
                if old is not None:
                    self.groups.total -= len(old)
            layer.set_group(gid, group)
        self._changed = True

    def hold_records(self, records: Mapping[str, bytes]) -> None:
        """Keep a batch's records in the layer (rule *held rows*) instead of writing them."""
        layer = self.live
        for tool_id, record in records.items():
            layer.set_record(tool_id, record)
        self._changed = True

    def open_layer(self, base: int, root: ChildRef | None, root_value: bytes | None) -> MapLayer:
        """The layer a batch folds into: the one held, else a new one over the tables."""
        if self.layer is None:
            self.layer = MapLayer(base, base, root, root_value)
            self._changed = True
        return self.live

    def pace(self, entries: int, groups: int, record_bytes: int) -> tuple[int, int]:
        """The groups and record bytes a slice writes to be done before the layer's bound."""
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
        """The write in slices under way, or a new one of the layer as committed, or None."""
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
        """The whole layer is in the tables now: cache it as read."""
        layer = self.live
        self.layer = self.writing = None
        self._changed = self._written_whole = True
        self.put_groups(layer.groups)
        for tool_id, record in layer.records.items():
            self.records.put(tool_id, record)

    def _rebase(self, written: MapLayer) -> None:
        """The tables are at ``written``'s size now: cache what the layer has not changed."""
        layer = self.live
        layer.base = written.size
        groups, records = layer.drop_rows(written)
        self.put_groups(groups)
        for tool_id, record in records.items():
            self.records.put(tool_id, record)
        if layer.size == layer.base and not layer.groups and not layer.records:
            self.layer = None

    def commit(self) -> None:
        """The caller committed (rule 4)."""
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
        """Drop every cached row and go back to the layer as last committed (rule 4)."""
        self.state = None
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
        # An undone slice is not in the tables: the committed layer's view is current again.
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
