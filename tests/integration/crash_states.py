"""The files a power cut can leave behind, from a recorded sequence of file operations.

A process killed by SIGKILL leaves the page cache intact: every ``write`` that
returned is on disk eventually. A power cut keeps only what reached the disk,
and a filesystem may write back unsynced data in any order. This module
enumerates those outcomes, in the manner of ALICE (Pillai et al., OSDI 2014)
and CrashMonkey (Mohan et al., OSDI 2018), for one data directory.

The model, precisely:

* Operations are ``Write`` (bytes at an offset of a file), ``Truncate``,
  ``Create``, ``Unlink`` and ``Rename`` (names in the directory), and ``Sync``
  (an ``fsync``/``fdatasync`` that returned, of a file or of the directory).
  Files are identified by inode, so data written through a name follows the
  file across renames and is orphaned when its name is gone.
* A crash point ``p`` means the operations before ``p`` were issued and none
  after. An operation is *durable* at ``p`` if a ``Sync`` of its file (data
  operations) or of the directory (name operations) was issued after it and
  before ``p``. Nothing else is assumed: no ordering between unsynced
  operations (ext4 ``data=ordered`` gives more; we do not rely on it), and the
  creation of a file is durable only once the directory is synced.
* The operations issued but not durable are *in flight*; a crash state applies
  the durable ones plus a subset of the in-flight ones, in issue order (where a
  later write overlaps an earlier one, the page cache held the later one, so a
  persisted later write wins). Explored subsets, per crash point:
  every prefix (ALICE's "prefix" states), every set missing exactly one
  operation and every single operation alone (reorderings: a later operation
  reached the disk before earlier ones), and torn writes: a prefix of the
  in-flight operations followed by one write of which only its first sectors
  persisted, or, when it extended the file, the new length without the data
  (zeros), as a file system that journals metadata only can leave it.
* Writes are atomic per 512-byte sector; a sector never holds a mix of old and
  new bytes.
* Crash points are the instants just before each ``Sync`` (when the most is in
  flight) and the end of the recording.

Two crash states are the same state if they leave the same names with the same
bytes; ``explore`` yields each distinct state once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIRECTORY",
    "SECTOR",
    "CrashState",
    "Create",
    "FileOp",
    "Rename",
    "Snapshot",
    "Sync",
    "Truncate",
    "Unlink",
    "Write",
    "crash_points",
    "explore",
    "materialize",
    "write_files",
]

SECTOR = 512
DIRECTORY = -1
"""The inode number a ``Sync`` of the data directory itself carries."""


@dataclass(frozen=True)
class Write:
    inode: int
    offset: int
    data: bytes


@dataclass(frozen=True)
class Truncate:
    inode: int
    size: int


@dataclass(frozen=True)
class Create:
    name: str
    inode: int


@dataclass(frozen=True)
class Unlink:
    name: str


@dataclass(frozen=True)
class Rename:
    source: str
    target: str


@dataclass(frozen=True)
class Sync:
    """An fsync or fdatasync that returned: of a file's inode, or of ``DIRECTORY``."""

    inode: int


FileOp = Write | Truncate | Create | Unlink | Rename | Sync


@dataclass(frozen=True)
class Snapshot:
    """The directory before the recording: names to inodes, inodes to bytes."""

    names: dict[str, int]
    contents: dict[int, bytes]


@dataclass(frozen=True)
class CrashState:
    """What survived a power cut at ``point``: ``files`` by name, and how it was chosen."""

    point: int
    kind: str
    files: dict[str, bytes]

    def digest(self) -> str:
        """Identical for two states that leave the same names with the same bytes."""
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        return h.hexdigest()


def _target(op: FileOp) -> int:
    """The inode a ``Sync`` must name for ``op`` to be durable."""
    if isinstance(op, Write | Truncate):
        return op.inode
    return DIRECTORY


def _durable(ops: Sequence[FileOp], point: int) -> list[bool]:
    """For each operation before ``point``: is it covered by a later Sync before ``point``?"""
    synced_after: set[int] = set()
    durable = [False] * point
    for i in range(point - 1, -1, -1):
        op = ops[i]
        if isinstance(op, Sync):
            synced_after.add(op.inode)
            durable[i] = True
        else:
            durable[i] = _target(op) in synced_after
    return durable


def crash_points(ops: Sequence[FileOp]) -> list[int]:
    """Just before every Sync, and after the last operation."""
    points = [i for i, op in enumerate(ops) if isinstance(op, Sync)]
    return [*points, len(ops)]


@dataclass
class _Tree:
    names: dict[str, int]
    contents: dict[int, bytearray]

    def apply(self, op: FileOp, torn: str | None = None) -> None:
        if isinstance(op, Write):
            data = self.contents.setdefault(op.inode, bytearray())
            payload = op.data
            if torn == "sectors":
                payload = payload[: max(SECTOR, (len(payload) // 2) // SECTOR * SECTOR)]
            elif torn == "zeros":
                payload = bytes(len(payload))
            end = op.offset + len(payload)
            if len(data) < op.offset:
                data.extend(bytes(op.offset - len(data)))
            data[op.offset : end] = payload
        elif isinstance(op, Truncate):
            data = self.contents.setdefault(op.inode, bytearray())
            del data[op.size :]
            data.extend(bytes(op.size - len(data)))
        elif isinstance(op, Create):
            self.names[op.name] = op.inode
            self.contents.setdefault(op.inode, bytearray())
        elif isinstance(op, Unlink):
            self.names.pop(op.name, None)
        elif isinstance(op, Rename) and op.source in self.names:
            self.names[op.target] = self.names.pop(op.source)

    def files(self) -> dict[str, bytes]:
        return {name: bytes(self.contents.get(inode, b"")) for name, inode in self.names.items()}


def materialize(
    snapshot: Snapshot,
    ops: Sequence[FileOp],
    point: int,
    persisted: set[int],
    torn: tuple[int, str] | None = None,
) -> dict[str, bytes]:
    """The files after a crash at ``point`` where the in-flight operations ``persisted``
    (indexes into ``ops``) reached the disk, and ``torn`` (index, "sectors" or "zeros")
    reached it partly."""
    tree = _Tree(dict(snapshot.names), {i: bytearray(b) for i, b in snapshot.contents.items()})
    durable = _durable(ops, point)
    for i in range(point):
        if torn is not None and i == torn[0]:
            tree.apply(ops[i], torn[1])
        elif durable[i] or i in persisted:
            tree.apply(ops[i])
    return tree.files()


def _choices(
    ops: Sequence[FileOp], snapshot: Snapshot, point: int
) -> Iterator[tuple[str, set[int], tuple[int, str] | None]]:
    durable = _durable(ops, point)
    flight = [i for i in range(point) if not durable[i]]
    for k in range(len(flight) + 1):
        yield f"prefix {k}/{len(flight)}", set(flight[:k]), None
    for j, i in enumerate(flight):
        yield f"without op {i}", set(flight) - {i}, None
        yield f"only op {i}", {i}, None
        op = ops[i]
        if isinstance(op, Write) and len(op.data) > SECTOR:
            yield f"op {i} torn", set(flight[:j]), (i, "sectors")
        if isinstance(op, Write) and _extends(snapshot, ops, i):
            yield f"op {i} length without data", set(flight[:j]), (i, "zeros")


def _extends(snapshot: Snapshot, ops: Sequence[FileOp], index: int) -> bool:
    """Does write ``index`` grow its file (as issued)?"""
    op = ops[index]
    assert isinstance(op, Write)
    size = len(snapshot.contents.get(op.inode, b""))
    for earlier in ops[:index]:
        if isinstance(earlier, Write) and earlier.inode == op.inode:
            size = max(size, earlier.offset + len(earlier.data))
        elif isinstance(earlier, Truncate) and earlier.inode == op.inode:
            size = earlier.size
    return op.offset + len(op.data) > size


def explore(snapshot: Snapshot, ops: Sequence[FileOp]) -> Iterator[CrashState]:
    """Every distinct crash state of the model, crash point by crash point."""
    seen: set[str] = set()
    for point in crash_points(ops):
        for kind, persisted, torn in _choices(ops, snapshot, point):
            state = CrashState(point, kind, materialize(snapshot, ops, point, persisted, torn))
            digest = state.digest()
            if digest not in seen:
                seen.add(digest)
                yield state


def write_files(files: dict[str, bytes], directory: Path) -> None:
    """Lay a crash state out as real files."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
