"""The tiles directory: the log published as C2SP tlog-tiles static files.

The database is the log; the tiles directory is a copy any web server, object store or CDN
can serve and any tlog-tiles client can read: hash tiles, entry bundles and ``checkpoint``,
the note ``GET /checkpoint`` serves. The format is ``client.tlog.tiles``; this module only
decides what to write and when.

Rules:

1. Every file is written with ``write_atomic``: a reader sees a whole tile or none
   (temporary files are dot-files, which neither the authority nor nginx serves).
2. Tiles before checkpoints. A tree's tiles are written on the writer thread after its
   batch commits and before its checkpoint is published (:meth:`TilesDirectory.extend`);
   the ``checkpoint`` file, rewritten on the same thread whenever the served note changes,
   first makes sure every partial tile of its size exists. A tile that cannot be written
   fails the batch (503 ``storage_unavailable``); the next batch writes what is missing.
3. Tile bytes come only from the database, read per tile on the writer thread, at most
   ``WRITERS`` tiles held and written at once (their fsyncs overlap): memory is bounded.
4. Full tiles are never rewritten or removed. A partial tile stays until the ``checkpoint``
   file names a tree holding its full tile, then goes (tlog-tiles, "Partial Tiles"): a
   reader of any checkpoint finds its partial tiles, or the full ones the spec falls back
   to. A start removes the partial tiles of full tiles, but the checkpoint file's own.
5. Start-up completes the directory from the database before anything is served
   (:meth:`TilesDirectory.open`): a ``checkpoint`` file not signed by the log key over the
   database's tree, or a tile whose bytes differ, is proven corruption, and the authority
   refuses to start (exit 65) naming the file. A leaf that no longer hashes right is the
   database's damage: a tile that is there is kept, a missing one never written from it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from deplog.authority.log import Log
from deplog.authority.storage.errors import IntegrityError
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.plumbing.dbapi import Connection
from deplog.client.plumbing.files import write_atomic
from deplog.client.plumbing.storage_faults import CORRUPT, FaultKind, StorageFault
from deplog.client.tlog.checkpoint import open_checkpoint
from deplog.client.tlog.proofs import leaf_hash
from deplog.client.tlog.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    EntryTile,
    HashTile,
    encode_entry_bundle,
    encode_hash_tile,
    entry_tiles,
    hash_tiles,
)

log = logging.getLogger("deplog.tiles")

CHECKPOINT_FILE: Final = "checkpoint"
WRITERS: Final = 8
"""Tiles written at once (rule 3)."""

TILES_CORRUPT: Final = FaultKind(
    "storage_corrupt",
    65,
    "a file of the tiles directory differs from the log's database (proven)",
    "keep a copy of it for inspection, move it out of the tiles directory and start again: "
    "the authority rewrites every missing tile from its database",
)

Tile = HashTile | EntryTile
"""A hash tile or an entry bundle: each is one file of the directory."""

_TEMPORARY_SUFFIX: Final = ".tmp"


def partial_tiles(size: int) -> list[Tile]:
    """The partial tiles of the tree of ``size`` leaves: at most one per level, and a bundle."""
    out: list[Tile] = []
    level = 0
    while hashes := size >> (TILE_HEIGHT * level):
        if width := hashes % TILE_WIDTH:
            out.append(HashTile(level, hashes // TILE_WIDTH, width))
        level += 1
    if width := size % TILE_WIDTH:
        out.append(EntryTile(size // TILE_WIDTH, width))
    return out


def tile_bytes(conn: Connection, tile: Tile) -> bytes:
    """The bytes of ``tile`` from the log's database, 256 rows at most (rule 3)."""
    if isinstance(tile, EntryTile):
        first = tile.leaf_indices.start
        rows = conn.execute(
            "SELECT data, hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
            (first, first + tile.width),
        ).fetchall()
        if len(rows) != tile.width:
            raise _DatabaseAlteredError(f"the database lacks the leaves of {tile.path}")
        entries = [bytes(data) for data, _ in rows]
        for index, (entry, (_, digest)) in enumerate(zip(entries, rows, strict=True)):
            if leaf_hash(entry) != bytes(digest):
                leaf = first + index
                raise _DatabaseAlteredError(f"leaf {leaf} does not match its stored hash")
        return encode_entry_bundle(tile, entries)
    first = tile.node_indices.start
    if tile.level == 0:
        rows = conn.execute(
            "SELECT hash FROM leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
            (first, first + tile.width),
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT hash FROM nodes WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx",
            (tile.node_height, first, first + tile.width),
        ).fetchall()
    if len(rows) != tile.width:
        raise _DatabaseAlteredError(f"the database lacks the hashes of {tile.path}")
    return encode_hash_tile(tile, [bytes(row[0]) for row in rows])


def _complete_file(job: tuple[Path, bytes | StorageFault]) -> None:
    """Write a missing tile; check one that is there (rule 5)."""
    path, data = job
    try:
        existing = path.read_bytes()
    except FileNotFoundError:
        if isinstance(data, StorageFault):
            raise data from None
        _make_public_directories(path.parent)
        write_atomic(path, [data])
        return
    if isinstance(data, StorageFault):
        log.warning("%s not checked: %s", path, data.evidence)
        return
    if existing != data:
        raise StorageFault(TILES_CORRUPT, path, "its bytes differ from the database's")


def _make_public_directories(directory: Path) -> None:
    """Create ``directory`` and its missing parents 0755 whatever the umask: tiles are public."""
    if directory.is_dir():
        return
    _make_public_directories(directory.parent)
    with contextlib.suppress(FileExistsError):  # another writer thread made it meanwhile
        directory.mkdir()
        directory.chmod(0o755)


def _new_tiles(size: int, since: int) -> Iterator[Tile]:
    """The tiles of the tree of ``size`` leaves that the tree of ``since`` lacks."""
    yield from entry_tiles(size, since=since)
    yield from hash_tiles(size, since=since)


class _DatabaseAlteredError(Exception):
    """The database cannot give a committed tree's tile: its storage was altered."""


def served_tile(conn: Connection, tile: Tile) -> bytes:
    """``tile_bytes`` for a request: stored data that fails its own check is IntegrityError."""
    try:
        return tile_bytes(conn, tile)
    except _DatabaseAlteredError as err:
        raise IntegrityError(ErrorCode.STORAGE_CORRUPT, str(err)) from None


class TilesDirectory:
    """The writer of one log's tiles directory, on the log's writer thread."""

    def __init__(self, root: Path, log: Log) -> None:
        self.root = root
        self.log = log
        self.size = 0
        self.named = 0
        """The size of the tree the ``checkpoint`` file names."""
        self._io = concurrent.futures.ThreadPoolExecutor(WRITERS, thread_name_prefix="tiles")

    @classmethod
    def open(cls, root: Path, log: Log) -> TilesDirectory:
        """Complete ``root`` from ``log``'s database (rule 5); StorageFault when it is wrong."""
        _make_public_directories(root)
        tiles = cls(root, log)
        tiles.named = tiles.size = tiles._checked_checkpoint_file()
        tiles._sweep()
        tiles._complete(partial_tiles(tiles.named))
        tiles.extend(log.tree.size)
        return tiles

    def extend(self, size: int) -> None:
        """Write every tile of the tree of ``size`` leaves that the directory lacks (rule 2)."""
        if size <= self.size:
            return
        new = _new_tiles(size, self.size)
        while group := list(itertools.islice(new, WRITERS)):
            self._complete(group)
        self.size = size

    def publish_checkpoint(self, size: int, note: bytes) -> None:
        """Make ``checkpoint`` hold ``note``, a note for ``size`` (rules 2 and 4)."""
        self.extend(size)
        current = partial_tiles(size)
        self._complete([tile for tile in current if not self._path(tile).exists()])
        write_atomic(self.root / CHECKPOINT_FILE, [note])
        if size > self.named:
            for tile in _new_tiles(size, self.named):
                if not tile.partial:
                    self._remove_partials(tile)
        self.named = size

    def _complete(self, tiles: list[Tile]) -> None:
        """Write the missing ones of a few tiles at once, checking the others (rule 5)."""
        for _ in self._io.map(_complete_file, [(self._path(t), self._bytes(t)) for t in tiles]):
            pass

    def close(self) -> None:
        """Stop the writing threads (after the writes in progress)."""
        self._io.shutdown(wait=True)

    def _bytes(self, tile: Tile) -> bytes | StorageFault:
        try:
            return tile_bytes(self.log.conn, tile)
        except _DatabaseAlteredError as err:
            return StorageFault(CORRUPT, self.log.path, str(err))

    def _path(self, tile: Tile) -> Path:
        return self.root / tile.path

    def _remove_partials(self, full: Tile) -> None:
        """Remove the partial tiles of ``full``, a tile of the published tree (rule 4)."""
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(f"{self._path(full)}.p")

    def _checked_checkpoint_file(self) -> int:
        """The size the checkpoint file names, once it is shown to be this log's; 0 if none."""
        path = self.root / CHECKPOINT_FILE
        try:
            note = path.read_bytes()
        except FileNotFoundError:
            return 0
        try:
            checkpoint, _ = open_checkpoint(note, self.log.verifier)
        except DeplogError as err:
            evidence = f"not a note of this log ({err.code})"
            raise StorageFault(TILES_CORRUPT, path, evidence) from None
        tree = self.log.tree
        if checkpoint.size > tree.size or tree.root_at(checkpoint.size) != checkpoint.root_hash:
            raise StorageFault(TILES_CORRUPT, path, "its tree is not the database's")
        return checkpoint.size

    def _sweep(self) -> None:
        """Remove temporary files and the partial tiles of full tiles a crash left (rule 4)."""
        for directory, subdirectories, files in os.walk(self.root):
            for name in files:
                if name.startswith(".") and name.endswith(_TEMPORARY_SUFFIX):
                    Path(directory, name).unlink()
            for name in list(subdirectories):
                if name.endswith(".p") and Path(directory, name[:-2]).is_file():
                    shutil.rmtree(Path(directory, name))
                    subdirectories.remove(name)
