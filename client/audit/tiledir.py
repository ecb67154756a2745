"""A tiles directory as an auditor's archive: the format the log publishes, read and mirrored.

A tiles directory holds ``checkpoint`` and the C2SP tlog-tiles of its tree
(``client.tlog.tiles``): what the authority writes and a CDN serves. Rules:

1. ``tiles_dir_leaves`` yields the checkpoint's leaves a bundle at a time, each only once
   it and the tiles on its way to the root hash to the checkpoint's root (``bad_tile``;
   wrong lengths ``malformed_tile``, ``malformed_bundle``; a missing file
   ``missing_input``). Each file is read against its bound (``file_too_large``); a
   missing partial tile is cut from its full one, as the spec allows.
2. ``mirror_tiles`` makes a directory the copy of a source at its checkpoint: tiles
   present are read, the others fetched, each bundle's checked before any is written.
   Files are written atomically and the checkpoint last (never an older one over a
   newer), so a killed mirroring holds only verified tiles, and a rerun fetches only
   what is missing.
3. Memory is one window of bundles and the tiles above level 0, never the log.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from deplog.client.audit.offline import AuditInputError
from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.tiles import cut_to_width, full_tile, max_tile_bytes
from deplog.client.plumbing.files import write_atomic
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import MAX_NOTE_SIZE, parse_note
from deplog.client.tlog.tiles import (
    EntryTile,
    HashTile,
    entry_bundle_tiles,
    entry_tiles,
    verify_entry_bundle,
)

CHECKPOINT_FILE: Final = "checkpoint"
_WINDOW: Final = 8

Tile = HashTile | EntryTile
FetchTile = Callable[[Tile], Awaitable[bytes]]
"""Returns the bytes a source serves for a tile (a partial one possibly cut from its full tile)."""


def _read_file(path: Path, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return None
    if len(data) > limit:
        raise AuditInputError(ErrorCode.FILE_TOO_LARGE, "a tile file is over its bound")
    return data


def _read_local(directory: Path, tile: Tile) -> bytes | None:
    """``tile`` from ``directory``, from its full tile if only that is there; None if neither."""
    data = _read_file(directory / tile.path, max_tile_bytes(tile))
    if data is None and tile.partial:
        full = full_tile(tile)
        whole = _read_file(directory / full.path, max_tile_bytes(full))
        data = None if whole is None else cut_to_width(tile, whole)
    return data


def _tree(note: bytes) -> Checkpoint:
    """The tree a note names; its signature is the replay's (or the caller's) to verify."""
    return Checkpoint.from_text(parse_note(note)[0])


class _Tiles:
    """The hash tiles above level 0 and the partial ones, kept once read (rule 1's memory)."""

    def __init__(self) -> None:
        self.kept: dict[HashTile, bytes] = {}

    def needs(self, bundle: EntryTile, size: int) -> list[HashTile]:
        return [t for t in entry_bundle_tiles(bundle, size) if t not in self.kept]

    def keep(self, tile: HashTile, data: bytes) -> None:
        if tile.level > 0 or tile.partial:
            self.kept[tile] = data


def tiles_dir_leaves(directory: Path, note: bytes) -> Iterator[bytes]:
    """The leaves of ``note``'s tree from the tiles in ``directory``, verified (rule 1)."""
    checkpoint = _tree(note)
    size, root = checkpoint.size, checkpoint.root_hash
    tiles = _Tiles()

    def read(tile: Tile) -> bytes:
        data = _read_local(directory, tile)
        if data is None:
            raise AuditInputError(ErrorCode.MISSING_INPUT, "a tile the checkpoint needs is missing")
        return data

    for bundle in entry_tiles(size):
        fetched = {tile: read(tile) for tile in tiles.needs(bundle, size)}
        known = tiles.kept | fetched
        entries = verify_entry_bundle(bundle, read(bundle), size, root, known.__getitem__)
        for tile, data in fetched.items():
            tiles.keep(tile, data)
        yield from entries


@dataclass(frozen=True)
class MirrorReport:
    """What a mirroring did: the checkpoint in place, and the tiles fetched or kept."""

    checkpoint: Checkpoint
    fetched: int
    kept: int


async def mirror_tiles(directory: Path, note: bytes, fetch: FetchTile) -> MirrorReport:
    """Make ``directory`` the tiles of the source's ``note``, fetching what it lacks (rule 2)."""
    checkpoint = _tree(note)
    size, root = checkpoint.size, checkpoint.root_hash
    tiles = _Tiles()
    fetched = kept = 0

    async def obtain(tile: Tile) -> tuple[bytes, bool]:
        data = await asyncio.to_thread(_read_local, directory, tile)
        if data is not None:
            return data, False
        return await fetch(tile), True

    bundles = entry_tiles(size)
    while window := list(itertools.islice(bundles, _WINDOW)):
        wanted: list[Tile] = list(window)
        wanted += sorted({tile for bundle in window for tile in tiles.needs(bundle, size)})
        got = dict(zip(wanted, await asyncio.gather(*map(obtain, wanted)), strict=True))
        known = tiles.kept | {t: data for t, (data, _) in got.items() if isinstance(t, HashTile)}
        for bundle in window:
            verify_entry_bundle(bundle, got[bundle][0], size, root, known.__getitem__)
        for tile, (data, new) in got.items():
            if isinstance(tile, HashTile):
                tiles.keep(tile, data)
            if new:
                await asyncio.to_thread(_write_tile, directory / tile.path, data)
                fetched += 1
            else:
                kept += 1
    if not _newer_in_place(directory, size):
        await asyncio.to_thread(_write_tile, directory / CHECKPOINT_FILE, note)
    return MirrorReport(checkpoint, fetched, kept)


def _newer_in_place(directory: Path, size: int) -> bool:
    """Whether ``directory`` already holds a checkpoint of a bigger tree (rule 2)."""
    previous = _read_file(directory / CHECKPOINT_FILE, MAX_NOTE_SIZE)
    try:
        return previous is not None and _tree(previous).size > size
    except DeplogError:
        return False


def _write_tile(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, [data])
