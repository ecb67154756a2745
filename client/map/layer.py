"""The map's rows held above its tables: a writer's layer, as it is and as committed.

A writer holding rows back (``cache`` rule *held rows*) folds batches into a layer and
writes it later (``stored`` rule *rows held back*). Rules:

1. **A layer is the difference from the tables at one size.** The groups and records
   that differ from the tables at ``base``, and the root and size they bring the map to.
2. **A committed layer never changes.** It shares the live layer's dicts through
   ``client.history``, so taking one costs O(1) and a reader never sees a later batch.
3. **A reader's view is taken before its read**; ``ViewMoved`` says take a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deplog.client.history import History, Snapshot
from deplog.client.map.nodes import ChildRef


@dataclass
class MapLayer:
    """A writer's own layer (rule 1), changed only through its methods (rule 2)."""

    base: int
    size: int
    root: ChildRef | None
    root_value: bytes | None
    groups: dict[bytes, bytes] = field(default_factory=dict)
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
        """Drop, and return, the rows of ``written`` (now in the tables) not changed since."""
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
    """A writer's layer as of one of its commits (rule 2), for readers and slices."""

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
    """What a reader takes before it reads (rule 3): the committed layer, and slices then."""

    layer: CommittedLayer | None = None
    slices: int = 0
