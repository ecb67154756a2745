"""C2SP tlog-tiles v0.1.0: tile paths, hash tiles, entry bundles, and proofs read from tiles.

Tiles have height 8: tile N of level L holds hashes N*256 .. N*256+255 of that level,
the roots of perfect subtrees of 256^L leaves; entry bundles hold the leaves of level 0.
Rules (section names are the spec's):

1. Paths ("Merkle Tree", "Log entries") are ``tile/<L>/<N>[.p/<W>]`` and
   ``tile/entries/<N>[.p/<W>]``: L decimal, N in zero-padded three-digit groups prefixed
   ``x`` but the last, W (partial tiles only) 1..255. One path names each tile; any other
   string is ``TilePathError`` (``malformed_tile_path``).
2. A tile lies inside a tree of at most 2^63 - 1 leaves; coordinates past it are refused
   the same way.
3. A tree of ``s`` leaves has, at each level L with s >= 256^L, floor(s / 256^(L+1))
   full tiles and, when W = floor(s / 256^L) mod 256 is not 0, one partial tile of
   width W ("Partial Tiles"); entry bundles follow level 0.
4. A hash tile is exactly 32 bytes per hash of its width (``malformed_tile``); a bundle
   is each entry as a big-endian uint16 length and its bytes, exactly its width of them
   (``malformed_bundle``; an entry over 65535 bytes is ``entry_too_large``).
5. Tiles are untrusted: each is authenticated against a verified checkpoint's root
   before any hash of it is used (the partial tiles hash to the root, a full tile to its
   hash in the tile above), as Go's TileHashReader does; else ``TileError``
   (``bad_tile``), and nothing is returned. A partial tile may be answered by the first
   W hashes of its full tile (the spec's fallback).
6. Asking about what a tree does not have is ``ProofError`` ``bad_proof_request``.

Reading is two steps, so a source may be synchronous or not: the ``*_tiles`` functions
list the tiles an answer reads, and the functions that answer call ``read_tile`` once
for each listed tile and no other.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from deplog.client.errors import ErrorCode, FormatError, VerificationError
from deplog.client.tlog.proofs import (
    EMPTY_ROOT,
    HASH_SIZE,
    MAX_TREE_SIZE,
    ProofError,
    TreeFrontier,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    root_from_leaf_hashes,
)

TILE_HEIGHT: Final = 8
TILE_WIDTH: Final = 1 << TILE_HEIGHT
"""Hashes in a full tile, and entries in a full bundle."""
MAX_LEVEL: Final = 63
"""The highest level the path grammar allows (rule 2 keeps real tiles at 7 or below)."""
MAX_ENTRY_SIZE: Final = 0xFFFF
"""The longest entry a uint16 length prefix can describe."""

_LENGTH_PREFIX: Final = 2
# Seven index groups spell every index below 10^21 > 2^63; longer paths are refused unread.
_PATH: Final = re.compile(
    r"tile/(?:(?P<level>0|[1-9][0-9]?)|entries)"
    r"/(?P<index>(?:x[0-9]{3}/){0,6}[0-9]{3})"
    r"(?:\.p/(?P<width>[1-9][0-9]{0,2}))?"
)


class TilePathError(FormatError):
    """A string that is not the one path of a tile some tree can have."""

    code = ErrorCode.MALFORMED_TILE_PATH


class TileFormatError(FormatError):
    """Hash tile bytes that are not 32 bytes for each hash of the tile's width."""

    code = ErrorCode.MALFORMED_TILE


class TileError(VerificationError):
    """A tile or entry bundle that does not hash to the verified tree it was read for."""

    code = ErrorCode.BAD_TILE


class BundleFormatError(FormatError):
    """A bundle that does not decode, or an entry that cannot be encoded; ``index`` says where."""

    codes = frozenset({ErrorCode.MALFORMED_BUNDLE, ErrorCode.ENTRY_TOO_LARGE})
    code = ErrorCode.MALFORMED_BUNDLE

    def __init__(self, index: int, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(code, message)
        self.index = index


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_coordinates(level: int, index: int, width: int) -> None:
    """Rule 2: a tile's hashes cover (index * 256 + width) * 256^level leaves, at most 2^63 - 1."""
    if not (
        all(_is_int(value) for value in (level, index, width))
        and 0 <= level <= MAX_LEVEL
        and index >= 0
        and 1 <= width <= TILE_WIDTH
        and (index * TILE_WIDTH + width) << (TILE_HEIGHT * level) <= MAX_TREE_SIZE
    ):
        raise TilePathError(message="no tree of at most 2^63 - 1 leaves has this tile")


def _encode_index(index: int) -> str:
    """N as three-digit groups, every group but the last prefixed with x."""
    groups = [f"{index % 1000:03d}"]
    while index >= 1000:
        index //= 1000
        groups.append(f"x{index % 1000:03d}")
    return "/".join(reversed(groups))


def _width_suffix(width: int) -> str:
    return "" if width == TILE_WIDTH else f".p/{width}"


@dataclass(frozen=True, order=True)
class HashTile:
    """Tile ``index`` of ``level``: ``width`` hashes of perfect subtrees of 256^level leaves."""

    level: int
    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        _check_coordinates(self.level, self.index, self.width)

    @property
    def partial(self) -> bool:
        """Partial tiles are never hashed into the level above ("Partial Tiles")."""
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        """Its one path under the log's prefix (rule 1)."""
        return f"tile/{self.level}/{_encode_index(self.index)}{_width_suffix(self.width)}"

    @property
    def node_height(self) -> int:
        """The height in the binary tree of the subtrees whose hashes the tile holds."""
        return TILE_HEIGHT * self.level

    @property
    def node_indices(self) -> range:
        """Which subtrees of ``node_height`` it holds: node i covers leaves of i * 2^height on."""
        first = self.index * TILE_WIDTH
        return range(first, first + self.width)


@dataclass(frozen=True, order=True)
class EntryTile:
    """Entry bundle ``index``: the ``width`` leaves whose hashes level-0 tile ``index`` holds."""

    index: int
    width: int = TILE_WIDTH

    def __post_init__(self) -> None:
        _check_coordinates(0, self.index, self.width)

    @property
    def partial(self) -> bool:
        """Partial bundles belong to one tree size; the full bundle replaces them."""
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        """Its one path under the log's prefix (rule 1)."""
        return f"tile/entries/{_encode_index(self.index)}{_width_suffix(self.width)}"

    @property
    def leaf_indices(self) -> range:
        """Which leaves it holds, in order."""
        first = self.index * TILE_WIDTH
        return range(first, first + self.width)


def parse_tile_path(path: str) -> HashTile | EntryTile:
    """The tile named by ``path`` (rules 1 and 2); only its canonical path is accepted."""
    match = _PATH.fullmatch(path) if isinstance(path, str) else None
    if match is None:
        raise TilePathError(message="not a tile path")
    index = int(match["index"].replace("x", "").replace("/", ""))
    width = TILE_WIDTH if match["width"] is None else int(match["width"])
    level = match["level"]
    tile = EntryTile(index, width) if level is None else HashTile(int(level), index, width)
    if tile.path != path:  # x000 leading groups, or .p/256 on a full tile
        raise TilePathError(message="not the canonical path of its tile")
    return tile


# Which tiles a tree has (rule 3)


def _check_size(size: int) -> None:
    if not (_is_int(size) and 0 <= size <= MAX_TREE_SIZE):
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "tree size outside 0..2^63-1")


def _check_index(index: int, size: int) -> None:
    _check_size(size)
    if not (_is_int(index) and 0 <= index < size):
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "leaf index outside the tree")


def _check_sizes(old: int, new: int) -> None:
    _check_size(old)
    _check_size(new)
    if old > new:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "old size exceeds new size")


def _level_tiles(level: int, size: int, since: int) -> Iterator[tuple[int, int]]:
    """(index, width) of the level's tiles in the tree of ``size`` and not in that of ``since``."""
    hashes, old_hashes = size >> (TILE_HEIGHT * level), since >> (TILE_HEIGHT * level)
    if hashes == old_hashes:
        return
    full = hashes >> TILE_HEIGHT
    for index in range(old_hashes >> TILE_HEIGHT, full):
        yield index, TILE_WIDTH
    if width := hashes % TILE_WIDTH:
        yield full, width


def hash_tiles(size: int, *, since: int = 0) -> Iterator[HashTile]:
    """The hash tiles of the tree of ``size`` leaves that the tree of ``since`` lacks, level 0
    first, left to right (a writer publishes ``hash_tiles(new, since=old)``)."""
    _check_sizes(since, size)
    level = 0
    while size >> (TILE_HEIGHT * level):
        for index, width in _level_tiles(level, size, since):
            yield HashTile(level, index, width)
        level += 1


def entry_tiles(size: int, *, since: int = 0) -> Iterator[EntryTile]:
    """The entry bundles of the tree of ``size`` leaves that the tree of ``since`` lacks."""
    _check_sizes(since, size)
    for index, width in _level_tiles(0, size, since):
        yield EntryTile(index, width)


def _tile_in_tree(level: int, index: int, size: int) -> HashTile:
    """The tile at ``(level, index)`` in the tree of ``size`` leaves, full or partial."""
    hashes = size >> (TILE_HEIGHT * level)
    if index < hashes >> TILE_HEIGHT:
        return HashTile(level, index)
    if index == hashes >> TILE_HEIGHT and hashes % TILE_WIDTH:
        return HashTile(level, index, hashes % TILE_WIDTH)
    raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "the tree has no such tile")


# Hash tiles and entry bundles (rule 4)


def encode_hash_tile(tile: HashTile, hashes: Sequence[bytes]) -> bytes:
    """The bytes of ``tile``: the hashes of its ``node_indices`` at ``node_height``, in order."""
    if len(hashes) != tile.width or not all(
        isinstance(h, bytes) and len(h) == HASH_SIZE for h in hashes
    ):
        raise TileFormatError(message="a tile holds its width of 32-byte hashes")
    return b"".join(hashes)


def decode_hash_tile(tile: HashTile, data: bytes) -> list[bytes]:
    """The hashes in ``data``, which must be exactly ``tile.width`` hashes long."""
    if len(data) != tile.width * HASH_SIZE:
        raise TileFormatError(message="tile length is not 32 bytes per hash of its width")
    return [bytes(data[i : i + HASH_SIZE]) for i in range(0, len(data), HASH_SIZE)]


def encode_entries(entries: Iterable[bytes]) -> Iterator[bytes]:
    """Each entry's bundle encoding, in order and one at a time, so a stream stays a stream."""
    for index, entry in enumerate(entries):
        if len(entry) > MAX_ENTRY_SIZE:
            raise BundleFormatError(index, "entry is over 65535 bytes", ErrorCode.ENTRY_TOO_LARGE)
        yield len(entry).to_bytes(_LENGTH_PREFIX, "big") + bytes(entry)


def decode_entries(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """The entries of a bundle read in order from ``read`` (a binary file's), one at a time;
    a bundle cut short is BundleFormatError at the entry where it ends."""
    index = 0
    while prefix := read(_LENGTH_PREFIX):
        if len(prefix) < _LENGTH_PREFIX:
            raise BundleFormatError(index, f"bundle ends inside the length of entry {index}")
        length = int.from_bytes(prefix, "big")
        entry = read(length)
        if len(entry) < length:
            raise BundleFormatError(index, f"bundle ends inside entry {index}")
        yield entry
        index += 1


def encode_entry_bundle(tile: EntryTile, entries: Sequence[bytes]) -> bytes:
    """The bytes of ``tile``'s bundle: exactly its width of entries, its ``leaf_indices``."""
    if len(entries) != tile.width:
        index = min(len(entries), tile.width)
        raise BundleFormatError(index, "a bundle holds its width of entries")
    return b"".join(encode_entries(entries))


def decode_entry_bundle(tile: EntryTile, data: bytes) -> list[bytes]:
    """The entries of ``tile``'s bundle ``data``: exactly its width of them, nothing after."""
    entries: list[bytes] = []
    for entry in decode_entries(io.BytesIO(data).read):
        if len(entries) == tile.width:
            raise BundleFormatError(tile.width, "bundle holds more entries than its width")
        entries.append(entry)
    if len(entries) < tile.width:
        raise BundleFormatError(len(entries), "bundle holds fewer entries than its width")
    return entries


# Reading: proofs from untrusted tiles (rule 5)

ReadTile: TypeAlias = Callable[[HashTile], bytes]
"""Returns the bytes a source serves for a tile; they are checked before use."""


def _subtrees(lo: int, hi: int) -> list[tuple[int, int]]:
    """The perfect subtrees ``(height, index)`` of D[lo:hi], largest first, whose hashes
    folded from the right are MTH(D[lo:hi]) for every range of RFC 9162's recursion."""
    nodes = []
    while lo < hi:
        height = (hi - lo).bit_length() - 1
        nodes.append((height, lo >> height))
        lo += 1 << height
    return nodes


def _locate(height: int, index: int) -> tuple[int, int, slice]:
    """Where node ``(height, index)`` is: tile level, tile index, and the hashes under it."""
    level, rise = divmod(height, TILE_HEIGHT)
    first = index << rise
    offset = first % TILE_WIDTH
    return level, first >> TILE_HEIGHT, slice(offset, offset + (1 << rise))


def _tiles_for(size: int, starts: Iterable[HashTile]) -> list[HashTile]:
    """``starts`` and what authenticates them: full ancestors, then every partial tile."""
    needed = {
        HashTile(level, hashes >> TILE_HEIGHT, hashes % TILE_WIDTH)
        for level in range(MAX_LEVEL + 1)
        if (hashes := size >> (TILE_HEIGHT * level)) % TILE_WIDTH
    }
    for start in starts:
        tile = start
        while not tile.partial and tile not in needed:
            needed.add(tile)
            tile = _tile_in_tree(tile.level + 1, tile.index >> TILE_HEIGHT, size)
    return sorted(needed)


def _tiles_for_ranges(size: int, ranges: Iterable[tuple[int, int]]) -> list[HashTile]:
    starts = []
    for lo, hi in ranges:
        for height, index in _subtrees(lo, hi):
            level, tile_index, _ = _locate(height, index)
            starts.append(_tile_in_tree(level, tile_index, size))
    return _tiles_for(size, starts)


class _VerifiedTiles:
    """The hashes of some tiles of one tree, each read once and authenticated before use."""

    def __init__(self, size: int, root: bytes, tiles: Sequence[HashTile], read: ReadTile) -> None:
        fetched = {tile: decode_hash_tile(tile, read(tile)) for tile in tiles}
        self._hashes = {(t.level, t.index): h for t, h in fetched.items() if t.partial}
        if self.range_hash(0, size) != root:
            raise TileError(message="the partial tiles do not hash to the tree's root")
        for tile in sorted(fetched, key=lambda t: -t.level):  # each parent before its children
            if tile.partial:
                continue
            parent = _tile_in_tree(tile.level + 1, tile.index >> TILE_HEIGHT, size)
            expected = self._hashes[parent.level, parent.index][tile.index % TILE_WIDTH]
            if root_from_leaf_hashes(fetched[tile]) != expected:
                raise TileError(message="a full tile does not hash to its hash in the tile above")
            self._hashes[tile.level, tile.index] = fetched[tile]

    def tile_hashes(self, tile: HashTile) -> list[bytes]:
        return self._hashes[tile.level, tile.index]

    def range_hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for a range aligned as :func:`_subtrees` requires."""
        nodes = []
        for height, index in _subtrees(lo, hi):
            level, tile_index, under = _locate(height, index)
            nodes.append(root_from_leaf_hashes(self._hashes[level, tile_index][under]))
        return TreeFrontier(hi - lo, nodes).root()


def _check_tree(size: int, root: bytes) -> None:
    _check_size(size)
    if not isinstance(root, bytes) or len(root) != HASH_SIZE:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "a root is 32 bytes")
    if size == 0 and root != EMPTY_ROOT:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "the empty tree's root is SHA-256 of nothing")


def _prove(
    size: int, root: bytes, read: ReadTile, ranges: Sequence[tuple[int, int]]
) -> list[bytes]:
    tiles = _VerifiedTiles(size, root, _tiles_for_ranges(size, ranges), read)
    return [tiles.range_hash(lo, hi) for lo, hi in ranges]


def inclusion_tiles(index: int, size: int) -> list[HashTile]:
    """The tiles :func:`prove_inclusion` reads: at most two per level."""
    _check_index(index, size)
    return _tiles_for_ranges(size, inclusion_ranges(index, size))


def prove_inclusion(index: int, size: int, root: bytes, read_tile: ReadTile) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 from the tiles of the tree of ``size`` and ``root``."""
    _check_tree(size, root)
    _check_index(index, size)
    return _prove(size, root, read_tile, inclusion_ranges(index, size))


def consistency_tiles(old_size: int, size: int) -> list[HashTile]:
    """The tiles :func:`prove_consistency` reads: at most two per level."""
    _check_sizes(old_size, size)
    return _tiles_for_ranges(size, consistency_ranges(old_size, size))


def prove_consistency(old_size: int, size: int, root: bytes, read_tile: ReadTile) -> list[bytes]:
    """PROOF(old_size, D[0:size]) of RFC 9162 from the tiles of the tree of ``size``, ``root``."""
    _check_tree(size, root)
    _check_sizes(old_size, size)
    return _prove(size, root, read_tile, consistency_ranges(old_size, size))


def _level0_tile(bundle: EntryTile, size: int) -> HashTile:
    tile = _tile_in_tree(0, bundle.index, size)
    if tile.width != bundle.width:
        raise ProofError(ErrorCode.BAD_PROOF_REQUEST, "the tree has no such entry bundle")
    return tile


def entry_bundle_tiles(bundle: EntryTile, size: int) -> list[HashTile]:
    """The tiles :func:`verify_entry_bundle` reads: the bundle's level-0 tile and what checks it."""
    _check_size(size)
    return _tiles_for(size, [_level0_tile(bundle, size)])


def verify_entry_bundle(
    bundle: EntryTile, data: bytes, size: int, root: bytes, read_tile: ReadTile
) -> list[bytes]:
    """The entries of ``bundle``, once each hashes to its leaf hash in the authenticated tree."""
    _check_tree(size, root)
    level0 = _level0_tile(bundle, size)
    entries = decode_entry_bundle(bundle, data)
    tiles = _VerifiedTiles(size, root, _tiles_for(size, [level0]), read_tile)
    if [leaf_hash(entry) for entry in entries] != tiles.tile_hashes(level0):
        raise TileError(message="the entry bundle does not hash to its level-0 tile")
    return entries


def entry_bundles_tiles(bundles: Sequence[EntryTile], size: int) -> list[HashTile]:
    """The tiles :func:`verify_entry_bundles` reads: what authenticates the bundles' level-0
    tiles, not those tiles themselves (the bundles' own leaf hashes are their contents)."""
    _check_size(size)
    own = {_level0_tile(bundle, size) for bundle in bundles}
    return [tile for tile in _tiles_for(size, own) if tile not in own]


def verify_entry_bundles(
    bundles: Sequence[tuple[EntryTile, bytes]], size: int, root: bytes, read_tile: ReadTile
) -> list[list[bytes]]:
    """The entries of each bundle, once all of them hash to the authenticated tree: a
    bundle's leaf hashes stand for its level-0 tile, and each tile above is read once."""
    _check_tree(size, root)
    decoded = [
        (_level0_tile(bundle, size), decode_entry_bundle(bundle, data)) for bundle, data in bundles
    ]
    own = {
        tile: encode_hash_tile(tile, [leaf_hash(entry) for entry in entries])
        for tile, entries in decoded
    }

    def read(tile: HashTile) -> bytes:
        return own[tile] if tile in own else read_tile(tile)

    try:
        _VerifiedTiles(size, root, _tiles_for(size, own), read)
    except TileError:
        raise TileError(
            message="an entry bundle or a hash tile does not hash to the tree"
        ) from None
    return [entries for _, entries in decoded]
