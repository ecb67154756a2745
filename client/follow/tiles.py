"""A log read from its C2SP tlog-tiles as a ``LogSource``: static files, any server or CDN.

A tiles base URL serves ``<base>/checkpoint`` and ``<base>/tile/...``
(``client.tlog.tiles``); the source computes consistency proofs from hash tiles itself,
as the Go sumdb client does. Rules:

1. Bounds and redirects are ``client.follow.http``'s: a total timeout, each body read
   against the spec's maximum for what was asked (``response_too_large``), redirects
   within the base URL's origin only; any status but 200 and 404 is ``fetch_failed``.
2. Every tile is authenticated against the root of the checkpoint this source fetched
   before any hash of it is used (``bad_tile``; bytes of the wrong shape
   ``malformed_tile``, ``malformed_bundle``): a failed fetch, nothing kept. So a stale or
   corrupt tile never reaches the trust state as a failing proof, never a suspected fork.
3. A partial tile that is gone (404) is read from its full tile, cut to its width (the
   spec's fallback), and authenticated like any other.
4. ``entries`` answers up to ``BUNDLES_PER_CALL`` bundles, fetched in parallel, ending on a
   bundle boundary where it can; a bundle's own leaf hashes stand for its level-0 tile.
5. Authenticated hash tiles are kept in a bounded cache (``CACHE_TILES``) that only spares
   fetches: every answer authenticates again, and a failure empties it.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import aiohttp

from deplog.client.errors import DeplogError, ErrorCode
from deplog.client.follow.http import (
    DEFAULT_TIMEOUT,
    MAX_CHECKPOINT_BYTES,
    MAX_REDIRECTS,
    NOT_A_LOG,
    HttpClient,
    read_bounded,
    unreachable,
)
from deplog.client.follow.source import FetchError
from deplog.client.tlog.checkpoint import Checkpoint
from deplog.client.tlog.note import parse_note
from deplog.client.tlog.proofs import HASH_SIZE, ConsistencyProof
from deplog.client.tlog.tiles import (
    MAX_ENTRY_SIZE,
    TILE_WIDTH,
    EntryTile,
    HashTile,
    consistency_tiles,
    decode_entry_bundle,
    encode_entry_bundle,
    entry_bundles_tiles,
    prove_consistency,
    verify_entry_bundles,
)

__all__ = [
    "MAX_REDIRECTS",
    "TilesLogSource",
    "cut_to_width",
    "full_tile",
    "max_tile_bytes",
    "publishes_tiles",
]

BUNDLES_PER_CALL: Final = 4
"""Entry bundles one ``entries`` call fetches in parallel (1024 leaves, over a 1000-leaf page)."""
CACHE_TILES: Final = 1024
"""Authenticated hash tiles kept (8 MiB at most); a 10^9-leaf tree has ~16 k tiles above level 0."""
_KEEP_TREES: Final = 4


def max_tile_bytes(tile: HashTile | EntryTile) -> int:
    """The spec's largest body for ``tile``: its hashes, or its entries at 65535 bytes each."""
    if isinstance(tile, HashTile):
        return tile.width * HASH_SIZE
    return tile.width * (2 + MAX_ENTRY_SIZE)


def full_tile(tile: HashTile | EntryTile) -> HashTile | EntryTile:
    """The full tile at ``tile``'s place, the one that replaces it once the tree fills it."""
    if isinstance(tile, EntryTile):
        return EntryTile(tile.index)
    return HashTile(tile.level, tile.index)


def cut_to_width(tile: HashTile | EntryTile, full_data: bytes) -> bytes:
    """``tile``'s bytes from those served for its full tile (rule 3); bytes that are no full
    hash tile are returned whole, for the length check to refuse."""
    if isinstance(tile, HashTile):
        if len(full_data) != TILE_WIDTH * HASH_SIZE:
            return full_data
        return full_data[: tile.width * HASH_SIZE]
    entries = decode_entry_bundle(EntryTile(tile.index), full_data)
    return encode_entry_bundle(tile, entries[: tile.width])


class TilesLogSource(HttpClient):
    """A log read from the tlog-tiles under ``url``, with rules 1 to 5."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("a tiles URL is http or https")
        super().__init__(timeout, session)
        self._trees: OrderedDict[int, bytes] = OrderedDict()
        self._cache: OrderedDict[HashTile, bytes] = OrderedDict()

    async def checkpoint(self) -> bytes:
        """``<base>/checkpoint``; its tree (size, root) is what tiles are checked against."""
        note = await self._get("checkpoint", MAX_CHECKPOINT_BYTES)
        if note is None:
            raise FetchError(ErrorCode.FETCH_FAILED, NOT_A_LOG)
        try:
            checkpoint = Checkpoint.from_text(parse_note(note)[0])
        except DeplogError:
            return note  # the trust state refuses it, with its own error
        self._trees[checkpoint.size] = checkpoint.root_hash
        self._trees.move_to_end(checkpoint.size)
        while len(self._trees) > _KEEP_TREES:
            self._trees.popitem(last=False)
        return note

    async def consistency(self, old: int, new: int) -> ConsistencyProof:
        """PROOF(old, D[0:new]) computed from hash tiles of the tree of ``new`` (rule 2)."""
        root = await self._root(new)
        if not 0 <= old <= new:
            raise FetchError(ErrorCode.FETCH_FAILED, "no proof between those sizes")
        tiles = await self._hash_tiles(consistency_tiles(old, new))
        with self._authenticating():
            path = prove_consistency(old, new, root, tiles.__getitem__)
        self._keep(tiles)
        return ConsistencyProof(old, new, tuple(path))

    async def entries(self, start: int, end: int) -> Sequence[bytes]:
        """Leaves from ``start``: whole bundles up to a bundle boundary where one lies
        in ``(start, end]``, at most ``BUNDLES_PER_CALL`` of them (rule 4)."""
        size, root = self._tree_covering(end)
        if not 0 <= start < end:
            raise FetchError(ErrorCode.FETCH_FAILED, "no entries in that range")
        first = start // TILE_WIDTH
        if (aligned := end - end % TILE_WIDTH) > start:
            end = aligned
        last = min((end - 1) // TILE_WIDTH, first + BUNDLES_PER_CALL - 1)
        bundles = [_bundle_in_tree(index, size) for index in range(first, last + 1)]
        hashes, datas = await asyncio.gather(
            self._hash_tiles(entry_bundles_tiles(bundles, size)),
            asyncio.gather(*(self.fetch_tile(b) for b in bundles)),
        )
        with self._authenticating():
            verified = verify_entry_bundles(
                list(zip(bundles, datas, strict=True)), size, root, hashes.__getitem__
            )
        leaves = [leaf for entries in verified for leaf in entries]
        self._keep(hashes)
        offset = start - first * TILE_WIDTH
        return leaves[offset : offset + min(end, (last + 1) * TILE_WIDTH) - start]

    async def fetch_tile(self, tile: HashTile | EntryTile) -> bytes:
        """The bytes served for ``tile``, bounded but unchecked, or cut from its full tile."""
        data = await self._get(tile.path, max_tile_bytes(tile))
        if data is not None:
            return data
        if not tile.partial:
            raise FetchError(ErrorCode.FETCH_FAILED, "HTTP 404")
        full = full_tile(tile)
        data = await self._get(full.path, max_tile_bytes(full))
        if data is None:
            raise FetchError(ErrorCode.FETCH_FAILED, "HTTP 404")
        return cut_to_width(tile, data)

    async def _hash_tiles(self, tiles: Iterable[HashTile]) -> dict[HashTile, bytes]:
        """Each of ``tiles``: from the cache, or fetched (in parallel); not yet authenticated."""
        found = {tile: self._cache[tile] for tile in tiles if tile in self._cache}
        missing = [tile for tile in tiles if tile not in found]
        for tile, data in zip(
            missing, await asyncio.gather(*(self.fetch_tile(t) for t in missing)), strict=True
        ):
            found[tile] = data
        return found

    def _keep(self, tiles: dict[HashTile, bytes]) -> None:
        """Cache tiles that have just been authenticated (rule 5)."""
        for tile, data in tiles.items():
            self._cache[tile] = data
            self._cache.move_to_end(tile)
        while len(self._cache) > CACHE_TILES:
            self._cache.popitem(last=False)

    @contextlib.contextmanager
    def _authenticating(self) -> Iterator[None]:
        """Checks over fetched tiles run inside; any failure empties the cache (rule 5)."""
        try:
            yield
        except DeplogError:
            self._cache.clear()
            raise

    async def _root(self, size: int) -> bytes:
        """The root of the fetched checkpoint of ``size``, fetching the checkpoint once more."""
        if size not in self._trees:
            await self.checkpoint()
        root = self._trees.get(size)
        if root is None:
            raise FetchError(ErrorCode.FETCH_FAILED, "the tiles hold no checkpoint of that size")
        return root

    def _tree_covering(self, end: int) -> tuple[int, bytes]:
        """The newest fetched tree holding leaf ``end - 1``."""
        for size in reversed(self._trees):
            if size >= end:
                return size, self._trees[size]
        raise FetchError(ErrorCode.FETCH_FAILED, "the tiles hold no checkpoint that far")

    async def _get(self, path: str, limit: int) -> bytes | None:
        """The body of a 200 answer for ``path`` (None for 404), within ``limit`` (rule 1)."""
        try:
            async with self.request(f"{self.url}/{path}") as response:
                if response.status == 404:
                    return None
                if response.status != 200:
                    raise FetchError(ErrorCode.FETCH_FAILED, f"HTTP {response.status}")
                return await read_bounded(response, limit)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise unreachable(err) from None


async def publishes_tiles(source: TilesLogSource) -> bool:
    """Whether ``source`` serves the first level-0 tile of its checkpoint's tree (no error)."""
    try:
        await source.checkpoint()
        size, _ = source._tree_covering(1)
        tile = HashTile(0, 0, min(TILE_WIDTH, size))
        return len(await source.fetch_tile(tile)) == tile.width * HASH_SIZE
    except DeplogError:
        return False


def _bundle_in_tree(index: int, size: int) -> EntryTile:
    """Entry bundle ``index`` as the tree of ``size`` has it, full or partial."""
    width = min(TILE_WIDTH, size - index * TILE_WIDTH)
    return EntryTile(index, width)
